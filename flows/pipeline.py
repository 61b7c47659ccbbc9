"""Flow ``pipeline``: the main job. Stages so far: ingest -> train (build_index and evaluate follow)."""

from prefect import flow
from pydantic import BaseModel, Field

from flows.ingest import ingest_corpus
from flows.params import IngestParams
from flows.train import TrainParams, train


class PipelineParams(BaseModel):
    ingest: IngestParams = Field(default_factory=IngestParams)
    train: TrainParams = Field(default_factory=TrainParams, description="Its store and corpus come from the ingest stage.")


@flow(name="pipeline")
def pipeline(params: PipelineParams | None = None, progress: bool = False) -> dict[str, str]:
    """Ingest, then train on the new corpus snapshot; returns the corpus URL and the registered encoder URI."""
    params = params or PipelineParams()
    corpus = ingest_corpus(params.ingest, progress)
    encoder = train(params.train.model_copy(update={"store": params.ingest.store, "corpus": corpus}), progress)
    return {"corpus": corpus, "encoder": encoder}
