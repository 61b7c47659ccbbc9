"""Query-side training: a query encoder learns to read passages that a frozen passage encoder wrote.

NPM answers a query from its top BM25 passages, usually written in other words than the query's.
Here a copy of the passage encoder becomes a **query encoder** trained in exactly that setting
(DensePhrases' query-side fine-tuning, Lee et al. 2021): each example's candidates are every
content token of its top BM25 passages in an index (:func:`npmcore.adapt.reading.reading_set`), their
vectors the index's own (read from its datastore) or, for an index of BM25 alone, the passage
encoder's (computed once per passage and kept), and the loss is NPM's over them: with
sim(q, y) = q·y / sqrt(d),

    L = -log Σ_{y ∈ starts} exp(sim(q_start, y) / τ) / Σ_{y ∈ candidates} exp(sim(q_start, y) / τ)  + the same for ends

where ``starts`` and ``ends`` are the candidates where a gold answer starts and ends. The passage
encoder and every vector of the index stay as they are: a served index is never embedded again.
The result is saved with the passage encoder it was trained for (:mod:`npmcore.model.query_encoder`).

Batches are a function of (seed, step) and checkpoints are those of every trainer
(:mod:`npmcore.model.checkpointing`): a killed run resumes exactly.
"""

import functools
import logging
import random
import shutil
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from npmcore.adapt.reading import ReadingSet, Unseen, cloze_examples, read_examples, reading_set
from npmcore.answer.inference import NPM, QueryError
from npmcore.encoder import load_masked_lm, local_model_dir, save_fp16
from npmcore.model.checkpointing import load_weights, lr_schedule, newest_checkpoint, resume, save_checkpoint
from npmcore.model.query_encoder import PassageSide, write_passage_side

log = logging.getLogger(__name__)
CLOZE = "cloze"


@dataclass(frozen=True)
class QueryTrainConfig:
    index: str  # its BM25 finds each query's passages; its datastore (or the passage encoder) gives their vectors
    examples: str = CLOZE  # "cloze": drawn from the index's corpus (zero-shot); else a jsonl of {"query", "answers"}
    count: int = 4000  # examples: cloze ones drawn, or a seeded sample of a query log that holds more
    passages: int = 10  # top BM25 passages of a query: its candidates (as the paper table answers)
    unseen: Unseen = "document"  # cloze: never searched, the query's own document or only its own block
    encoder: str | None = None  # the passage encoder, and where the query encoder starts; None: the index's
    steps: int = 1000
    batch_size: int = 16  # queries per step
    lr: float = 5e-5
    weight_decay: float = 0.01
    warmup_steps: int = 50
    tau: float = 1.0  # temperature of the loss (inference scores exp(sim / tau) with tau = 1)
    max_grad_norm: float = 1.0
    seed: int = 0
    checkpoint_every: int = 100

    def __post_init__(self):
        if self.steps < 1 or self.batch_size < 1 or self.count < 1 or self.passages < 1:
            raise ValueError(
                f"steps, batch_size, count and passages must be >= 1, got {self.steps}, {self.batch_size}, "
                f"{self.count}, {self.passages}"
            )
        if not 0 <= self.warmup_steps < self.steps:
            raise ValueError(f"warmup_steps={self.warmup_steps} with steps={self.steps}: need 0 <= warm-up < steps")
        if self.examples != CLOZE and not Path(self.examples).is_file():
            raise ValueError(f"examples: {self.examples} is neither {CLOZE!r} nor a jsonl file")


@dataclass(frozen=True)
class QueryStepStats:
    step: int
    loss: float
    start_acc: float  # share of queries whose best start candidate is a gold start
    end_acc: float
    lr: float
    queries_per_s: float
    candidates: float  # mean candidate tokens a query


