"""One GPU campaign command: a schedule sized to the minutes given, trained to its end, returned in a few files.

Runs on a bare CUDA machine (Python with torch, transformers, numpy, pyarrow, fsspec,
safetensors and tokenizers; no network, no installed project: run it from the repository
root). Single GPU, or ``torchrun --nproc-per-node N infra/gpu/campaign.py …`` for several::

    python infra/gpu/campaign.py --bundle gpu-data/enwiki.bundle.parquet --minutes 9 --out "$OUT"

1. **Probe**: a throwaway run trains a few steps; only the last ``PROBE_TIMED`` are timed (on a
   GPU the first steps pay for kernel selection and for growing the memory pool: on an H200 a
   first probe timed 1.35 s a step against 0.51 s later). Its final checkpoint and its export
   are timed too, and the export is checked against what a lent machine returns, before any
   real training.
2. **Plan**: the steps that fit in what is left of ``--minutes`` at the timed pace, after the
   run's start-up and its end (the step under way, checkpoint and export, each twice its timed
   length), less room for steps slower than timed (``SLACK``, ``ROOM_S``); the preset's warm-up
   share of them (5% for the GPU presets: ``configure``).
3. **Train** that schedule to its last step, with a checkpoint there; a deadline stops the run
   earlier, checkpointed, if steps turn out slower than timed (``training.json`` then shows
   ``step < steps``).
4. **Return**, into ``--out``: ``training.json`` (config, step, steps, last learning rate,
   tokens/s, model FLOP/s and MFU, peak memory, mean metrics of the last 20 steps, the plan and
   a learning curve) and the encoder (fp16 weights with the MLM head, config, tokenizer files,
   ``training.json``) as one tar archive cut into parts of at most 15 MiB with their index:
   5 files for MiniLM-L6, all directly in ``--out``. ``npmcore export``, ``npmcore register``
   and every loader read that folder as the encoder (they join and unpack it).

Each command works in ``/tmp/npm-campaign/N`` (N = 1, 2, … on a machine): its checkpoint and
the unpacked encoder it returned. A warm machine keeps ``/tmp`` between calls, so a next
command continues from it: ``--encoder /tmp/npm-campaign/N/encoder`` (its weights, with a new
schedule and optimizer). See infra/README.md (GPU campaign) for the runbook.
"""

import time

T0 = time.monotonic()  # before the imports: the command's clock starts with the process

import argparse  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from dataclasses import asdict  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import TypeVar  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project is not installed on a lent machine

from npmcore.runtime import configure_environment  # noqa: E402

configure_environment()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from npmcore.encoder import default_encoder_path, local_model_dir, pack_folder, save_fp16  # noqa: E402
from npmcore.model.step_stats import StepStats  # noqa: E402
from npmcore.model.train import train  # noqa: E402
from npmcore.model.train_config import PRESETS, TrainConfig, configure  # noqa: E402

MAX_FILES = 8  # what a lent machine returns: at most 8 files of at most 16 MiB
PART_BYTES = 15 << 20
# Untimed probe steps: on a GPU the first ones select kernels and grow the memory pool (an H200 probe timed
# 1.35 s a step against 0.51 s later); on a CPU only the first one is slow (loading). Then the timed ones.
PROBE_WARM = {"cuda": 4, "cpu": 1}
PROBE_TIMED = 4
# Room the plan leaves for steps slower than timed (a busy host, an epoch's start): this share of the
# training time and these seconds. A run that still reaches the deadline stops there, checkpointed.
SLACK, ROOM_S = 0.03, 5.0
EXIT_S = 3.0  # after the returned files are written: logging and the process's exit (CUDA's teardown)
# Dense bf16 tensor-core peaks (NVIDIA data sheets), by device name: MFU's denominator.
PEAK_FLOPS = {"H200": 989e12, "H100 80GB HBM3": 989e12, "H100 PCIe": 756e12, "A100": 312e12}
log = logging.getLogger("campaign")
Value = TypeVar("Value")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bundle", required=True, help="training bundle (*.bundle.parquet) or corpus snapshot URL")
    parser.add_argument("--minutes", type=float, required=True, help="wall-clock budget of this command")
    parser.add_argument("--out", required=True, help="folder for what comes back (the device tool's $OUT)")
    parser.add_argument("--preset", default="gpu-npm", choices=sorted(PRESETS))
    parser.add_argument(
        "--encoder",
        default=str(default_encoder_path()),
        help="initial encoder folder: the shipped checkpoint (default), a returned folder, /tmp/npm-campaign/N/encoder",
    )
    for name in ("batch_size", "grad_accum", "seed", "prebatch"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=int)
    for name in ("lr", "mlm_weight", "dropout", "rare_boost"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=float)
    parser.add_argument("--objective", choices=["npm", "npm-single", "mlm"])
    args = vars(parser.parse_args(argv))
    if not Path(args["encoder"]).is_dir():
        parser.error(
            f"--encoder {args['encoder']}: no such folder (a /tmp/npm-campaign folder is gone once the machine "
            "was given back: continue from the returned files, infra/README.md)"
        )
    end = T0 + args.pop("minutes") * 60
    out = Path(args.pop("out"))
    if out.exists() and any(out.iterdir()):
        parser.error(f"--out {out} is not empty: what is there would come back too (at most {MAX_FILES} files)")
    distributed = "WORLD_SIZE" in os.environ
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s rank {os.environ.get('RANK', '0')} %(message)s")
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    if distributed:
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    try:
        campaign(args, end, out)
    finally:
        if distributed:
            dist.destroy_process_group()


