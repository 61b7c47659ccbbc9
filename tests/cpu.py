"""Another CPU pretended in this process: its flags, and what OpenVINO compiles a bf16 hint in there.

``NPM_TEST_CPU=avx2`` runs the suite as an AVX2-only CPU would (no AMX, no AVX512_BF16) on a machine that has
the units: ``tests/conftest.py`` pretends it for the whole session (its shared fixtures too), so that a test that
reads the CPU fails here as it would there (the whole suite passes so: ``NPM_TEST_CPU=avx2 .venv/bin/pytest -n 2
--dist loadgroup``). ``make test`` runs the tests marked ``cpu`` (those that read or pretend the CPU) once more so.

A pretence is whole: the flags ``npmcore.machine.cpu_flags`` answers, and OpenVINO's compile, which on a CPU
without bf16 units takes a bf16 hint without a word and computes float32 (``tests/test_precision.py`` shows it
on such a CPU). What a pretence cannot reach: another process (a Dask worker, a command run as a subprocess) reads
the host's CPU.
"""

import os

import pytest

from npmcore import machine
from npmcore.index import precision

PRETENDED = {"avx2": precision.BF16_UNITS | {"amx_tile", "amx_int8"}}  # NPM_TEST_CPU -> the flags it takes away
AMX = frozenset({"avx2", "avx512f", "amx_tile", "amx_bf16"})  # a CPU with bf16 matrix units
AVX2 = frozenset({"avx2", "fma"})  # one without


def pretended_cpu() -> str | None:
    """``NPM_TEST_CPU`` (None when unset).

    Raises:
        pytest.UsageError: a value other than those of :data:`PRETENDED`.
    """
    name = os.environ.get("NPM_TEST_CPU") or None
    if name is not None and name not in PRETENDED:
        raise pytest.UsageError(f"NPM_TEST_CPU must be one of {', '.join(PRETENDED)}, got {name!r}")
    return name


def test_cpu_flags() -> frozenset[str]:
    """The flags of the CPU the tests run as: the host's, less what ``NPM_TEST_CPU`` takes away."""
    name = pretended_cpu()
    return machine.cpu_flags() - PRETENDED[name] if name else machine.cpu_flags()


test_cpu_flags.__test__ = False  # a helper, not a test


def pretend_flags(monkeypatch: pytest.MonkeyPatch, flags: frozenset[str]) -> None:
    """``cpu_flags`` answers ``flags`` wherever the library reads it; OpenVINO compiles a bf16 hint in f32 where
    they hold no bf16 units. Where they do and the host has none, a real bf16 compile is still refused: a test
    pretending such a CPU pretends its compiles too (``tests/test_precision.py``'s ``probed``)."""
    monkeypatch.setattr(machine, "cpu_flags", lambda: flags)
    monkeypatch.setattr(precision, "cpu_flags", lambda: flags)
    if not precision.has_bf16_units(flags):
        import openvino as ov

        compile_model = ov.Core.compile_model

        def as_f32(self, model, device_name=None, config=None, **kwargs):
            if config and config.get("INFERENCE_PRECISION_HINT") == "bf16":
                config = {**config, "INFERENCE_PRECISION_HINT": "f32"}  # what OpenVINO does on such a CPU
            return compile_model(self, model, device_name, config, **kwargs)

        monkeypatch.setattr(ov.Core, "compile_model", as_f32)
