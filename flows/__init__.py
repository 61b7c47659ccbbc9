"""Prefect flows: the pipeline stages and the CLI that launches them."""

from npmcore.runtime import configure_environment

configure_environment()  # before Prefect, MLflow or transformers read their settings
