"""Flows ``train_encoder``: training on a corpus snapshot (NPM or the masked-LM stage), tracked in
MLflow, registered as ``npm-encoder``; ``train_query_encoder``: query-side training against an index whose
passage encoder stays frozen, registered as ``npm-query-encoder`` (:mod:`npmcore.adapt.query_train`)."""

from typing import Literal

from prefect import flow
from pydantic import BaseModel, Field, model_validator

from flows.params import StoreURL, default_store
from flows.promote import PromoteParams, promote
from npmcore.adapt.query_train import CLOZE, QueryTrainConfig
from npmcore.index.bm25_index import build_bm25_index
from npmcore.model.train_config import TrainConfig, configure
from npmcore.serve.serving import serving_index
from npmcore.snapshots import newest_corpus
from npmcore.tracking import check_registered, resolve_encoder
from npmcore.tracking_store import tracking_uri
from tasks.train import train_query_task, train_task


class TrainParams(BaseModel):
    store: StoreURL = Field(default_factory=default_store, description="Store root URL (env NPM_STORE).")
    corpus: str | None = Field(
        None, description="Corpus snapshot URL; empty = the newest corpus snapshot in the store."
    )
    preset: Literal["cpu-small", "cpu-mlm", "cpu-quality", "gpu-mlm", "gpu-npm", "paper"] = Field(
        "cpu-small",
        description="cpu-small: a short run; cpu-mlm: the masked-LM stage; cpu-quality: NPM + 0.5 MLM, the "
        "shipped encoder's CPU recipe; gpu-mlm, gpu-npm: one GPU (infra/README.md); paper: 32-GPU setting.",
    )
    objective: Literal["npm", "npm-single", "mlm"] | None = Field(
        None,
        description="npm (span masking), npm-single (token masking) or mlm (masked-LM stage); "
        "default: the preset's (npm).",
    )
    mlm_weight: float | None = Field(
        None,
        ge=0,
        description="NPM objectives: weight of an auxiliary MLM loss (default: the preset's; cpu-quality 0.5, else 0).",
    )
    encoder: str | None = Field(
        None,
        description="Initial encoder: path, cached HF name or registry URI (models:/npm-encoder/3, e.g. an MLM-stage "
        "model); empty = MiniLM-L6 as published.",
    )
    steps: int | None = Field(None, ge=1, description="Optimizer steps (default: the preset's).")
    batch_size: int | None = Field(None, ge=2, description="Sequences per step, global (default: the preset's).")
    grad_accum: int | None = Field(None, ge=1, description="Micro-batches per step (default: the preset's, 1).")
    lr: float | None = Field(None, gt=0)
    warmup_steps: int | None = Field(None, ge=0)
    mask_ratio: float | None = Field(None, gt=0, lt=1, description="Masking budget (default: the preset's, 0.15).")
    rare_boost: float | None = Field(
        None,
        gt=0,
        description="NPM span masking: how many times as likely a span holding a date, a number or a rare token is "
        "to be masked as another (default: the preset's).",
    )
    prebatch: int | None = Field(
        None,
        ge=0,
        description="NPM: the keys of this many earlier batches are extra negatives (default: the preset's).",
    )
    batches: Literal["document", "bm25"] = Field(
        "document",
        description="document: a batch is a document's consecutive blocks (the paper's); bm25: seed blocks with their "
        "BM25 neighbours in other documents, so that a span's positives are written by other articles.",
    )
    seed: int = 0
    checkpoint_every: int | None = Field(None, ge=1)
    experiment: str = Field("npm-train", description="MLflow experiment.")
    alias: str | None = Field(None, description="Registry alias for the new npm-encoder version, e.g. candidate.")
    promote: bool = Field(
        False,
        description="Make the new version the champion if it beats the current one on the dev evaluation "
        "(or if there is none yet): the rule of the promote flow.",
    )

    @model_validator(mode="after")
    def _composes(self) -> "TrainParams":
        """Refuse a configuration that cannot train (warm-up >= steps, …) now, not when a run starts."""
        self.config("corpus", None, "neighbours" if self.batches == "bm25" else None)
        return self

    def config(self, corpus: str, encoder: str | None, neighbours: str | None) -> TrainConfig:
        """The preset with the fields given here on top (:func:`npmcore.model.train_config.configure`); ``neighbours``:
        the BM25 index of the corpus that bm25 batches search."""
        fields = {f for f in TrainConfig.__dataclass_fields__ if f not in ("corpus", "encoder", "neighbours")}
        given = self.model_dump(include=fields)
        return configure(
            corpus,
            self.preset,
            mask_ratio=self.mask_ratio,
            rare_boost=self.rare_boost,
            encoder=encoder,
            neighbours=neighbours,
            **given,
        )


