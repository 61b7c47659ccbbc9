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
(:func:`in_background`): host-side masking then overlaps the GPU step instead of adding to it.

Checkpoints are snapshots (``{run}/checkpoints/step-NNNNNNN``: weights, optimizer,
scheduler, step, config; verified by checksum) and resume is exact: batches are a
function of (seed, epoch), masking and dropout are seeded per step.
"""

import functools
import hashlib
import itertools
import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Literal, TypeVar

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_fn
from torch import Tensor
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from npmcore.corpus.bundle import bundle_info, is_bundle
from npmcore.encoder import base_encoder_path, load_masked_lm, local_model_dir, mlm_head, save_fp16
from npmcore.model.batching import Batch, by_length, iter_batches
from npmcore.model.checkpointing import CHECKPOINTS, load_weights, lr_schedule, resume, save_checkpoint
from npmcore.model.loss import PreBatch, span_loss, token_loss
from npmcore.model.masking import MaskedBatch, MaskingConfig, mask_spans, mask_tokens
from npmcore.model.mlm import MLMBatch, mask_mlm, mlm_loss
from npmcore.model.neighbours import neighbour_batches
from npmcore.rarity import OTHER, TokenRarity, corpus_rarity
from npmcore.snapshots import open_corpus
from npmcore.storage import list_snapshots, open_snapshot

log = logging.getLogger(__name__)

Objective = Literal["npm", "npm-single", "mlm"]


@dataclass(frozen=True)
class TrainConfig:
    """Defaults are the small CPU preset; :data:`PRESETS` has the paper's GPU setting."""

    corpus: str  # corpus snapshot URL (blocks to train on)
    encoder: str | None = (
        None  # initial encoder: path or cached HF name; None = MiniLM-L6 as published (base_encoder_path)
    )
    objective: Objective = "npm"  # "npm" (span masking), "npm-single" (token masking) or "mlm" (BERT masked-LM stage)
    mlm_weight: float = 0.0  # npm objectives: weight of an auxiliary MLM loss in the same step; 0 = none
    steps: int = 300  # optimizer steps
    batch_size: int = 16  # sequences per optimizer step, global over ranks and accumulation
    grad_accum: int = 1  # micro-batches per optimizer step (each one is masked on its own)
    lr: float = 5e-5  # peak AdamW learning rate
    weight_decay: float = 0.01
    warmup_steps: int = 30  # linear warm-up, then linear decay to 0 at `steps`
    max_grad_norm: float = 1.0  # gradient clipping
    amp: Literal["auto", "none", "bf16", "fp16"] = "auto"  # auto: bf16 on CUDA when supported, else none
    # None: the encoder's own dropout (0.1 for BERT and RoBERTa). The CPU presets train without: runs of
    # less than an epoch do not overfit, and dropout halves a CPU step's speed (attention dropout takes
    # scaled_dot_product_attention off its fused kernel; bench/train_step.py).
    dropout: float | None = None
    seed: int = 0
    checkpoint_every: int = 100  # steps between checkpoints (and at the end)
    masking: MaskingConfig = field(default_factory=MaskingConfig)  # ratio is also the MLM masking budget
    prebatch: int = 0  # npm: the keys of this many earlier micro-batches are extra negatives (npmcore.model.loss)
    # "document": a batch is a document's consecutive blocks (npmcore.model.batching, the paper's); "bm25": seed blocks
    # with their BM25 neighbours in other documents (npmcore.model.neighbours), found with the index `neighbours`
    batches: Literal["document", "bm25"] = "document"
    # bm25 batches: an index of the corpus with BM25 (npmcore.index.indexer.build_bm25_index)
    neighbours: str | None = None

    def __post_init__(self):
        if self.steps < 1 or self.batch_size < 2:
            raise ValueError(
                f"need steps >= 1 and batch_size >= 2, got steps={self.steps}, batch_size={self.batch_size}"
            )
        if self.batch_size % self.grad_accum:
            raise ValueError(f"batch_size {self.batch_size} is not a multiple of grad_accum {self.grad_accum}")
        if not 0 <= self.warmup_steps < self.steps:
            raise ValueError(
                f"warmup_steps={self.warmup_steps} with steps={self.steps}: the learning rate would never reach "
                "its peak; use fewer warm-up steps than steps"
            )
        if self.dropout is not None and not 0 <= self.dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.prebatch < 0 or (self.prebatch and self.objective != "npm"):
            raise ValueError(f"prebatch must be >= 0 and is for the npm objective only, got {self.prebatch}")
        if (self.batches == "bm25") != (self.neighbours is not None):
            raise ValueError("bm25 batches need an index of the corpus with BM25 (neighbours), and only they do")
        if self.mlm_weight < 0 or (self.objective == "mlm" and self.mlm_weight):
            raise ValueError(
                f"mlm_weight must be >= 0 and is for npm objectives only, got {self.mlm_weight} with {self.objective!r}"
            )


