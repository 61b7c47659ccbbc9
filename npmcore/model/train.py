"""Training: NPM (in-batch span masking, contrastive loss), NPM single, and a masked-LM stage.

Objectives: ``npm`` masks whole-word spans and contrasts each span's [MASKs]/[MASKe]
outputs against the unmasked batch's token vectors; ``npm-single`` masks single tokens;
``mlm`` trains the encoder's masked-LM head with BERT masking (:mod:`npmcore.model.mlm`), the
stage that gives an encoder that was never a masked LM (the packaged MiniLM-L6) the
starting point the paper had (RoBERTa). ``mlm_weight`` adds the MLM loss to an NPM
objective, on a third, BERT-masked copy of the batch encoded in the same pass. The model
trained and checkpointed is always the encoder with its MLM head (``*ForMaskedLM``);
NPM losses use the encoder alone, and inference ignores the head.

One process on CPU, or ``torchrun --nproc-per-node N`` for data-parallel training. Every
rank builds and masks the same *global* batch (deterministic given seed and step),
encodes its own slice of sequences, and all-gathers the key vectors *with gradient*, so
every query contrasts against the keys of the whole global batch. The loss is scaled so
that averaging the ranks' gradients yields exactly the single-process gradient of the
global batch. Gradients are averaged with an explicit all-reduce after backward, not by
the ``DistributedDataParallel`` wrapper: with a differentiable all-gather in the graph,
DDP's reducer produced gradients far from the single-process ones (cosine 0.6 in the
two-process test), while the explicit all-reduce matches them to 1e-6.

Batches are masked on a background thread, a few micro-batches ahead of the loop
(:func:`npmcore.background.in_background`): host-side masking then overlaps the GPU step instead of adding to it.

Checkpoints are snapshots (``{run}/checkpoints/step-NNNNNNN``: weights, optimizer,
scheduler, step, config; verified by checksum) and resume is exact: batches are a
function of (seed, epoch), masking and dropout are seeded per step.

What a run is: :mod:`npmcore.model.train_config`; what a step trains on: :mod:`npmcore.model.step_batches`;
what it reports (statistics, model FLOPs): :mod:`npmcore.model.step_stats`; a trained checkpoint loaded or
exported: :mod:`npmcore.model.trained`.
"""

import logging
import math
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import replace

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_fn
from torch import Tensor
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from npmcore.background import in_background
from npmcore.corpus.bundle import bundle_info, is_bundle
from npmcore.encoder import base_encoder_path, load_masked_lm, mlm_head
from npmcore.model.checkpointing import lr_schedule, resume, save_checkpoint
from npmcore.model.loss import PreBatch, span_loss, token_loss
from npmcore.model.masking import MaskedBatch
from npmcore.model.mlm import MLMBatch, mlm_loss
from npmcore.model.step_batches import StepBatch, derive_seed, mask_batch, masked_batches, micro_batches, to_device
from npmcore.model.step_stats import StepStats, batch_stats, encoded_tokens, model_size, step_flops
from npmcore.model.train_config import PRESETS, Objective, TrainConfig, configure
from npmcore.snapshots import open_corpus

log = logging.getLogger(__name__)


# --- one step -------------------------------------------------------------------------


def _rank_world() -> tuple[int, int]:
    return (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)


def _pad(ids: Tensor, width: int, value: int) -> Tensor:
    return torch.nn.functional.pad(ids, (0, width - ids.shape[1]), value=value)


def batch_loss(
    model: PreTrainedModel, batch: StepBatch, config: TrainConfig, prebatch: PreBatch | None = None
) -> tuple[Tensor, dict[str, Tensor]]:
    """Loss of one global masked batch on this rank (the full batch when not distributed).
    ``prebatch``: earlier batches' keys, extra negatives of the NPM loss; this batch's keys join it.

    ``model`` is the encoder with its MLM head. This rank's keys (unmasked), NPM queries and
    MLM copies go through the encoder in one pass; keys are then all-gathered with gradient.
    Each loss is scaled so that averaging the ranks' gradients gives the gradient of the
    single-process loss of the global batch.
    """
    rank, world = _rank_world()
    B = (batch.npm or batch.mlm).input_ids.shape[0]
    if B % world:
        raise ValueError(f"batch of {B} sequences does not split over {world} ranks")
    lo, hi = rank * B // world, (rank + 1) * B // world
    parts, masks = [], []
    if batch.npm is not None:  # masking pads keys and queries to the same width
        parts += [batch.npm.input_ids[lo:hi], batch.npm.masked_input_ids[lo:hi]]
        masks += [batch.npm.attention_mask[lo:hi], batch.npm.masked_attention_mask[lo:hi]]
    if batch.mlm is not None:
        parts.append(batch.mlm.input_ids[lo:hi])
        masks.append(batch.mlm.attention_mask[lo:hi])
    W = max(p.shape[1] for p in parts)
    pad = model.config.pad_token_id or 0
    ids = torch.cat([_pad(p, W, pad) for p in parts])  # (n * b, W)
    mask = torch.cat([_pad(m, W, 0) for m in masks])
    hidden = model.base_model(input_ids=ids, attention_mask=mask).last_hidden_state  # (n * b, W, d)
    b = hi - lo
    loss, stats = hidden.sum() * 0.0, {}  # every rank's graph reaches every parameter it trains
    if batch.npm is not None:
        npm_loss, stats = _npm_loss(hidden[:b], hidden[b : 2 * b], batch.npm, config.objective, lo, hi, world, prebatch)
        loss = loss + npm_loss
    if batch.mlm is not None:
        mlm_part, mlm_stats = _mlm_loss(hidden[-b:], mlm_head(model), batch.mlm, lo, hi, world)
        loss = loss + (config.mlm_weight if batch.npm is not None else 1.0) * mlm_part
        stats = {**stats, **mlm_stats}
    return loss, stats


