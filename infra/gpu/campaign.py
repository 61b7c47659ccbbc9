"""One command of a GPU training campaign: train for a number of minutes, stop cleanly, write what comes back.

Runs on a bare CUDA machine (Python with torch, transformers, numpy, pyarrow, fsspec,
safetensors and tokenizers; no network, no installed project: run it from the repository
root). Single GPU, or ``torchrun --nproc-per-node N infra/gpu/campaign.py …`` for several::

    python infra/gpu/campaign.py --bundle gpu-data/enwiki.bundle.parquet --preset gpu-npm \\
        --encoder npmcore/checkpoints/npm-minilm-l6 --minutes 8.5 --run-dir gpu-runs/npm --out "$OUT"

It trains the preset (with any overrides) on the training bundle (``npmcore bundle``) until
``--minutes`` have passed, checkpoints the step it stopped at into ``--run-dir`` and writes
into ``--out``:

* ``encoder/``: the weights in fp16 with the MLM head, split into files of at most 15 MiB
  (a lent machine returns files of at most 16 MiB), and the tokenizer; ``npmcore export``,
  ``npmcore register`` and every loader join the parts;
* ``training.json``: the config, the step reached, tokens/s, peak GPU memory and the mean
  metrics of the last 20 steps (``npmcore register`` logs them to MLflow).

A later command with the same ``--run-dir`` resumes exactly (optimizer, schedule, data
order) while the machine still holds that folder; on a fresh machine, pass the returned
``encoder/`` as ``--encoder``: training continues from its weights with a new optimizer
and schedule. See infra/README.md (GPU campaign) for the whole runbook.
"""

import argparse
import json
import logging
import os
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project is not installed on a lent machine

from npmcore.runtime import configure_environment  # noqa: E402

configure_environment()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from npmcore.train import PRESETS, StepStats, configure, export_checkpoint, train  # noqa: E402

PART_BYTES = 15 << 20  # under the 16 MiB a returned file may have
RESERVE_S = 45  # minutes given minus this: time to write the checkpoint and the encoder before the command limit
log = logging.getLogger("campaign")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bundle", required=True, help="training bundle (*.bundle.parquet) or corpus snapshot URL")
    parser.add_argument("--preset", default="gpu-npm", choices=sorted(PRESETS))
    parser.add_argument(
        "--encoder", help="initial encoder folder (e.g. the shipped checkpoint, or a returned encoder/)"
    )
    parser.add_argument("--minutes", type=float, required=True, help="wall-clock budget of this command")
    parser.add_argument("--run-dir", required=True, help="checkpoints: resumed when it holds some")
    parser.add_argument("--out", required=True, help="folder for what comes back: encoder/ and training.json")
    for name in ("steps", "batch_size", "grad_accum", "warmup_steps", "seed"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=int)
    for name in ("lr", "mlm_weight", "dropout"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=float)
    parser.add_argument("--objective", choices=["npm", "npm-single", "mlm"])
    args = vars(parser.parse_args(argv))
    start = time.monotonic()
    deadline = start + args.pop("minutes") * 60 - RESERVE_S
    run_dir, out = args.pop("run_dir"), Path(args.pop("out"))
    config = configure(args.pop("bundle"), **args)
    distributed = "WORLD_SIZE" in os.environ
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s rank {os.environ.get('RANK', '0')} %(message)s")
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.reset_peak_memory_stats()
    if distributed:
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    history: list[StepStats] = []

    def on_step(stats: StepStats) -> None:
        history.append(stats)
        if stats.step % 10 == 0:
            log.info("%s", stats)

    try:
        train(config, run_dir, on_step=on_step, deadline=deadline)
        if not distributed or dist.get_rank() == 0:
            write_outputs(config, run_dir, out, history, time.monotonic() - start)
    finally:
        if distributed:
            dist.destroy_process_group()


def write_outputs(config, run_dir: str, out: Path, history: list[StepStats], seconds: float) -> None:
    """The newest checkpoint as an fp16 encoder in parts, and training.json."""
    out.mkdir(parents=True, exist_ok=True)
    encoder = export_checkpoint(run_dir, None, out / "encoder", PART_BYTES)
    last = history[-20:]
    metrics = {
        key: statistics.fmean(getattr(s, key) for s in last)
        for key in ("loss", "start_acc", "end_acc", "mlm_acc")
        if last and getattr(last[-1], key) is not None
    }
    summary = {
        "config": asdict(config),
        "metrics": {
            **metrics,
            "step": history[-1].step if history else 0,
            "steps_this_command": len(history),
            "tokens_per_s": statistics.median(s.tokens_per_s for s in history[1:]) if len(history) > 1 else 0.0,
            "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else 0.0,
            "seconds": seconds,
        },
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
    }
    partial = out / ".training.json.tmp"
    partial.write_text(json.dumps(summary, indent=2))
    os.replace(partial, encoder / "training.json")
    (out / "training.json").write_text(json.dumps(summary, indent=2))
    log.info("wrote %s and %s", encoder, out / "training.json")


if __name__ == "__main__":
    main()