PRESETS: dict[str, dict] = {
    # Paper (Min et al. 2023, RoBERTa-large): 512 x 256-token sequences per step on 32 GPUs.
    "paper": dict(
        steps=100_000, batch_size=512, lr=3e-5, warmup_steps=4_000, weight_decay=0.01, checkpoint_every=5_000
    ),
    "cpu-small": dict(dropout=0.0),
    # The masked-LM stage before NPM on CPU: BERT masking, a fresh head on the packaged MiniLM-L6.
    "cpu-mlm": dict(
        objective="mlm", steps=2_000, batch_size=32, lr=5e-4, warmup_steps=100, checkpoint_every=200, dropout=0.0
    ),
    # The CPU recipe of the shipped encoder (npmcore/checkpoints/npm-minilm-l6/README.md): NPM with an auxiliary
    # MLM loss in the same step; from the packaged MiniLM-L6 it beat the NPM-only run of twice the steps and the
    # masked-LM stage followed by NPM on the dev sets. Masking only spans of content words spends the small CPU
    # budget on what open-set answers are made of. Title n-grams in the body are never masked: as positives
    # they taught the GPU-trained encoder to answer with the query's subject. The keys of the 4 previous batches
    # are extra negatives (docs/train.md: at equal steps from the shipped encoder they kept Google-RE, which
    # falls without them); the shipped encoder was trained before them (its card: --prebatch 0).
    "cpu-quality": dict(
        steps=400,
        batch_size=16,
        lr=3e-4,
        warmup_steps=40,
        checkpoint_every=100,
        dropout=0.0,
        mlm_weight=0.5,
        masking=MaskingConfig(content_words=True, title_ngrams=False),
        prebatch=4,
    ),
    # One lent GPU for minutes (infra/README.md, GPU campaign). gpu-npm: the recipe of the encoder trained on
    # an H200 (../shared/encoders/npm-minilm-l6-h200), cpu-quality's objective at the paper's batch of 512 x 256
    # tokens, lr 2e-4, a 5% warm-up, with cpu-quality's masking (no title n-grams) and the previous batch's keys
    # as extra negatives (131k more; not yet measured on a GPU); gpu-mlm: the masked-LM stage with the same
    # batch, rate and warm-up.
    # `steps` is nominal: the campaign sizes it to its minutes, and the warm-up keeps its share (configure).
    "gpu-mlm": dict(
        objective="mlm", steps=2_000, batch_size=512, lr=2e-4, warmup_steps=100, checkpoint_every=100, dropout=0.0
    ),
    "gpu-npm": dict(
        steps=2_000,
        batch_size=512,
        lr=2e-4,
        warmup_steps=100,
        checkpoint_every=100,
        dropout=0.0,
        mlm_weight=0.5,
        masking=MaskingConfig(content_words=True, title_ngrams=False),
        prebatch=1,
    ),
}


