"""Flow ``pipeline``: the main job. Stages so far: ingest (train, index and evaluate follow)."""

from prefect import flow

from flows.ingest import ingest_corpus
from flows.params import IngestParams


@flow(name="pipeline")
def pipeline(params: IngestParams | None = None, progress: bool = False) -> dict[str, str]:
    """Run every stage on ``params``; returns the URL of each stage's snapshot."""
    corpus = ingest_corpus(params, progress)
    return {"corpus": corpus}
