"""Flow ``train``: NPM training on a corpus snapshot, tracked in MLflow, registered as ``npm-encoder``."""

import os
from typing import Literal

from prefect import flow
from pydantic import BaseModel, Field

from flows.params import StoreURL, default_store
from npmcore.ingest import KIND as CORPUS
from npmcore.storage import list_snapshots
from npmcore.tracking import check_server, default_tracking_uri
from npmcore.train import TrainConfig, configure
from tasks.train import train_task


class TrainParams(BaseModel):
    store: StoreURL = Field(default_factory=default_store, description="Store root URL (env NPM_STORE).")
    corpus: str | None = Field(None, description="Corpus snapshot URL; empty = the newest corpus snapshot in the store.")
    preset: Literal["cpu-small", "cpu-mlm", "cpu-quality", "paper"] = Field(
        "cpu-small", description="cpu-small: a short run; cpu-mlm: the masked-LM stage; cpu-quality: the shipped default "
        "encoder's NPM recipe; paper: 32-GPU setting.",
    )
    objective: Literal["npm", "npm-single", "mlm"] | None = Field(
        None, description="npm (span masking), npm-single (token masking) or mlm (masked-LM stage); default: the preset's (npm).",
    )
    mlm_weight: float | None = Field(None, ge=0, description="NPM objectives: weight of an auxiliary MLM loss (default: the preset's, 0).")
    encoder: str | None = Field(
        None, description="Initial encoder: path, cached HF name or registry URI (models:/npm-encoder/3, e.g. an MLM-stage "
        "model); empty = MiniLM-L6 as published.",
    )
    steps: int | None = Field(None, ge=1, description="Optimizer steps (default: the preset's).")
    batch_size: int | None = Field(None, ge=2, description="Sequences per step, global (default: the preset's).")
    grad_accum: int | None = Field(None, ge=1, description="Micro-batches per step (default: the preset's, 1).")
    lr: float | None = Field(None, gt=0)
    warmup_steps: int | None = Field(None, ge=0)
    mask_ratio: float | None = Field(None, gt=0, lt=1, description="Masking budget (default: the preset's, 0.15).")
    seed: int = 0
    checkpoint_every: int | None = Field(None, ge=1)
    experiment: str = Field("npm-train", description="MLflow experiment.")
    alias: str | None = Field(None, description="Registry alias for the new npm-encoder version, e.g. champion.")

    def config(self, corpus: str, encoder: str | None) -> TrainConfig:
        """The preset with the fields given here on top (:func:`npmcore.train.configure`)."""
        given = self.model_dump(include={f for f in TrainConfig.__dataclass_fields__ if f not in ("corpus", "encoder")})
        return configure(corpus, self.preset, mask_ratio=self.mask_ratio, encoder=encoder, **given)


def tracking_uri(store: str) -> str:
    """``MLFLOW_TRACKING_URI`` (a server must answer within 10 s), or a SQLite store inside a local store root."""
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        check_server(uri)
        return uri
    return default_tracking_uri(store)


def newest_corpus(store: str) -> str:
    found = list_snapshots(store, CORPUS)
    if not found:
        raise ValueError(f"no corpus snapshot in {store}: run `npmcore ingest` first or pass --corpus")
    return found[-1][0]


@flow(name="train")
def train(params: TrainParams | None = None, progress: bool = False) -> str:
    """Train an encoder (NPM or the masked-LM stage); returns the registered model URI (models:/npm-encoder/N)."""
    from flows.index import resolve_encoder

    params = params or TrainParams()
    config = params.config(params.corpus or newest_corpus(params.store), resolve_encoder(params.encoder, params.store))
    return train_task(config, params.store, tracking_uri(params.store), params.experiment, params.alias, progress)