def configure(
    corpus: str,
    preset: str = "cpu-small",
    mask_ratio: float | None = None,
    rare_boost: float | None = None,
    **overrides,
) -> TrainConfig:
    """The one way to make a config: ``preset``, then every override that is not None.

    When ``steps`` is overridden and ``warmup_steps`` is not, the preset's warm-up keeps
    its share of the schedule (100 of 800 steps becomes 1 of 8), so a short run still
    reaches its peak learning rate. ``mask_ratio`` sets the masking budget, ``rare_boost``
    the masking's weight of rare spans.
    """
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; presets: {', '.join(sorted(PRESETS))}")
    given = {k: v for k, v in overrides.items() if v is not None}
    unknown = sorted(set(given) - {f.name for f in fields(TrainConfig)})
    if unknown:
        raise ValueError(f"unknown training settings {unknown}")
    base = {**asdict(TrainConfig(corpus=corpus)), **PRESETS[preset], "corpus": corpus}
    if "steps" in given and "warmup_steps" not in given:
        given["warmup_steps"] = round(base["warmup_steps"] * given["steps"] / base["steps"])
    masking = base["masking"] if isinstance(base["masking"], MaskingConfig) else MaskingConfig(**base["masking"])
    if mask_ratio is not None:
        masking = replace(masking, ratio=mask_ratio)
    if rare_boost is not None:
        masking = replace(masking, rare_boost=rare_boost)
    return TrainConfig(**{**base, **given, "masking": masking})


LENGTH_POOL = 16  # MLM: batches re-batched together by block length (npmcore.model.batching.by_length)


@dataclass(frozen=True)
class StepStats:
    step: int
    loss: float
    lr: float
    tokens_per_s: float  # encoded tokens (keys, queries and MLM copies) per second
    flops_per_s: float  # model FLOPs per second (step_flops): MFU's numerator
    start_acc: float | None = None  # NPM: in-batch retrieval top-1 of start (or single-token) queries
    end_acc: float | None = None
    spans_per_seq: float | None = None
    masked_fraction: float | None = None
    title_spans: float | None = None  # NPM: share of masked spans that are n-grams of their block's own title
    title_positives: float | None = None  # and share of the positives that belong to such spans
    rare_spans: float | None = None  # NPM: share of masked spans holding a date, a number or a rare token
    rare_positives: float | None = None  # and share of the positives that belong to such spans
    other_document_positives: float | None = None  # NPM: share of the positives in another document than their span's
    mlm_acc: float | None = None  # MLM: top-1 accuracy of the masked-token predictions


@dataclass(frozen=True)
class StepBatch:
    """One global micro-batch, masked for the config's objective(s)."""

    npm: MaskedBatch | None  # span (npm) or token (npm-single) masking; None for the mlm objective
    mlm: MLMBatch | None  # BERT masking: the mlm objective, or an npm objective with mlm_weight > 0
    docs: Tensor  # (B,) long: each sequence's document, numbered within the batch


# --- one step -------------------------------------------------------------------------


def derive_seed(*parts: int) -> int:
    """A 63-bit seed from integers, the same in every process (unlike ``hash`` of strings)."""
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], "little") >> 1


def to_device(batch: StepBatch, device: torch.device) -> StepBatch:
    def move(part):
        return None if part is None else type(part)(**{f.name: getattr(part, f.name).to(device) for f in fields(part)})

    return StepBatch(move(batch.npm), move(batch.mlm), batch.docs.to(device))


def _rank_world() -> tuple[int, int]:
    return (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)


RARITY_BLOCKS = 100_000  # blocks whose tokens are counted for the token rarity of a corpus (its first ones)


@functools.lru_cache(maxsize=2)
def training_rarity(corpus: str, vocab_size: int) -> TokenRarity:
    """Token document frequencies over (the first :data:`RARITY_BLOCKS` blocks of) a corpus or
    bundle: which tokens are rare, for span selection and the masking statistics."""
    blocks = (ids for batch in iter_batches(corpus, 2, seed=0, drop_last=False) for ids in batch.token_ids)
    return corpus_rarity(itertools.islice(blocks, RARITY_BLOCKS), vocab_size)