def campaign(args: dict, end: float, out: Path) -> None:
    """Probe, plan, train and return (see the module's docstring); ``end``: the command's limit."""
    leader = not dist.is_initialized() or dist.get_rank() == 0
    bundle, tokenizer_dir = args.pop("bundle"), local_model_dir(args["encoder"])

    def schedule(steps: int) -> TrainConfig:  # the preset's warm-up keeps its share (configure)
        return configure(bundle, steps=steps, checkpoint_every=steps, **args)

    work = agreed(new_work_dir() if leader else None)
    log.info("working in %s", work)

    warm = PROBE_WARM["cuda" if torch.cuda.is_available() else "cpu"]
    ends: list[float] = []
    started = time.monotonic()
    _, model = train(schedule(warm + PROBE_TIMED), str(work / "probe"), lambda s: ends.append(now()))
    plan = None
    if leader:
        checkpoint_s = now() - ends[-1]
        exported = now()
        write_returned(model, tokenizer_dir, {}, work / "probe-encoder", work / "probe-out")
        export_s = now() - exported
        check_returnable(work / "probe-out")
        for scratch in ("probe", "probe-encoder", "probe-out"):
            shutil.rmtree(work / scratch)
        plan = make_plan([t - started for t in ends], warm, checkpoint_s, export_s, end - now())
        log.info("plan: %s", json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in plan.items()}))
    del model
    plan = agreed(plan)
    if plan["steps"] < 1:
        if leader:
            shutil.rmtree(work)  # nothing to keep: the next command takes its number
        raise SystemExit(
            f"{(end - T0) / 60:g} minutes leave no time to train: start-up and probe took {now() - T0:.0f} s, "
            f"a step {plan['step_s']:.2f} s, the end needs {plan['finish_s']:.0f} s; give more --minutes"
        )
    config = schedule(plan["steps"])
    history: list[StepStats] = []
    every = max(1, config.steps // 20)

    def on_step(stats: StepStats) -> None:
        history.append(stats)
        if stats.step % every == 0 or stats.step == 1:
            log.info("%s", stats)

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    started = now()
    # steps slower than timed use the plan's room; a step that ends after the deadline is the last
    _, model = train(config, str(work / "run"), on_step=on_step, deadline=end - plan["finish_s"])
    if leader:
        summary = summarize(config, history, plan, now() - started, work / "encoder")
        write_returned(model, tokenizer_dir, summary, work / "encoder", out)
        check_returnable(out)
        log.info(
            "step %d of %d, %.0f s in all; returned %s; a next command on this machine: --encoder %s",
            summary["metrics"]["step"],
            config.steps,
            now() - T0,
            out,
            work / "encoder",
        )


def make_plan(ends: list[float], warm: int, checkpoint_s: float, export_s: float, left_s: float) -> dict:
    """The schedule that fits, from the probe: ``ends``, seconds from its start to the end of each
    step; ``warm``, how many of its first steps are not timed; ``checkpoint_s`` and ``export_s``, how
    long its end took; ``left_s``, the seconds the command has left. The pace is the median of the
    timed steps."""
    timed = [b - a for a, b in zip(ends[warm - 1 :], ends[warm:], strict=False)]
    step_s = statistics.median(timed)
    setup_s = ends[0]  # loading, the first batches and the first step: the run starts the same way
    # after the deadline: the step under way, the checkpoint and the export (each up to twice as long as timed)
    finish_s = 2 * (step_s + checkpoint_s + export_s) + EXIT_S
    train_s = (left_s - setup_s - finish_s) * (1 - SLACK) - ROOM_S
    return {
        "timed_step_s": timed,
        "step_s": step_s,
        "setup_s": setup_s,
        "checkpoint_s": checkpoint_s,
        "export_s": export_s,
        "finish_s": finish_s,
        "left_s": left_s,
        "steps": max(0, math.floor(train_s / step_s)),
    }


def now() -> float:
    return time.monotonic()


def agreed(value: Value) -> Value:
    """Rank 0's ``value`` on every rank (a plan made on one clock)."""
    if not dist.is_initialized():
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def new_work_dir() -> Path:
    """``/tmp/npm-campaign/N`` for the next N: this command's checkpoints and unpacked encoder."""
    root = Path(tempfile.gettempdir(), "npm-campaign")
    root.mkdir(parents=True, exist_ok=True)
    work = root / str(1 + max((int(p.name) for p in root.iterdir() if p.name.isdigit()), default=0))
    work.mkdir()
    return work


def summarize(config: TrainConfig, history: list[StepStats], plan: dict, seconds: float, encoder: Path) -> dict:
    """training.json: config, metrics (numbers only: ``npmcore register`` logs them), plan, curve."""
    last = history[-20:]
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    steady = history[1:] or history  # the first step pays for starting up
    flops_per_s = statistics.median(s.flops_per_s for s in steady)
    metrics = {
        **{
            key: statistics.fmean(getattr(s, key) for s in last)
            for key in ("loss", "start_acc", "end_acc", "mlm_acc")
            if getattr(last[-1], key) is not None
        },
        "step": history[-1].step,
        "steps": config.steps,
        "lr": history[-1].lr,
        "tokens_per_s": statistics.median(s.tokens_per_s for s in steady),
        "flops_per_s": flops_per_s,
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else 0.0,
        "train_seconds": seconds,
        "seconds": now() - T0,
    }
    peak = next((flops for name, flops in PEAK_FLOPS.items() if name in device), None)
    if peak is not None:  # model FLOPs (npmcore.model.step_stats.step_flops) over the devices' bf16 peak
        metrics["mfu"] = flops_per_s / (peak * (dist.get_world_size() if dist.is_initialized() else 1))
    else:
        log.info("no bf16 peak known for %s (PEAK_FLOPS): training.json has flops_per_s, no mfu", device)
    every = max(1, len(history) // 100)
    return {
        "config": asdict(config),
        "metrics": metrics,
        "device": device,
        "torch": torch.__version__,
        "plan": plan,
        "encoder_on_machine": str(encoder),
        "curve": [asdict(s) for s in history if s.step % every == 0 or s is history[-1]],
    }


def write_returned(model, tokenizer_dir: str, summary: dict, encoder: Path, out: Path) -> None:
    """The encoder unpacked in ``encoder`` (for a next command on this machine) and packed into
    ``out``, training.json beside both; ``out``'s training.json is written last."""
    save_fp16(model, tokenizer_dir, encoder)
    write_json(encoder / "training.json", summary)
    out.mkdir(parents=True, exist_ok=True)
    pack_folder(encoder, out, PART_BYTES)
    write_json(out / "training.json", summary)


def write_json(path: Path, value: dict) -> None:
    partial = path.with_name(f".{path.name}.tmp")
    partial.write_text(json.dumps(value, indent=1))
    os.replace(partial, path)


def check_returnable(out: Path) -> None:
    """Refuse a folder a lent machine would not return whole: more than 8 files, or one over 15 MiB."""
    files = [p for p in out.rglob("*") if p.is_file()]
    big = [f"{p.name} ({p.stat().st_size / 2**20:.1f} MiB)" for p in files if p.stat().st_size > PART_BYTES]
    if len(files) > MAX_FILES or big or any(p.parent != out for p in files):
        raise SystemExit(
            f"{out} would not come back whole: {len(files)} files (at most {MAX_FILES}), "
            f"over 15 MiB: {big or 'none'}, in subfolders: {[str(p) for p in files if p.parent != out] or 'none'}"
        )


if __name__ == "__main__":
    main()
