"""Process environment for running the pipeline offline, without telemetry, with threads that share cores well.

:func:`configure_environment` runs when ``npmcore`` is first imported, and again at every entry point (CLI, flows,
tests). Values already set by the user win. Most libraries read these variables once, at their own import: where
one was imported first (a notebook, a test process, another package), what they promise is applied through its
own switches (:func:`_apply_to_imported`), so a process is quiet and offline whatever it imported first.
"""

import logging
import os
import sys

DEFAULTS: dict[str, str] = {
    # Prefect's temporary local server needs more than the default 20 s on a loaded 2-core box.
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "true",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    # Nothing may download weights at run time: encoders are local paths or cached names.
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    # transformers' "Loading weights" bar at every encoder load is noise in logs and in `query --json` output.
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    # Parallelism comes from Dask workers; Rust tokenizer threads would oversubscribe cores.
    "TOKENIZERS_PARALLELISM": "false",
    # OpenMP threads (FAISS) that wait at a barrier sleep instead of spinning: while other processes share the
    # cores, a spinning thread burns the time slice its partner needs. Training the demo's index (OPQ48,PQ48np,
    # 21k vectors, two threads) on the loaded 2-core machine took 534 s spinning, 51 s passive (one thread: 42 s).
    "OMP_WAIT_POLICY": "PASSIVE",
    # Dask's INFO lines (every worker registering, every client connecting) would bury the pipeline's own log;
    # workers inherit this too. Warnings and errors still show.
    "DASK_LOGGING__DISTRIBUTED": "warning",
    # The pipeline's own INFO lines (index plan, training and encoding times) in the flow runs' logs and the UI.
    "PREFECT_LOGGING_EXTRA_LOGGERS": "npmcore",
    # ... and outside a flow run (a CLI command, a library call) they go to the console only, without a warning each.
    "PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW": "ignore",
}


def configure_environment() -> None:
    """Set the project's offline/telemetry defaults unless the user already set them, apply them to the Hugging Face
    libraries already imported, and let npmcore's INFO lines through to the handlers Prefect gives it
    (PREFECT_LOGGING_EXTRA_LOGGERS)."""
    for key, value in DEFAULTS.items():
        os.environ.setdefault(key, value)
    _apply_to_imported()
    logging.getLogger("npmcore").setLevel(logging.INFO)


def _is_set(key: str) -> bool:
    return os.environ.get(key, "").strip().lower() in ("1", "true", "yes", "on")


def _apply_to_imported() -> None:
    """huggingface_hub reads offline mode, telemetry and progress bars into constants at its import, and
    transformers its progress bars from them at its own: where either was imported before the environment was set,
    their switches say what the environment now says (the "Loading weights" bar of every encoder load otherwise
    lands in a command's output, before its JSON)."""
    if "huggingface_hub" in sys.modules:
        from huggingface_hub import constants
        from huggingface_hub.utils import disable_progress_bars

        constants.HF_HUB_OFFLINE = constants.HF_HUB_OFFLINE or _is_set("HF_HUB_OFFLINE")
        constants.HF_HUB_DISABLE_TELEMETRY = constants.HF_HUB_DISABLE_TELEMETRY or _is_set("HF_HUB_DISABLE_TELEMETRY")
        if _is_set("HF_HUB_DISABLE_PROGRESS_BARS"):
            disable_progress_bars()
    if "transformers" in sys.modules and _is_set("HF_HUB_DISABLE_PROGRESS_BARS"):
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
