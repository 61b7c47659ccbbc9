"""NPM training: in-batch span masking, one encoder pass over keys and queries, contrastive loss.

One process on CPU, or ``torchrun --nproc-per-node N`` for data-parallel training. Every
rank builds and masks the same *global* batch (deterministic given seed and step),
encodes its own slice of sequences, and all-gathers the key vectors *with gradient*, so
every query contrasts against the keys of the whole global batch. The loss is scaled so
that averaging the ranks' gradients yields exactly the single-process gradient of the
global batch. Gradients are averaged with an explicit all-reduce after backward, not by
the ``DistributedDataParallel`` wrapper: with a differentiable all-gather in the graph,
DDP's reducer produced gradients far from the single-process ones (cosine 0.6 in the
two-process test), while the explicit all-reduce matches them to 1e-6.

Checkpoints are snapshots (``{run}/checkpoints/step-NNNNNNN``: weights, optimizer,
scheduler, step, config; verified by checksum) and resume is exact: batches are a
function of (seed, epoch), masking and dropout are seeded per step.
"""

import hashlib
import io
import json
import logging
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Literal

import fsspec
import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_fn
from torch import Tensor
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from npmcore.batching import iter_batches
from npmcore.encoder import base_encoder_path, load_encoder
from npmcore.loss import span_loss, token_loss
from npmcore.masking import MaskedBatch, MaskingConfig, mask_spans, mask_tokens
from npmcore.storage import Manifest, SnapshotWriter, join, list_snapshots, open_snapshot

log = logging.getLogger(__name__)

Objective = Literal["npm", "npm-single"]


@dataclass(frozen=True)
class TrainConfig:
    """Defaults are the small CPU preset; :data:`PRESETS` has the paper's GPU setting."""

    corpus: str  # corpus snapshot URL (blocks to train on)
    encoder: str | None = None  # initial encoder: path or cached HF name; None = MiniLM-L6 as published (base_encoder_path)
    objective: Objective = "npm"  # "npm" (span masking) or "npm-single" (token masking)
    steps: int = 300  # optimizer steps
    batch_size: int = 16  # sequences per optimizer step, global over ranks and accumulation
    grad_accum: int = 1  # micro-batches per optimizer step (each one is masked on its own)
    lr: float = 5e-5  # peak AdamW learning rate
    weight_decay: float = 0.01
    warmup_steps: int = 30  # linear warm-up, then linear decay to 0 at `steps`
    max_grad_norm: float = 1.0  # gradient clipping
    amp: Literal["auto", "none", "bf16", "fp16"] = "auto"  # auto: bf16 on CUDA when supported, else none
    seed: int = 0
    checkpoint_every: int = 100  # steps between checkpoints (and at the end)
    masking: MaskingConfig = field(default_factory=MaskingConfig)


PRESETS: dict[str, dict] = {
    # Paper (Min et al. 2023, RoBERTa-large): 512 x 256-token sequences per step on 32 GPUs.
    "paper": dict(steps=100_000, batch_size=512, lr=3e-5, warmup_steps=4_000, weight_decay=0.01, checkpoint_every=5_000),
    "cpu-small": {},
    # The shipped default encoder's recipe (model card: npmcore/checkpoints/npm-minilm-l6/README.md): masking
    # only spans of content words spends the small CPU budget on what open-set answers are made of.
    "cpu-quality": dict(steps=800, batch_size=16, lr=1.5e-4, warmup_steps=100, checkpoint_every=100,
                        masking=MaskingConfig(content_words=True)),
}


@dataclass(frozen=True)
class StepStats:
    step: int
    loss: float
    start_acc: float  # in-batch retrieval top-1 of start (or single-token) queries
    end_acc: float
    spans_per_seq: float
    masked_fraction: float
    tokens_per_s: float
    lr: float


# --- one step -------------------------------------------------------------------------


