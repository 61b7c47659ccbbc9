"""Flow ``pipeline``: the main job. Stages so far: ingest -> train -> build_index (evaluate follows)."""

from prefect import flow
from pydantic import BaseModel, Field

from flows.index import IndexParams, build_index, dask_runner
from flows.ingest import ingest_corpus
from flows.params import IngestParams
from flows.train import TrainParams, train


class PipelineParams(BaseModel):
    ingest: IngestParams = Field(default_factory=IngestParams)
    train: TrainParams = Field(default_factory=TrainParams, description="Its store and corpus come from the ingest stage.")
    index: IndexParams = Field(default_factory=IndexParams, description="Its store, corpus and encoder come from the earlier stages.")


@flow(name="pipeline")
def pipeline(params: PipelineParams | None = None, progress: bool = False) -> dict[str, str]:
    """Ingest, train on the new corpus snapshot, index it with the new encoder; returns the
    corpus URL, the registered encoder URI and the index URL."""
    params = params or PipelineParams()
    store = params.ingest.store
    corpus = ingest_corpus(params.ingest, progress)
    encoder = train(params.train.model_copy(update={"store": store, "corpus": corpus}), progress)
    index_params = params.index.model_copy(update={"store": store, "corpus": corpus, "model": encoder, "cluster": params.ingest.cluster})
    index = build_index.with_options(task_runner=dask_runner(index_params.cluster))(index_params)
    return {"corpus": corpus, "encoder": encoder, "index": index}