def _npm_loss(
    keys: Tensor,
    queries: Tensor,
    batch: MaskedBatch,
    objective: Objective,
    lo: int,
    hi: int,
    world: int,
    prebatch: PreBatch | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """The NPM (or NPM-single) loss of this rank's spans against the keys of the global batch
    (and of the earlier batches in ``prebatch``, which this batch's keys then join)."""
    if world > 1:
        keys = torch.cat(dist_fn.all_gather(keys.contiguous()))  # (B, T, d), differentiable
    keys = keys[:, : batch.input_ids.shape[1]]
    negatives = prebatch.negatives() if prebatch is not None else None
    if prebatch is not None:
        real = batch.attention_mask.bool()
        prebatch.push(keys[real], batch.input_ids[real])
    mine = (batch.span_seq >= lo) & (batch.span_seq < hi)  # spans whose queries this rank encoded
    if not bool(mine.any()):  # nothing to predict here; still take part in the gradient all-reduce
        zero = torch.zeros((), device=keys.device)
        return keys.sum() * 0.0, {"start_acc": zero, "end_acc": zero}
    local_index = torch.full_like(batch.span_seq, -1)
    local_index[mine] = torch.arange(int(mine.sum()), device=mine.device)
    keep = mine[batch.pos_span]
    pos = (local_index[batch.pos_span[keep]], batch.pos_seq[keep], batch.pos_start[keep], batch.pos_end[keep])
    seq, at = batch.span_seq[mine], batch.span_query[mine]
    q_start = queries[seq - lo, at]  # (s, d)
    if objective == "npm":
        start, end = batch.span_start[mine], batch.span_start[mine] + batch.span_len[mine] - 1
        span_tokens = (batch.input_ids[seq, start], batch.input_ids[seq, end]) if negatives is not None else None
        loss, stats = span_loss(
            q_start,
            queries[seq - lo, at + 1],
            keys,
            batch.attention_mask.bool(),
            seq,
            *pos,
            negatives=negatives,
            span_tokens=span_tokens,
        )
        stats = {"start_acc": stats["start_acc"], "end_acc": stats["end_acc"]}
    else:
        loss, stats = token_loss(q_start, keys, batch.attention_mask.bool(), seq, *pos[:3])
        stats = {"start_acc": stats["acc"], "end_acc": stats["acc"]}  # one query per masked token
    # the loss averages over this rank's spans; rescale to (sum over local spans) / (all spans) x world
    n_local, n_all = int(mine.sum()), batch.span_seq.numel()
    return loss * (n_local / n_all) * world, stats


def _mlm_loss(
    hidden: Tensor, head: torch.nn.Module, batch: MLMBatch, lo: int, hi: int, world: int
) -> tuple[Tensor, dict[str, Tensor]]:
    """The MLM loss of this rank's targets (its sequences lo..hi of the global batch)."""
    T = batch.input_ids.shape[1]
    seq, at = batch.positions // T, batch.positions % T
    mine = (seq >= lo) & (seq < hi)
    if not bool(mine.any()):
        no_target = head(hidden.reshape(-1, hidden.shape[-1])[:0]).sum() * 0.0
        return no_target, {"mlm_acc": torch.zeros((), device=hidden.device)}
    local = (seq[mine] - lo) * hidden.shape[1] + at[mine]  # flat positions in this rank's (b, W) hidden states
    loss, stats = mlm_loss(hidden, head, local, batch.labels[mine])
    n_local, n_all = int(mine.sum()), batch.positions.numel()
    return loss * (n_local / n_all) * world, {"mlm_acc": stats["acc"]}


# --- the loop -------------------------------------------------------------------------


def precision(config: TrainConfig, device: torch.device) -> str:
    """The autocast precision: ``auto`` is bf16 on a CUDA device that supports it, else none."""
    if config.amp != "auto":
        return config.amp
    return "bf16" if device.type == "cuda" and torch.cuda.is_bf16_supported() else "none"


def autocast(amp: str, device: torch.device) -> torch.autocast:
    if amp == "none":
        return torch.autocast(device.type, enabled=False)
    return torch.autocast(device.type, dtype=torch.bfloat16 if amp == "bf16" else torch.float16)


PREFETCH = 4  # masked micro-batches kept ready: enough to hide an epoch's start (reading and shuffling the corpus)


def train(
    config: TrainConfig,
    run_dir: str,
    on_step: Callable[[StepStats], None] | None = None,
    stop_after: int | None = None,
    deadline: float | None = None,
) -> tuple[PreTrainedTokenizerFast, PreTrainedModel]:
    """Train (or resume from the newest checkpoint in ``run_dir``); returns the tokenizer and
    the encoder with its MLM head (``*ForMaskedLM``).

    Args:
        config: what to train; must equal the config stored in ``run_dir``'s checkpoints.
        run_dir: URL of the run's folder (checkpoints live in ``{run_dir}/checkpoints``).
        on_step: called on rank 0 after every optimizer step (metrics logging, progress);
            the step's statistics reach the host in one sync.
        stop_after: stop after this step without finishing (to test interruption).
        deadline: a ``time.monotonic()`` value: the first step that ends after it is
            checkpointed and the run stops there, to be resumed (a machine lent for minutes).
    """
    rank, world = _rank_world()
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    if device.type == "cuda":  # TF32 matmuls where autocast leaves fp32 (the loss's logits)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    tokenizer, model = training_model(config)
    model.to(device).train()
    # fused: one kernel over all parameters; the per-parameter loop took a fifth of a CPU step
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay, fused=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_schedule(config.warmup_steps, config.steps))
    amp = precision(config, device)
    scaler = torch.amp.GradScaler(device.type, enabled=amp == "fp16")  # fp16 gradients underflow without it
    step = resume(run_dir, config, model, optimizer, scheduler, scaler)
    if step:
        log.info("resumed %s at step %d", run_dir, step)
    if world > 1:  # start from identical weights on every rank
        for tensor in model.state_dict().values():
            dist.broadcast(tensor, src=0)
    size = model_size(model)
    prebatch = PreBatch(config.prebatch)  # empty again after a resume
    # masking a 512-sequence batch takes 0.10 s of host time, a fifth of a GPU step (H200): in the background it
    # overlaps the step instead of delaying it; masking is seeded by (seed, step, micro) alone (its own
    # generators), so the batches are exactly those masked inline
    with closing(in_background(masked_batches(config, tokenizer, step), PREFETCH)) as batches:
        while step < config.steps and (stop_after is None or step < stop_after):
            torch.manual_seed(derive_seed(config.seed, step, -1 - rank))  # dropout
            start, tokens, flops = time.perf_counter(), 0, 0.0
            measured: dict[str, Tensor] = {}  # loss and accuracies, summed on the device
            counted: dict[str, float] = {}  # masking statistics, from the host copy of the batch
            for micro in range(config.grad_accum):
                masked = next(batches)
                tokens += encoded_tokens(masked)
                flops += step_flops(masked, size, config.objective)
                for key, value in batch_stats(masked).items():
                    counted[key] = counted.get(key, 0.0) + value / config.grad_accum
                batch = to_device(masked, device)
                with autocast(amp, device):
                    loss, stats = batch_loss(model, batch, config, prebatch)
                scaler.scale(loss / config.grad_accum).backward()
                for key, value in {"loss": loss, **stats}.items():
                    measured[key] = measured.get(key, 0.0) + value.detach().float() / config.grad_accum
            if world > 1:
                average_gradients(model, world)  # before unscaling: every rank then sees the same infs
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            # the step's one host sync; it also waits for the step's GPU work, so the timing is the step's
            values = dict(zip(measured, torch.stack(list(measured.values())).tolist(), strict=True))
            seconds = time.perf_counter() - start
            if rank == 0 and on_step is not None:
                on_step(
                    StepStats(
                        step,
                        lr=scheduler.get_last_lr()[0],
                        tokens_per_s=tokens / seconds,
                        flops_per_s=flops / seconds,
                        **values,
                        **counted,
                    )
                )
            over = deadline is not None and _agreed(time.monotonic() > deadline, device)
            if over or step % config.checkpoint_every == 0 or step == config.steps:
                if rank == 0:
                    save_checkpoint(
                        run_dir, config, [{"corpus": config.corpus}], step, model, optimizer, scheduler, scaler
                    )
            if over:
                log.info("deadline reached at step %d of %d: checkpointed, stopping", step, config.steps)
                break
    return tokenizer, model