def derive_seed(*parts: int) -> int:
    """A 63-bit seed from integers, the same in every process (unlike ``hash`` of strings)."""
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], "little") >> 1


def to_device(batch: MaskedBatch, device: torch.device) -> MaskedBatch:
    return MaskedBatch(**{f.name: getattr(batch, f.name).to(device) for f in fields(batch)})


def _rank_world() -> tuple[int, int]:
    return (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)


def mask_batch(sequences: list[list[int]], tokenizer: PreTrainedTokenizerFast, config: TrainConfig, step: int, micro: int) -> MaskedBatch:
    """Mask one (global) micro-batch; seeded by (seed, step, micro) so every rank agrees."""
    generator = torch.Generator().manual_seed(derive_seed(config.seed, step, micro))
    if config.objective == "npm":
        return mask_spans(sequences, tokenizer, config.masking, generator)
    return mask_tokens(sequences, tokenizer, config.masking.ratio, generator)


def batch_loss(model: torch.nn.Module, batch: MaskedBatch, objective: Objective) -> tuple[Tensor, dict[str, Tensor]]:
    """Loss of one global masked batch on this rank (the full batch when not distributed).

    Keys (unmasked) and queries (masked) of this rank's sequences go through the encoder
    in one pass; keys are then all-gathered with gradient.
    """
    rank, world = _rank_world()
    B = batch.input_ids.shape[0]
    if B % world:
        raise ValueError(f"batch of {B} sequences does not split over {world} ranks")
    lo, hi = rank * B // world, (rank + 1) * B // world
    ids = torch.cat([batch.input_ids[lo:hi], batch.masked_input_ids[lo:hi]])  # (2b, T): masking pads both to T
    mask = torch.cat([batch.attention_mask[lo:hi], batch.masked_attention_mask[lo:hi]])
    hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state  # (2b, T, d)
    keys, queries = hidden[: hi - lo], hidden[hi - lo :]  # (b, T, d) each
    if world > 1:
        keys = torch.cat(dist_fn.all_gather(keys.contiguous()))  # (B, T, d), differentiable
    mine = (batch.span_seq >= lo) & (batch.span_seq < hi)  # spans whose queries this rank encoded
    if not bool(mine.any()):  # nothing to predict here; still take part in the gradient all-reduce
        return hidden.sum() * 0.0, {"start_acc": torch.tensor(0.0), "end_acc": torch.tensor(0.0)}
    local_index = torch.full_like(batch.span_seq, -1)
    local_index[mine] = torch.arange(int(mine.sum()))
    keep = mine[batch.pos_span]
    pos = (local_index[batch.pos_span[keep]], batch.pos_seq[keep], batch.pos_start[keep], batch.pos_end[keep])
    seq, at = batch.span_seq[mine], batch.span_query[mine]
    q_start = queries[seq - lo, at]  # (s, d)
    if objective == "npm":
        loss, stats = span_loss(q_start, queries[seq - lo, at + 1], keys, batch.attention_mask.bool(), seq, *pos)
    else:
        loss, stats = token_loss(q_start, keys, batch.attention_mask.bool(), seq, *pos[:3])
        stats = {"start_acc": stats["acc"], "end_acc": stats["acc"]}  # one query per masked token
    # span_loss averages over this rank's spans; rescale to (sum over local spans) / (all spans) x world
    # so that the average of the ranks' gradients equals the gradient of the single-process global loss.
    n_local, n_all = int(mine.sum()), batch.span_seq.numel()
    return loss * (n_local / n_all) * world, stats


# --- the loop -------------------------------------------------------------------------


def lr_lambda(config: TrainConfig) -> Callable[[int], float]:
    """Linear warm-up over ``warmup_steps``, then linear decay to 0 at ``steps``."""

    def factor(step: int) -> float:
        if step < config.warmup_steps:
            return (step + 1) / config.warmup_steps
        return max(0.0, (config.steps - step) / max(1, config.steps - config.warmup_steps))

    return factor


