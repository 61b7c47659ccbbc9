"""A training run's trained encoder: a checkpoint loaded back with the run's config (:func:`load_trained`: a run folder
registered, held-out metrics; step 0 is the encoder the run started from), or exported as an fp16 encoder folder
beside its tokenizer's files (:func:`export_checkpoint`: ``npmcore export``, the learning curves).

Imports the shared modules and the training stage's checkpoints (:mod:`npmcore.model.checkpointing`), config and
masking settings.
"""

from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from npmcore.encoder import base_encoder_path, load_masked_lm, local_model_dir, save_fp16
from npmcore.model.checkpointing import CHECKPOINTS, load_weights
from npmcore.model.masking import MaskingConfig
from npmcore.model.train_config import TrainConfig
from npmcore.storage import list_snapshots, open_snapshot


def load_trained(run_dir: str, step: int | None = None) -> tuple[PreTrainedTokenizerFast, PreTrainedModel, TrainConfig]:
    """Tokenizer, encoder with its MLM head and config of a run's (verified) checkpoint at
    ``step``: None = the newest, 0 = the initial encoder the run started from."""
    found = {m.counts["step"]: url for url, m in list_snapshots(run_dir, CHECKPOINTS)}
    if not found:
        raise ValueError(f"no checkpoint in {run_dir}/{CHECKPOINTS}")
    if step not in (None, 0, *found):
        raise ValueError(f"no checkpoint of step {step} in {run_dir}/{CHECKPOINTS}; steps: {sorted(found)}")
    url = found[max(found) if step is None else max(step, min(found))]
    manifest = open_snapshot(url)
    raw = dict(manifest.config)
    config = TrainConfig(**{**raw, "masking": MaskingConfig(**raw["masking"])})
    torch.manual_seed(config.seed)  # step 0: the fresh head the run started with
    tokenizer, model = load_masked_lm(config.encoder or base_encoder_path())
    if step != 0:
        load_weights(url, model)
    return tokenizer, model.eval(), config


def export_checkpoint(run_dir: str, step: int | None, out: Path, part_bytes: int | None = None) -> Path:
    """A run's checkpoint at ``step`` (None: the newest; 0: the initial encoder) as an fp16 encoder
    folder with its MLM head, beside the tokenizer files of the encoder the run started from
    (``part_bytes``: the weights split into parts of at most that size)."""
    _, model, config = load_trained(run_dir, step)
    return save_fp16(model, local_model_dir(str(config.encoder or base_encoder_path())), out, part_bytes)