def mask_batch(
    batch: Batch, tokenizer: PreTrainedTokenizerFast, config: TrainConfig, step: int, micro: int
) -> StepBatch:
    """Mask one (global) micro-batch; seeded by (seed, step, micro) so every rank agrees."""
    npm = mlm = None
    if config.objective != "mlm":
        generator = torch.Generator().manual_seed(derive_seed(config.seed, step, micro))
        if config.objective == "npm":
            rarity = training_rarity(config.corpus, len(tokenizer))
            npm = mask_spans(batch.token_ids, tokenizer, config.masking, generator, batch.title_tokens, rarity)
        else:
            npm = mask_tokens(batch.token_ids, tokenizer, config.masking.ratio, generator, batch.title_tokens)
    if config.objective == "mlm" or config.mlm_weight > 0:
        generator = torch.Generator().manual_seed(derive_seed(config.seed, step, micro, 1))
        mlm = mask_mlm(batch.token_ids, tokenizer, config.masking.ratio, generator)
    numbers = {doc: n for n, doc in enumerate(dict.fromkeys(batch.doc_ids))}
    return StepBatch(npm, mlm, torch.tensor([numbers[doc] for doc in batch.doc_ids]))


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


def micro_batches(config: TrainConfig, start_step: int) -> Iterator[Batch]:
    """Global micro-batches from ``start_step`` on, epoch after epoch (skipping done ones)."""
    micro = config.batch_size // config.grad_accum
    skip, epoch = start_step * config.grad_accum, 0
    while True:
        produced = 0
        if config.batches == "bm25":
            batches = neighbour_batches(config.corpus, config.neighbours, micro, config.seed, epoch)
        else:
            batches = iter_batches(config.corpus, micro, config.seed, epoch)
        if config.objective == "mlm":  # no in-batch positives needed: batch blocks of similar length
            batches = by_length(batches, LENGTH_POOL, config.seed, epoch)
        for batch in batches:
            produced += 1
            if skip:
                skip -= 1
                continue
            yield batch
        if produced == 0:
            raise ValueError(f"corpus {config.corpus} has fewer blocks than one micro-batch of {micro}")
        epoch += 1


def masked_batches(config: TrainConfig, tokenizer: PreTrainedTokenizerFast, start_step: int) -> Iterator[StepBatch]:
    """The global micro-batches of every step from ``start_step`` on, masked, in training order."""
    batches = micro_batches(config, start_step)
    step = start_step
    while True:
        for micro in range(config.grad_accum):
            yield mask_batch(next(batches), tokenizer, config, step, micro)
        step += 1


Item = TypeVar("Item")
PREFETCH = 4  # masked micro-batches kept ready: enough to hide an epoch's start (reading and shuffling the corpus)


def in_background(items: Iterator[Item], depth: int) -> Iterator[Item]:
    """``items``, computed up to ``depth`` ahead on a background thread, in the same order; an
    exception raised there is raised here. Closing the generator stops the thread.

    Masking a 512-sequence batch takes 0.10 s of host time, a fifth of a GPU step (H200): done
    here it overlaps the step instead of delaying it. Masking is seeded by (seed, step, micro)
    alone (its own generators), so the batches are exactly those masked inline.
    """
    ready: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(entry: tuple) -> bool:  # False once the consumer is gone
        while not stop.is_set():
            try:
                ready.put(entry, timeout=0.1)
                return True
            except queue.Full:
                pass
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put((item, None)):
                    return
        except BaseException as error:  # noqa: BLE001 -- handed to the consumer, raised there
            put((None, error))

    thread = threading.Thread(target=produce, name="in-background", daemon=True)
    thread.start()
    try:
        while True:
            item, error = ready.get()
            if error is not None:
                raise error
            yield item
    finally:
        stop.set()
        thread.join()


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