def precision(config: TrainConfig, device: torch.device) -> str:
    """The autocast precision: ``auto`` is bf16 on a CUDA device that supports it, else none."""
    if config.amp != "auto":
        return config.amp
    return "bf16" if device.type == "cuda" and torch.cuda.is_bf16_supported() else "none"


def autocast(amp: str, device: torch.device) -> torch.autocast:
    if amp == "none":
        return torch.autocast(device.type, enabled=False)
    return torch.autocast(device.type, dtype=torch.bfloat16 if amp == "bf16" else torch.float16)


def micro_batches(config: TrainConfig, start_step: int) -> Iterator[list[list[int]]]:
    """Global micro-batches from ``start_step`` on, epoch after epoch (skipping done ones)."""
    micro = config.batch_size // config.grad_accum
    skip, epoch = start_step * config.grad_accum, 0
    while True:
        produced = 0
        for batch in iter_batches(config.corpus, micro, config.seed, epoch):
            produced += 1
            if skip:
                skip -= 1
                continue
            yield batch.token_ids
        if produced == 0:
            raise ValueError(f"corpus {config.corpus} has fewer blocks than one micro-batch of {micro}")
        epoch += 1


def train(
    config: TrainConfig,
    run_dir: str,
    on_step: Callable[[StepStats], None] | None = None,
    stop_after: int | None = None,
) -> tuple[PreTrainedTokenizerFast, PreTrainedModel]:
    """Train (or resume from the newest checkpoint in ``run_dir``); returns tokenizer and encoder.

    Args:
        config: what to train; must equal the config stored in ``run_dir``'s checkpoints.
        run_dir: URL of the run's folder (checkpoints live in ``{run_dir}/checkpoints``).
        on_step: called on rank 0 after every optimizer step (metrics logging, progress).
        stop_after: stop after this step without finishing (to test interruption).
    """
    corpus = validate(config)
    rank, world = _rank_world()
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    tokenizer, model = load_encoder(config.encoder or base_encoder_path())
    check_lengths(config, corpus, model)
    model.to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(config))
    amp = precision(config, device)
    scaler = torch.amp.GradScaler(device.type, enabled=amp == "fp16")  # fp16 gradients underflow without it
    step = resume(run_dir, config, model, optimizer, scheduler, scaler)
    if world > 1:  # start from identical weights on every rank
        for tensor in model.state_dict().values():
            dist.broadcast(tensor, src=0)
    batches = micro_batches(config, step)
    while step < config.steps and (stop_after is None or step < stop_after):
        torch.manual_seed(derive_seed(config.seed, step, -1 - rank))  # dropout
        start, tokens, sums = time.perf_counter(), 0, {"loss": 0.0, "start_acc": 0.0, "end_acc": 0.0, "spans": 0, "masked": 0.0}
        for micro in range(config.grad_accum):
            batch = to_device(mask_batch(next(batches), tokenizer, config, step, micro), device)
            with autocast(amp, device):
                loss, stats = batch_loss(model, batch, config.objective)
            scaler.scale(loss / config.grad_accum).backward()
            tokens += int(batch.attention_mask.sum() + batch.masked_attention_mask.sum())
            sums["loss"] += float(loss.detach()) / config.grad_accum
            sums["start_acc"] += float(stats["start_acc"]) / config.grad_accum
            sums["end_acc"] += float(stats["end_acc"]) / config.grad_accum
            sums["spans"] += batch.span_seq.numel()
            sums["masked"] += masked_fraction(batch) / config.grad_accum
        if world > 1:
            average_gradients(model, world)  # before unscaling: every rank then sees the same infs
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        if rank == 0 and on_step is not None:
            on_step(StepStats(
                step, sums["loss"], sums["start_acc"], sums["end_acc"], sums["spans"] / config.batch_size,
                sums["masked"], tokens / (time.perf_counter() - start), scheduler.get_last_lr()[0],
            ))
        if step % config.checkpoint_every == 0 or step == config.steps:
            save_checkpoint(run_dir, config, step, model, optimizer, scheduler, scaler)
    return tokenizer, model