class PassageVectors:
    """Vectors of the passages of an index as NPM reads them (its datastore, or the passage encoder's
    forward), those encoded kept in memory up to ``max_tokens`` (least recently used dropped first)."""

    def __init__(self, npm: NPM, max_tokens: int = 4_000_000):  # 3 GB of fp16 at d = 384
        self.npm, self.max_tokens, self.tokens = npm, max_tokens, 0
        self.kept: OrderedDict[int, np.ndarray] = OrderedDict()

    def __call__(self, blocks: list[int]) -> list[np.ndarray]:
        missing = sorted({b for b in blocks if b not in self.kept})
        for block, vectors in zip(missing, self.npm.retrieval.block_vectors(missing), strict=True):
            self.kept[block] = vectors.astype(np.float16)
            self.tokens += len(vectors)
        for block in blocks:
            self.kept.move_to_end(block)
        out = [self.kept[b].astype(np.float32) for b in blocks]
        while self.tokens > self.max_tokens:
            _, dropped = self.kept.popitem(last=False)
            self.tokens -= len(dropped)
        return out


def query_loss(
    q_start: torch.Tensor,
    q_end: torch.Tensor,
    candidates: torch.Tensor,
    valid: torch.Tensor,
    starts: torch.Tensor,
    ends: torch.Tensor,
    tau: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """NPM's loss of a batch of queries over their own candidates (module docstring).

    Args:
        q_start, q_end: (B, d) the queries' mask vectors.
        candidates: (B, N, d) each query's candidate vectors, padded.
        valid: (B, N) bool, the real candidates; starts, ends: (B, N) bool, the positives (within ``valid``).
    """
    scale = 1.0 / (candidates.shape[-1] ** 0.5 * tau)
    losses, stats = [], {}
    for name, q, positive in (("start", q_start, starts), ("end", q_end, ends)):
        logits = torch.einsum("bd,bnd->bn", q, candidates) * scale
        logits = logits.masked_fill(~valid, float("-inf"))
        losses.append(torch.logsumexp(logits, 1) - torch.logsumexp(logits.masked_fill(~positive, float("-inf")), 1))
        stats[f"{name}_acc"] = positive.gather(1, logits.argmax(1, keepdim=True)).float().mean()
    return (losses[0] + losses[1]).mean(), stats


def batch_indices(n: int, batch_size: int, seed: int, step: int) -> list[int]:
    """The examples of ``step`` (0-based): consecutive slots of seeded permutations, one per epoch."""
    return [_order(n, seed, slot // n)[slot % n] for slot in range(step * batch_size, (step + 1) * batch_size)]


@functools.lru_cache(maxsize=2)
def _order(n: int, seed: int, epoch: int) -> list[int]:
    order = list(range(n))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return order


def training_sets(config: QueryTrainConfig, npm: NPM) -> list[ReadingSet]:
    """The config's examples in the setting they answer in; those whose passages write no answer, or whose
    query is too long for the encoder, are left out (counted in the log)."""
    started = time.perf_counter()
    if config.examples == CLOZE:
        examples = cloze_examples(npm.index_snapshot.corpus, config.count, config.seed)
    else:
        examples = read_examples(config.examples)
        if len(examples) > config.count:
            examples = random.Random(config.seed).sample(examples, config.count)
    sets = []
    for example in examples:
        try:
            npm.query_ids(example.query, 2)
        except QueryError:
            continue
        if (found := reading_set(npm, example, config.passages, config.unseen)) is not None:
            sets.append(found)
    log.info(
        "%d of %d examples have an answer in their top %d passages (%.0f s)",
        len(sets),
        len(examples),
        config.passages,
        time.perf_counter() - started,
    )
    if not sets:
        raise ValueError(f"none of the {len(examples)} examples has an answer in its top {config.passages} passages")
    return sets


def collate(
    npm: NPM, sets: list[ReadingSet], vectors: PassageVectors
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Padded query ids and attention mask (B, L), candidates (B, N, d), valid, starts, ends (B, N)."""
    ids = [npm.query_ids(s.query, 2) for s in sets]
    width = max(map(len, ids))
    pad = npm.tokenizer.pad_token_id
    input_ids = torch.tensor([i + [pad] * (width - len(i)) for i in ids])
    attention = torch.tensor([[1] * len(i) + [0] * (width - len(i)) for i in ids])
    blocks = sorted({b for s in sets for b in s.blocks})
    by_block = dict(zip(blocks, vectors(blocks), strict=True))
    n = max(len(s.ids) for s in sets)
    candidates = torch.zeros(len(sets), n, npm.dim)
    valid, starts, ends = (torch.zeros(len(sets), n, dtype=torch.bool) for _ in range(3))
    for row, s in enumerate(sets):
        rows = torch.from_numpy(np.concatenate([by_block[b] for b in s.blocks]))
        candidates[row, : len(rows)] = rows
        valid[row, : len(rows)] = True
        starts[row, : len(rows)] = torch.from_numpy(s.starts)
        ends[row, : len(rows)] = torch.from_numpy(s.ends)
    return input_ids, attention, candidates, valid, starts, ends


def train_query(
    config: QueryTrainConfig,
    run_dir: str,
    on_step: Callable[[QueryStepStats], None] | None = None,
    stop_after: int | None = None,
) -> tuple[PreTrainedTokenizerFast, PreTrainedModel, NPM]:
    """Train a query encoder (or resume the newest checkpoint of ``run_dir``); returns its tokenizer, the
    encoder with its masked-LM head (untouched) and the NPM of the training index (its passage side).

    ``stop_after``: stop after this step without finishing (to test interruption)."""
    npm = NPM(config.index, encoder=config.encoder)  # passages in this machine's precision, as queries will read them
    if npm.passage_side is not None:
        raise ValueError(f"{npm.encoder_source} is a query encoder: train from its passage encoder")
    sets = training_sets(config, npm)
    torch.manual_seed(config.seed)
    tokenizer, model = load_masked_lm(npm.encoder_source)
    encoder = model.base_model
    model.eval()  # no dropout: short CPU runs do not overfit, and dropout halves a CPU step (npmcore.model.train)
    optimizer = torch.optim.AdamW(encoder.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_schedule(config.warmup_steps, config.steps))
    step = resume(run_dir, config, model, optimizer, scheduler)
    if step:
        log.info("resumed %s at step %d", run_dir, step)
    vectors = PassageVectors(npm)
    mask_id = tokenizer.mask_token_id
    while step < config.steps and (stop_after is None or step < stop_after):
        started = time.perf_counter()
        batch = [sets[i] for i in batch_indices(len(sets), config.batch_size, config.seed, step)]
        input_ids, attention, candidates, valid, starts, ends = collate(npm, batch, vectors)
        hidden = encoder(input_ids=input_ids, attention_mask=attention).last_hidden_state
        masks = hidden[input_ids == mask_id].view(len(batch), 2, -1)  # [MASKs][MASKe] of each query
        loss, stats = query_loss(masks[:, 0], masks[:, 1], candidates, valid, starts, ends, config.tau)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(encoder.parameters(), config.max_grad_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        if on_step is not None:
            on_step(
                QueryStepStats(
                    step,
                    float(loss.detach()),
                    float(stats["start_acc"]),
                    float(stats["end_acc"]),
                    scheduler.get_last_lr()[0],
                    len(batch) / (time.perf_counter() - started),
                    float(valid.sum()) / len(batch),
                )
            )
        if step % config.checkpoint_every == 0 or step == config.steps:
            save_checkpoint(run_dir, config, [{"index": config.index}], step, model, optimizer, scheduler)
    return tokenizer, model, npm


def export_query_encoder(run_dir: str, out: Path) -> Path:
    """The newest checkpoint of a query-side run as an fp16 encoder folder marked with the passage encoder
    it was trained for (:mod:`npmcore.model.query_encoder`)."""
    newest = newest_checkpoint(run_dir)
    if newest is None:
        raise ValueError(f"no checkpoint in {run_dir}")
    url, manifest = newest
    config = QueryTrainConfig(**manifest.config)
    npm = NPM(config.index, encoder=config.encoder, precision="f32")
    _, model = load_masked_lm(npm.encoder_source)
    load_weights(url, model)
    out = Path(out)
    partial = save_fp16(model.eval(), local_model_dir(npm.encoder_source), out.with_name(f".tmp-query-{out.name}"))
    passage = config.encoder or npm.index_snapshot.manifest.config["encoder"]
    trained = {**asdict(config), "step": manifest.counts["step"], "checkpoint": url}
    write_passage_side(partial, PassageSide(passage, npm.fingerprint, trained))
    shutil.rmtree(out, ignore_errors=True)
    return partial.rename(out)  # whole, its passage side included, or not at all