def training_model(config: TrainConfig) -> tuple[PreTrainedTokenizerFast, PreTrainedModel]:
    """The tokenizer and the encoder with its MLM head as a run starts: the config's initial
    encoder (a fresh head seeded by ``config.seed``), its dropout applied, its corpus checked
    against the encoder's positions."""
    torch.manual_seed(config.seed)  # a fresh MLM head starts the same way every time
    tokenizer, model = load_masked_lm(config.encoder or base_encoder_path())
    check_lengths(config, model)
    if config.dropout is not None:
        for module in model.modules():
            if isinstance(module, torch.nn.Dropout):
                module.p = config.dropout
    return tokenizer, model


def _agreed(flag: bool, device: torch.device) -> bool:
    """Rank 0's ``flag`` on every rank (ranks' clocks differ; they must stop at the same step)."""
    if not dist.is_initialized():
        return flag
    value = torch.tensor([int(flag)], device=device)
    dist.broadcast(value, src=0)
    return bool(value.item())


def average_gradients(model: torch.nn.Module, world: int) -> None:
    """Average gradients over ranks (one all-reduce per parameter)."""
    for param in model.parameters():
        if param.grad is not None:
            dist.all_reduce(param.grad)
            param.grad /= world


def check_lengths(config: TrainConfig, model: PreTrainedModel) -> None:
    """Masked sequences grow by one token per one-token span: they must still fit the encoder."""
    if is_bundle(config.corpus):
        longest = bundle_info(config.corpus).max_tokens
    else:
        longest = int(open_corpus(config.corpus).manifest.config["max_tokens"])
    positions = model.config.max_position_embeddings - (2 if "roberta" in model.config.model_type else 0)
    masked = longest + math.ceil(longest * config.masking.ratio)
    if masked > positions:
        raise ValueError(
            f"corpus blocks of up to {longest} tokens are up to {masked} tokens once masked, "
            f"more than the encoder's {positions} positions: ingest with a smaller --max-tokens"
        )


