"""What a training run is: :class:`TrainConfig` (its objective, schedule, masking and batches), the named presets
(:data:`PRESETS`: the CPU recipes, those of a lent GPU, the paper's) and :func:`configure`, the one way to make a
config: a preset, then overrides. A run's checkpoints hold its config, and a run folder belongs to one.

Imports :mod:`npmcore.model.masking` (the masking's settings) and no other module of npmcore.
"""

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Literal

from npmcore.model.masking import MaskingConfig

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
    # bm25 batches: an index of the corpus with BM25 (npmcore.index.bm25_index.build_bm25_index)
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
