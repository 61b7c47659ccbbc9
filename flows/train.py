"""Flow ``train``: NPM training on a corpus snapshot, tracked in MLflow, registered as ``npm-encoder``."""

import os
from dataclasses import replace
from typing import Literal

from prefect import flow
from pydantic import BaseModel, Field

from flows.params import StoreURL, default_store
from npmcore.ingest import KIND as CORPUS
from npmcore.storage import list_snapshots
from npmcore.tracking import check_server, default_tracking_uri
from npmcore.train import PRESETS, TrainConfig
from tasks.train import train_task


class TrainParams(BaseModel):
    store: StoreURL = Field(default_factory=default_store, description="Store root URL (env NPM_STORE).")
    corpus: str | None = Field(None, description="Corpus snapshot URL; empty = the newest corpus snapshot in the store.")
    preset: Literal["cpu-small", "cpu-quality", "paper"] = Field(
        "cpu-small", description="cpu-small: a short run; cpu-quality: the shipped default encoder's recipe; paper: 32-GPU setting."
    )
    objective: Literal["npm", "npm-single"] = "npm"
    encoder: str | None = Field(None, description="Initial encoder path or cached HF name; empty = MiniLM-L6 as published (training from scratch).")
    steps: int | None = Field(None, ge=1, description="Optimizer steps (default: the preset's).")
    batch_size: int | None = Field(None, ge=2, description="Sequences per step, global (default: the preset's).")
    grad_accum: int = Field(1, ge=1)
    lr: float | None = Field(None, gt=0)
    warmup_steps: int | None = Field(None, ge=0)
    mask_ratio: float | None = Field(None, gt=0, lt=1, description="Masking budget (default: the preset's, 0.15).")
    seed: int = 0
    checkpoint_every: int | None = Field(None, ge=1)
    experiment: str = Field("npm-train", description="MLflow experiment.")
    alias: str | None = Field(None, description="Registry alias for the new npm-encoder version, e.g. champion.")

    def config(self, corpus: str) -> TrainConfig:
        overrides = {k: v for k, v in self.model_dump().items() if k in TrainConfig.__dataclass_fields__ and v is not None}
        base = replace(TrainConfig(corpus=corpus), **PRESETS[self.preset])
        masking = base.masking if self.mask_ratio is None else replace(base.masking, ratio=self.mask_ratio)
        return replace(base, **{**overrides, "corpus": corpus, "masking": masking})


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
    """Train an NPM encoder; returns the registered model URI (models:/npm-encoder/N)."""
    params = params or TrainParams()
    config = params.config(params.corpus or newest_corpus(params.store))
    return train_task(config, params.store, tracking_uri(params.store), params.experiment, params.alias, progress)