@dataclass(frozen=True)
class ModelSize:
    """What a step's model FLOPs depend on, besides the batch (:func:`step_flops`)."""

    encoder: int  # weights of the encoder's linear layers (embeddings are lookups: no FLOPs)
    head: int  # weights of the MLM head's linear layers (its decoder is the tied embedding matrix)
    layers: int
    width: int  # hidden size d


def model_size(model: PreTrainedModel) -> ModelSize:
    """The encoder with its MLM head's sizes, from its linear layers and its config."""

    def linear(module: torch.nn.Module) -> int:
        return sum(m.weight.numel() for m in module.modules() if isinstance(m, torch.nn.Linear))

    return ModelSize(
        linear(model.base_model), linear(mlm_head(model)), model.config.num_hidden_layers, model.config.hidden_size
    )


def step_flops(batch: StepBatch, size: ModelSize, objective: Objective) -> float:
    """Model FLOPs of one training step on ``batch``: MFU's numerator.

    The matrix multiplications the step needs on real (non-padding) tokens, at 2 FLOPs a
    multiply-add, forward and backward (3x the forward): per encoded sequence of n real tokens
    (keys, NPM queries, MLM copy) 6 P n for the encoder's P linear weights and 12 L d n^2 for
    attention (scores and weighted values, L layers of width d); per NPM query (two a span,
    one for npm-single) 6 d K against the batch's K real key tokens; per MLM target 6 H for the
    head's H linear weights. Padding, recomputation in the backward pass (the loss's chunks),
    embeddings, norms and softmax are not counted.
    """
    masks = [batch.npm.attention_mask, batch.npm.masked_attention_mask] if batch.npm is not None else []
    masks += [batch.mlm.attention_mask] if batch.mlm is not None else []
    n = torch.cat([m.sum(1) for m in masks]).double()  # real tokens of each encoded sequence
    flops = 6 * size.encoder * float(n.sum()) + 12 * size.layers * size.width * float((n**2).sum())
    if batch.npm is not None:
        queries = batch.npm.span_seq.numel() * (2 if objective == "npm" else 1)
        flops += 6 * size.width * queries * float(batch.npm.attention_mask.sum())
    if batch.mlm is not None:
        flops += 6 * size.head * batch.mlm.positions.numel()
    return flops


def encoded_tokens(batch: StepBatch) -> int:
    """Real tokens that went through the encoder: keys, NPM queries and MLM copies."""
    parts = [batch.npm.attention_mask, batch.npm.masked_attention_mask] if batch.npm is not None else []
    parts += [batch.mlm.attention_mask] if batch.mlm is not None else []
    return int(sum(int(p.sum()) for p in parts))


def batch_stats(batch: StepBatch) -> dict[str, float]:
    """NPM masking statistics of a batch: spans per sequence, the fraction of real tokens masked,
    the shares of spans and of positives that are title n-grams found in a block's body
    (the subject-copy shortcut; 0 when the masking leaves them out), and those that hold a
    date, a number or a rare token (what answers are made of; :mod:`npmcore.rarity`), and the share of
    positives in another document than their span's (cross-document batches raise it)."""
    if batch.npm is None:
        return {}
    npm = batch.npm
    B, S = npm.input_ids.shape[0], npm.span_seq.numel()
    real = int(npm.attention_mask.sum())
    return {
        "spans_per_seq": S / B,
        "masked_fraction": float(npm.span_len.sum()) / max(1, real),
        "title_spans": float(npm.span_title.sum()) / max(1, S),
        "title_positives": float(npm.span_title[npm.pos_span].sum()) / max(1, npm.pos_span.numel()),
        "rare_spans": float((npm.span_kind != OTHER).sum()) / max(1, S),
        "rare_positives": float((npm.span_kind[npm.pos_span] != OTHER).sum()) / max(1, npm.pos_span.numel()),
        "other_document_positives": float((batch.docs[npm.pos_seq] != batch.docs[npm.span_seq[npm.pos_span]]).sum())
        / max(1, npm.pos_span.numel()),
    }


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


# --- checkpoints ----------------------------------------------------------------------


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
