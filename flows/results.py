"""What the flows return: plain records, light to import, so that the CLI prints a stored result without
loading the flows (a cached ``npmcore demo``)."""

from pydantic import BaseModel

from npmcore.sources import Citation


class EvalRow(BaseModel):
    """One evaluation run (one MLflow run): a task, a system, a temperature and an index."""

    task: str
    system: str
    tau: float
    factory: str  # the FAISS index searched (kNN systems) or holding the corpus (BM25-restricted ones)
    corpus_tokens: int  # size of the reference corpus
    n: int
    metric: str
    score: float
    notes: dict[str, int]
    query_copy_rate: float | None = None  # open-set: answers repeating a content word of the query
    lam: float | None = None  # masked-token systems: the weight of p_kNN (0: mlm, 1: knn)
    fraction: float = 1.0  # masked-token systems: the share of the datastore searched
    perplexity: float | None = None  # masked-token systems on open-set tasks
    # per group and stale answers, and the gold in the passages searched (npmcore.evaluation.run.breakdown)
    breakdown: dict[str, float] = {}
    # predictions with a confidence: {"ece", "aurc", "accuracy_at_coverage", "n"} (npmcore.evaluation.selective)
    calibration: dict | None = None
    # and what is shown: {"min_confidence", "sure", "precision", "right_greyed"} (selective.shown_report)
    shown: dict | None = None


class ShownAnswer(BaseModel):
    """An answer with its best evidence: ``passage[start:end]`` is the answer in block ``block_id``, which
    comes from ``source``."""

    answer: str
    score: float
    block_id: str
    passage: str
    start: int
    end: int
    source: Citation


class Answered(BaseModel):
    query: str
    answers: list[ShownAnswer]  # best first


class PipelineResult(BaseModel):
    corpus: str
    encoder: str | None  # registered model URI; None: the shipped default encoder
    index: str
    factory: str
    tokens: int
    rows: list[EvalRow]
    answered: list[Answered]
    run_id: str  # the MLflow parent run
    serving: str | None  # the index the store serves after the run (its serving pointer); None: none