@flow(name="train_encoder")
def train_encoder(params: TrainParams | None = None, progress: bool = False) -> str:
    """Train an encoder (NPM or the masked-LM stage); returns the registered model URI (models:/npm-encoder/N)."""
    params = params or TrainParams()
    corpus, encoder = params.corpus or newest_corpus(params.store), resolve_encoder(params.encoder, params.store)
    neighbours = build_bm25_index(corpus, encoder) if params.batches == "bm25" else None  # made once, then reused
    config = params.config(corpus, encoder, neighbours)
    uri = tracking_uri(params.store)
    model = train_task(config, params.preset, params.store, uri, params.experiment, params.alias, progress)
    check_registered(model, uri)  # in the store's registry (a cached result too), or the run fails
    if params.promote:
        promote(PromoteParams(model=model, store=params.store))
    return model


class QueryTrainParams(BaseModel):
    store: StoreURL = Field(default_factory=default_store, description="Store root URL (env NPM_STORE).")
    index: str | None = Field(
        None,
        description="Index whose BM25 finds each query's passages and whose vectors (or, for an index of BM25 alone, "
        "its passage encoder's) are the candidates; empty = the store's served index.",
    )
    queries: str | None = Field(
        None,
        description='A jsonl of {"query", "answers"} (a query log: the adapted setting); empty = cloze '
        "queries drawn from the index's corpus (a name, date or number masked; zero-shot).",
    )
    count: int = Field(
        4000, ge=1, description="Queries: cloze ones drawn, or a seeded sample of a query log that holds more."
    )
    passages: int = Field(10, ge=1, description="Top BM25 passages a query reads (its candidates).")
    encoder: str | None = Field(
        None, description="The passage encoder, where the query encoder starts (default: the index's)."
    )
    steps: int = Field(1000, ge=1)
    batch_size: int = Field(16, ge=1, description="Queries per step.")
    lr: float = Field(5e-5, gt=0)
    warmup_steps: int = Field(50, ge=0)
    seed: int = 0
    checkpoint_every: int = Field(100, ge=1)
    experiment: str = Field("npm-train", description="MLflow experiment.")
    alias: str | None = Field(None, description="Registry alias for the new npm-query-encoder version.")

    def config(self, index: str, encoder: str | None) -> QueryTrainConfig:
        given = self.model_dump(include={"count", "passages", "steps", "batch_size", "lr", "warmup_steps", "seed"})
        return QueryTrainConfig(
            index=index,
            examples=self.queries or CLOZE,
            encoder=encoder,
            checkpoint_every=self.checkpoint_every,
            **given,
        )


@flow(name="train_query_encoder")
def train_query_encoder(params: QueryTrainParams, progress: bool = False) -> str:
    """Train a query encoder for an index's passage encoder; returns its registered model URI
    (models:/npm-query-encoder/N)."""
    config = params.config(params.index or serving_index(params.store), resolve_encoder(params.encoder, params.store))
    uri = tracking_uri(params.store)
    model = train_query_task(config, params.store, uri, params.experiment, params.alias, progress)
    check_registered(model, uri)
    return model
