"""Process environment for running the pipeline offline, without telemetry, with threads that share cores well.

Call :func:`configure_environment` at every entry point (CLI, flows, tests) before
Prefect, MLflow, transformers, torch or faiss are imported. Values already set by the user win.
"""

import logging
import os

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
    """Set the project's offline/telemetry defaults unless the user already set them, and let npmcore's
    INFO lines through to the handlers Prefect gives it (PREFECT_LOGGING_EXTRA_LOGGERS)."""
    for key, value in DEFAULTS.items():
        os.environ.setdefault(key, value)
    logging.getLogger("npmcore").setLevel(logging.INFO)