def average_gradients(model: torch.nn.Module, world: int) -> None:
    """Average gradients over ranks (one all-reduce per parameter)."""
    for param in model.parameters():
        if param.grad is not None:
            dist.all_reduce(param.grad)
            param.grad /= world


def masked_fraction(batch: MaskedBatch) -> float:
    real = int(batch.attention_mask.sum())
    return float(batch.span_len.sum()) / max(1, real)


def validate(config: TrainConfig) -> Manifest:
    """Check the config; returns the corpus manifest (a clear error if it is not a snapshot)."""
    if config.steps < 1 or config.batch_size < 2:
        raise ValueError(f"need steps >= 1 and batch_size >= 2, got steps={config.steps}, batch_size={config.batch_size}")
    if config.batch_size % config.grad_accum:
        raise ValueError(f"batch_size {config.batch_size} is not a multiple of grad_accum {config.grad_accum}")
    return open_snapshot(config.corpus, verify=False)


def check_lengths(config: TrainConfig, corpus: Manifest, model: PreTrainedModel) -> None:
    """Masked sequences grow by one token per one-token span: they must still fit the encoder."""
    positions = model.config.max_position_embeddings - (2 if "roberta" in model.config.model_type else 0)
    longest = int(corpus.config["max_tokens"])
    masked = longest + math.ceil(longest * config.masking.ratio)
    if masked > positions:
        raise ValueError(
            f"corpus blocks of up to {longest} tokens are up to {masked} tokens once masked, "
            f"more than the encoder's {positions} positions: ingest with a smaller --max-tokens"
        )


# --- checkpoints ----------------------------------------------------------------------

CHECKPOINTS = "checkpoints"


def save_checkpoint(run_dir: str, config: TrainConfig, step: int, model, optimizer, scheduler, scaler) -> str | None:
    """Write a verified checkpoint snapshot (rank 0 only); returns its URL."""
    if _rank_world()[0] != 0:
        return None
    state = {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(), "step": step}
    buf = io.BytesIO()
    torch.save(state, buf)
    weights = io.BytesIO()
    torch.save(model.state_dict(), weights)
    name = f"step-{step:07d}"
    with SnapshotWriter(run_dir, CHECKPOINTS, name) as writer:
        writer.write_bytes("trainer.pt", buf.getvalue())
        writer.write_bytes("model.pt", weights.getvalue())
        writer.write_bytes("config.json", json.dumps(asdict(config), sort_keys=True).encode())
        manifest = Manifest("checkpoint", name, [{"corpus": config.corpus}], asdict(config), {"step": step}, dict(writer.files))
        return writer.commit(manifest)


def newest_checkpoint(run_dir: str) -> tuple[str, Manifest] | None:
    """URL and manifest of the newest checkpoint of a run, checksums verified (a corrupted
    checkpoint is an error, not a silent restart); None when the run has none."""
    found = list_snapshots(run_dir, CHECKPOINTS)
    if not found:
        return None
    url, _ = max(found, key=lambda item: item[1].counts["step"])
    return url, open_snapshot(url)


def load_weights(url: str, model: PreTrainedModel) -> None:
    with fsspec.open(join(url, "model.pt"), "rb") as f:
        model.load_state_dict(torch.load(f, map_location="cpu"))


def resume(run_dir: str, config: TrainConfig, model, optimizer, scheduler, scaler) -> int:
    """Load the newest checkpoint of ``run_dir`` (if any) into the objects; returns its step."""
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
    scaler.load_state_dict(state["scaler"])
    log.info("resumed from %s (step %d)", url, state["step"])
    return state["step"]


