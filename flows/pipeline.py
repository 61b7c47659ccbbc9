"""Flow ``pipeline``: the main job. Stages so far: ingest -> train -> build_index (evaluate follows)."""

from prefect import flow
from pydantic import BaseModel, Field

from flows.index import IndexParams, build_index, dask_runner
from flows.ingest import ingest_corpus
from flows.params import IngestParams
from flows.train import TrainParams, train


class PipelineParams(BaseModel):
    ingest: IngestParams = Field(default_factory=IngestParams)
    train: TrainParams | None = Field(
        None, description="Train an encoder on the new corpus snapshot (its store and corpus come from the ingest stage); "
        "empty = index with the shipped NPM-trained default encoder.",
    )
    index: IndexParams = Field(default_factory=IndexParams, description="Its store, corpus and encoder come from the earlier stages.")


@flow(name="pipeline")
def pipeline(params: PipelineParams | None = None, progress: bool = False) -> dict[str, str | None]:
    """Ingest, train on the new corpus snapshot (or take the shipped default encoder), index it
    with that encoder; returns the corpus URL, the encoder (registered model URI, or None for
    the default) and the index URL."""
    params = params or PipelineParams()
    store = params.ingest.store
    corpus = ingest_corpus(params.ingest, progress)
    encoder = train(params.train.model_copy(update={"store": store, "corpus": corpus}), progress) if params.train else None
    index_params = params.index.model_copy(update={"store": store, "corpus": corpus, "model": encoder, "cluster": params.ingest.cluster})
    index = build_index.with_options(task_runner=dask_runner(index_params.cluster))(index_params)
    return {"corpus": corpus, "encoder": encoder, "index": index}
