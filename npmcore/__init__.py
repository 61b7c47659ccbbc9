"""NPM, the Nonparametric Masked Language Model: library code (no Prefect imports)."""

from importlib.metadata import PackageNotFoundError, version

from npmcore.runtime import configure_environment

configure_environment()  # before any module of the package imports transformers, Prefect or MLflow

try:
    __version__ = version("npmcore")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+source"