@torch.inference_mode()
def retrieval_accuracy(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, config: TrainConfig, corpus: str, n_batches: int
) -> dict[str, float]:
    """Mean in-batch start/end retrieval top-1 accuracy and loss on ``n_batches`` batches of
    ``corpus`` (use a held-out corpus), masked with fixed seeds so encoders are compared on
    the same queries."""
    was_training = model.training
    model.eval()
    held_out = replace(config, corpus=corpus, seed=config.seed + 1)
    batches = micro_batches(replace(held_out, grad_accum=1), 0)
    totals = {"loss": 0.0, "start_acc": 0.0, "end_acc": 0.0}
    for i in range(n_batches):
        loss, stats = batch_loss(model, mask_batch(next(batches), tokenizer, held_out, i, 0), config.objective)
        totals["loss"] += float(loss) / n_batches
        totals["start_acc"] += float(stats["start_acc"]) / n_batches
        totals["end_acc"] += float(stats["end_acc"]) / n_batches
    model.train(was_training)
    return totals


def checkpoint_steps(run_dir: str) -> list[int]:
    """Steps of a run's checkpoints, ascending."""
    return sorted(manifest.counts["step"] for _, manifest in list_snapshots(run_dir, CHECKPOINTS))


def load_trained(run_dir: str, step: int | None = None) -> tuple[PreTrainedTokenizerFast, PreTrainedModel, TrainConfig]:
    """Tokenizer, encoder and config of a run's (verified) checkpoint at ``step``: None = the
    newest, 0 = the initial encoder the run started from."""
    found = {m.counts["step"]: url for url, m in list_snapshots(run_dir, CHECKPOINTS)}
    if not found:
        raise ValueError(f"no checkpoint in {run_dir}/{CHECKPOINTS}")
    if step not in (None, 0, *found):
        raise ValueError(f"no checkpoint of step {step} in {run_dir}/{CHECKPOINTS}; steps: {sorted(found)}")
    url = found[max(found) if step is None else max(step, min(found))]
    manifest = open_snapshot(url)
    raw = dict(manifest.config)
    config = TrainConfig(**{**raw, "masking": MaskingConfig(**raw["masking"])})
    tokenizer, model = load_encoder(config.encoder or base_encoder_path())
    if step != 0:
        load_weights(url, model)
    return tokenizer, model.eval(), config


def main(argv: list[str] | None = None) -> None:
    """Entry point for multi-process training: ``torchrun --nproc-per-node N -m npmcore.train …``.

    Each rank joins the process group torchrun describes (NCCL on GPUs, gloo on CPU), trains
    on its slice of every global batch and rank 0 writes the checkpoints to ``--run-dir``.
    Register the result with ``npmcore register RUN_DIR``.
    """
    import argparse
    import os

    from npmcore.runtime import configure_environment

    configure_environment()
    parser = argparse.ArgumentParser(prog="torchrun … -m npmcore.train", description=main.__doc__.split("\n")[0])
    parser.add_argument("--corpus", required=True, help="corpus snapshot URL")
    parser.add_argument("--run-dir", required=True, help="URL of the run folder (checkpoints; resumed if present)")
    parser.add_argument("--preset", default="cpu-small", choices=sorted(PRESETS))
    for name in ("steps", "batch_size", "grad_accum", "warmup_steps", "checkpoint_every", "seed"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=int)
    parser.add_argument("--lr", type=float)
    parser.add_argument("--objective", choices=["npm", "npm-single"])
    parser.add_argument("--encoder")
    parser.add_argument("--amp", choices=["auto", "none", "bf16", "fp16"])
    args = vars(parser.parse_args(argv))
    preset, run_dir = PRESETS[args.pop("preset")], args.pop("run_dir")
    config = replace(TrainConfig(corpus=args.pop("corpus")), **preset, **{k: v for k, v in args.items() if v is not None})
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s rank {os.environ.get('RANK', '0')} %(message)s")
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    try:
        train(config, run_dir, on_step=lambda s: log.info("%s", s))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
