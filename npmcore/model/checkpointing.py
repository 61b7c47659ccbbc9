"""Checkpoints of a training run, and its learning-rate schedule: what every trainer shares.

A checkpoint is a snapshot ``{run}/checkpoints/step-NNNNNNN`` (weights, optimizer, scheduler and
gradient-scaler state, the step, the run's config; verified by checksum), and resume is exact: a
trainer whose batches are a function of (seed, step) continues where the checkpoint stopped. A run
folder belongs to one config: resuming it with another is refused.
"""

import io
import json
from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING

import fsspec
import torch

from npmcore.storage import Manifest, SnapshotWriter, join, list_snapshots, open_snapshot

if TYPE_CHECKING:  # any dataclass instance (typeshed's type; no such module at run time): every trainer's config
    from _typeshed import DataclassInstance

CHECKPOINTS = "checkpoints"


def lr_schedule(warmup_steps: int, steps: int) -> Callable[[int], float]:
    """Linear warm-up over ``warmup_steps``, then linear decay to 0 at ``steps`` (a ``LambdaLR`` factor)."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        return max(0.0, (steps - step) / max(1, steps - warmup_steps))

    return factor


def save_checkpoint(
    run_dir: str, config: "DataclassInstance", inputs: list[dict], step: int, model, optimizer, scheduler, scaler=None
) -> str:
    """Write a verified checkpoint snapshot of a run (``config``: its dataclass; ``inputs``: its lineage);
    returns its URL."""
    state = {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "step": step}
    if scaler is not None:
        state["scaler"] = scaler.state_dict()
    buf = io.BytesIO()
    torch.save(state, buf)
    weights = io.BytesIO()
    torch.save(model.state_dict(), weights)
    name = f"step-{step:07d}"
    with SnapshotWriter(run_dir, CHECKPOINTS, name) as writer:
        writer.write_bytes("trainer.pt", buf.getvalue())
        writer.write_bytes("model.pt", weights.getvalue())
        writer.write_bytes("config.json", json.dumps(asdict(config), sort_keys=True).encode())
        manifest = Manifest("checkpoint", name, inputs, asdict(config), {"step": step}, dict(writer.files))
        return writer.commit(manifest)


def newest_checkpoint(run_dir: str) -> tuple[str, Manifest] | None:
    """URL and manifest of the newest checkpoint of a run, checksums verified (a corrupted
    checkpoint is an error, not a silent restart); None when the run has none."""
    found = list_snapshots(run_dir, CHECKPOINTS)
    if not found:
        return None
    url, _ = max(found, key=lambda item: item[1].counts["step"])
    return url, open_snapshot(url)


def load_weights(url: str, model: torch.nn.Module) -> None:
    with fsspec.open(join(url, "model.pt"), "rb") as f:
        model.load_state_dict(torch.load(f, map_location="cpu"))


def resume(run_dir: str, config: "DataclassInstance", model, optimizer, scheduler, scaler=None) -> int:
    """Load the newest checkpoint of ``run_dir`` (if any) into the objects; returns its step.

    Raises:
        ValueError: the run's checkpoints were made with another config.
    """
    newest = newest_checkpoint(run_dir)
    if newest is None:
        return 0
    url, manifest = newest
    if manifest.config != json.loads(json.dumps(asdict(config))):
        raise ValueError(f"checkpoint {url} was made with another config; use a new run folder")
    load_weights(url, model)
    with fsspec.open(join(url, "trainer.pt"), "rb") as f:
        state = torch.load(f, map_location="cpu")
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    if scaler is not None:
        scaler.load_state_dict(state["scaler"])
    return state["step"]


def checkpoint_steps(run_dir: str) -> list[int]:
    """Steps of a run's checkpoints, ascending."""
    return sorted(manifest.counts["step"] for _, manifest in list_snapshots(run_dir, CHECKPOINTS))