# --- held-out batches -----------------------------------------------------------------


@torch.inference_mode()
def held_out_metrics(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, config: TrainConfig, corpus: str, n_batches: int
) -> dict[str, float]:
    """Mean loss and accuracies (NPM in-batch start/end retrieval top-1, MLM masked-token top-1)
    of the config's objective on ``n_batches`` batches of ``corpus`` (use a held-out corpus),
    masked with fixed seeds so that models are compared on the same queries."""
    was_training = model.training
    model.eval()
    held_out = replace(config, corpus=corpus, seed=config.seed + 1, grad_accum=1)
    batches = micro_batches(held_out, 0)
    totals: dict[str, float] = {}
    for i in range(n_batches):
        loss, stats = batch_loss(model, mask_batch(next(batches), tokenizer, held_out, i, 0), held_out)
        for key, value in {"loss": loss, **stats}.items():
            totals[key] = totals.get(key, 0.0) + float(value) / n_batches
    model.train(was_training)
    return totals


def main(argv: list[str] | None = None) -> None:
    """Entry point for multi-process training: ``torchrun --nproc-per-node N -m npmcore.model.train …``.

    Each rank joins the process group torchrun describes (NCCL on GPUs, gloo on CPU), trains
    on its slice of every global batch and rank 0 writes the checkpoints to ``--run-dir``.
    Register the result with ``npmcore register RUN_DIR``.
    """
    import argparse
    import os

    from npmcore.runtime import configure_environment

    configure_environment()
    parser = argparse.ArgumentParser(prog="torchrun … -m npmcore.model.train", description=main.__doc__.split("\n")[0])
    parser.add_argument("--corpus", required=True, help="corpus snapshot URL")
    parser.add_argument("--run-dir", required=True, help="URL of the run folder (checkpoints; resumed if present)")
    parser.add_argument("--preset", default="cpu-small", choices=sorted(PRESETS))
    for name in ("steps", "batch_size", "grad_accum", "warmup_steps", "checkpoint_every", "seed"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=int)
    for name in ("lr", "mlm_weight", "mask_ratio", "dropout"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=float)
    parser.add_argument("--objective", choices=["npm", "npm-single", "mlm"])
    parser.add_argument("--encoder")
    parser.add_argument("--amp", choices=["auto", "none", "bf16", "fp16"])
    args = vars(parser.parse_args(argv))
    run_dir = args.pop("run_dir")
    config = configure(**args)
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
