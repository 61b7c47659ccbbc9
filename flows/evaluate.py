"""Flow ``evaluate``: zero-shot tasks against their reference corpora, each run logged to MLflow."""

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import mlflow
from prefect import flow, task
from pydantic import BaseModel, Field, field_validator

from flows.index import IndexParams, build_index, dask_runner, resolve_encoder
from flows.ingest import ingest_corpus
from flows.params import ClusterParams, IngestParams, StoreURL, default_store
from flows.train import tracking_uri
from npmcore.evaluation.references import write_reference_corpus
from npmcore.evaluation.run import Result, accuracy_by_length, answer_lengths
from npmcore.evaluation.run import evaluate as run_evaluation
from npmcore.evaluation.tasks import DEFAULT_DATA_DIR, Task, load_task
from npmcore.indexer import IndexConfig
from npmcore.indexer import build_index as build_index_snapshot
from npmcore.inference import NPM, InferenceConfig
from npmcore.storage import read_manifest
from npmcore.tracking import tracking
from tasks import inputs_and_version

System = Literal["npm", "npm-no-bm25", "npm-single"]
QUICK_SUITE = ["sst2", "mr", "cr", "rt", "subj", "agn", "rte", "trex", "google_re", "nq", "triviaqa"]


class EvalParams(BaseModel):
    tasks: list[str] = Field(["mr"], description="Task names (sst2, mr, cr, rt, subj, agn, rte, trex, google_re, nq, triviaqa, cloze).")
    store: StoreURL = Field(default_factory=default_store, description="Store root URL (env NPM_STORE).")
    index: str | None = Field(None, description="Evaluate against this index; empty = build each task's reference corpus and index.")
    corpus: str | None = Field(None, description="Evaluate against this corpus snapshot, indexed with `model`, instead of the task's reference corpus.")
    model: str | None = Field(None, description="Encoder of the indexes built here (path, cached name or models:/…); empty = the default encoder.")
    data: str | None = Field(None, description="The jsonl file of the cloze task (other tasks load their own data).")
    wiki_files: list[int] = Field(
        [1], description="enwiki_sample files added to the open-set reference corpora; several values sweep the "
        "reference-corpus size (one index each) and plot the score against corpus tokens (the paper's Figure 7).",
    )
    limit: int | None = Field(3000, ge=1, description="Seeded sample of at most this many examples per task.")
    split: Literal["test", "dev"] = Field(
        "test", description="test, or dev: the tuning data of sst2 (its dev file), trex and google_re (a fixed fifth of "
        "the facts); the cloze task's split is its data file.",
    )
    seed: int = 0
    systems: list[System] = Field(
        ["npm"], description="npm (open-set: BM25-restricted, exact), npm-no-bm25 (kNN over the index), npm-single. "
        "Closed-set tasks never use BM25: npm-no-bm25 is npm there and is skipped.",
    )
    exact: bool = Field(False, description="Also run the kNN systems against a Flat (exact) index of the same datastore.")
    k: int = Field(4096, ge=1)
    calibrate: bool = Field(True, description="Closed-set label scores relative to the task's domain premise (\"It was [MASK].\"), as kNN-Prompt; false: raw scores.")
    content_words: bool = Field(True, description="Open-set answers start and end with a content word (no stopword or punctuation), as in the paper; false: any whole-word span.")
    taus: list[float] | None = Field(None, description="Temperatures to sweep; empty = 5 for closed-set tasks, 1 for open-set.")
    experiment: str = Field("npm-eval", description="MLflow experiment.")
    cluster: ClusterParams = Field(default_factory=ClusterParams)

    @field_validator("wiki_files")
    @classmethod
    def _wiki_files(cls, value: list[int]) -> list[int]:
        if not value or not all(0 <= n <= 64 for n in value):
            raise ValueError(f"wiki_files needs one or more counts between 0 and 64 (enwiki_sample has 64 files), got {value}")
        return sorted(set(value))


@dataclass(frozen=True)
class Row:
    task: str
    system: str
    tau: float
    factory: str  # the FAISS index searched (kNN systems) or holding the corpus (BM25-restricted ones)
    corpus_tokens: int  # size of the reference corpus
    n: int
    metric: str
    score: float
    notes: dict[str, int]


@task(name="load-task")
def load_task_task(name: str, params: EvalParams) -> Task:
    return load_task(name, limit=params.limit, seed=params.seed, path=params.data if name == "cloze" else None, split=params.split)


def searches_vectors(evaluated: Task, params: EvalParams) -> bool:
    """Whether the task's runs search an index's vectors (kNN: closed-set, npm-no-bm25, exact);
    BM25-restricted open-set runs only encode their passages again, with any encoder."""
    return evaluated.kind == "closed" or params.exact or "npm-no-bm25" in params.systems


def task_indexes(evaluated: Task, params: EvalParams) -> list[str]:
    """The indexes a task is evaluated against: the given index, the given corpus indexed, or
    the task's reference corpus (one per ``wiki_files`` count for open-set tasks); with
    ``exact``, a Flat index of the first one's datastore follows. Runs that search no
    vectors share one index of a corpus, made with the default encoder, whatever the model."""
    if params.index:
        indexes = [params.index]
    elif params.corpus:
        indexes = [index_corpus(params.corpus, params, evaluated)]
    elif evaluated.name == "cloze":  # facts of the user's own: by default about the embedded default corpus
        indexes = [index_corpus(ingest_corpus(IngestParams(store=params.store, pages_per_partition=25, cluster=params.cluster)), params, evaluated)]
    else:
        sizes = params.wiki_files if evaluated.kind == "open" else [0]
        indexes = [reference_index(evaluated, params, n) for n in sizes]
    if params.exact:
        datastore = read_manifest(indexes[0]).inputs[0]["datastore"]
        indexes.append(build_index_snapshot(datastore, IndexConfig(factory="Flat", bm25=False)))
    return indexes


def reference_index(evaluated: Task, params: EvalParams, wiki_files: int) -> str:
    """Ingest and index the task's reference corpus (its evaluated examples left out, plus
    ``wiki_files`` enwiki_sample files) with the ingest_corpus and build_index flows; returns
    the index URL (reused when the corpus is unchanged)."""
    with tempfile.TemporaryDirectory() as tmp:
        inputs = [write_reference_corpus(evaluated, DEFAULT_DATA_DIR, Path(tmp) / f"{evaluated.name}.jsonl")]
        inputs += [str(DEFAULT_DATA_DIR / "enwiki_sample" / f"wiki_{i:02d}") for i in range(wiki_files)]
        inputs = [i for i in inputs if Path(i).stat().st_size > 0]
        # small partitions: the corpus shards are embedded in parallel, one per worker at a time
        corpus = ingest_corpus(IngestParams(inputs=inputs, store=params.store, partition_mb=0.25, cluster=params.cluster))
    return index_corpus(corpus, params, evaluated)


def index_corpus(corpus: str, params: EvalParams, evaluated: Task) -> str:
    model = params.model if searches_vectors(evaluated, params) else None
    # reference corpora are small (about 0.2M tokens): 20k vectors train a PQ well enough, in a quarter of the time
    index_params = IndexParams(store=params.store, corpus=corpus, model=model, train_size=20_000, cluster=params.cluster)
    return build_index.with_options(task_runner=dask_runner(params.cluster))(index_params)


@task(name="evaluate-task", cache_key_fn=inputs_and_version, persist_result=True)
def evaluate_task(evaluated: Task, index: str, system: System, tau: float, params: EvalParams) -> Result:
    """Run the task against the index and log the run (lineage params, score, predictions, plot)
    to MLflow; the same inputs (index snapshots are immutable) give the cached result."""
    config = InferenceConfig(k=params.k, tau=tau, restrict=system != "npm-no-bm25", content_words=params.content_words)
    npm = NPM(index, encoder=resolve_encoder(params.model, params.store) if params.model else None)
    result = run_evaluation(evaluated, npm, "npm-single" if system == "npm-single" else "npm", config, calibrate=params.calibrate)
    manifest = read_manifest(index)
    with tracking(tracking_uri(params.store), params.experiment), mlflow.start_run(run_name=f"{evaluated.name}/{system}/tau={tau:g}", nested=True):
        mlflow.log_params({
            "task": evaluated.name, "system": system, "model": params.model or manifest.config["encoder"],
            "index": index, "index_id": manifest.id, "factory": manifest.config["factory"],
            "corpus_id": manifest.inputs[0]["corpus_id"], "datastore_id": manifest.inputs[0]["datastore_id"],
            "encoder": manifest.config["encoder"] if params.model is None else params.model, "encoder_fingerprint": npm.fingerprint,
            "index_encoder_fingerprint": manifest.config["encoder_fingerprint"],
            "corpus_tokens": manifest.counts["tokens"], "k": config.k, "tau": tau, "restrict": config.restrict,
            "calibrate": params.calibrate and evaluated.domain is not None, "content_words": config.content_words,
            "limit": params.limit, "seed": params.seed, "split": evaluated.split,
        })
        mlflow.log_metrics({result.metric: result.score, "n": result.n, **result.notes})
        mlflow.log_text("".join(json.dumps(r.__dict__) + "\n" for r in result.records), "predictions.jsonl")
        if evaluated.macro_key == "answer_length":
            by_length = accuracy_by_length(result, answer_lengths(evaluated, npm))
            mlflow.log_metrics({f"exact_match_len_{b}": v for b, v in by_length.items()})
            figure = _length_plot(evaluated.name, system, by_length)
            mlflow.log_figure(figure, "accuracy_by_answer_length.png")
            figure.clear()
    return result


def _length_plot(task: str, system: str, by_length: dict[str, float]):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(4, 3))
    axes.bar(list(by_length), list(by_length.values()))
    axes.set(xlabel="answer length (tokens)", ylabel="exact match", ylim=(0, 1), title=f"{task}: {system}")
    figure.tight_layout()
    return figure


def runs_of(evaluated: Task, params: EvalParams) -> list[tuple[System, float]]:
    """(system, temperature) pairs to run for a task."""
    systems = [s for s in params.systems if not (evaluated.kind == "closed" and s == "npm-no-bm25")]
    taus = params.taus or [5.0 if evaluated.kind == "closed" else 1.0]
    return [(system, tau) for system in dict.fromkeys(systems) for tau in taus]


@flow(name="evaluate")
def evaluate(params: EvalParams | None = None) -> list["Row"]:
    """Evaluate every task of ``params`` with every system and temperature (building reference
    indexes unless an index is given); returns one row per MLflow run."""
    params = params or EvalParams()
    tracking_uri(params.store)  # an unreachable MLflow server fails now, not after the reference indexes are built
    results = []
    for name in params.tasks:
        evaluated = load_task_task(name, params)
        indexes = task_indexes(evaluated, params)
        exact = indexes[-1] if params.exact else None
        rows = []
        for index in indexes:
            manifest = read_manifest(index)
            for system, tau in runs_of(evaluated, params):
                if index == exact and evaluated.kind == "open" and system != "npm-no-bm25":
                    continue  # BM25-restricted systems score exactly already: no FAISS search involved
                result = evaluate_task(evaluated, index, system, tau, params)
                rows.append(Row(result.task, system, tau, manifest.config["factory"], manifest.counts["tokens"], result.n, result.metric, result.score, result.notes))
        if len({r.corpus_tokens for r in rows}) > 1:
            log_size_curve(evaluated.name, [r for r in rows if r.factory != "Flat"], params)
        results += rows
    return results


def log_size_curve(task: str, rows: list["Row"], params: EvalParams) -> None:
    """One MLflow run with the score against reference-corpus size (tokens) of each system
    and temperature, as metrics (step = corpus tokens) and a plot (the paper's Figure 7)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(5, 3.5))
    with tracking(tracking_uri(params.store), params.experiment), mlflow.start_run(run_name=f"{task}/corpus-size", nested=True):
        mlflow.log_params({"task": task, "model": params.model or "default", "wiki_files": params.wiki_files, "limit": params.limit, "seed": params.seed})
        for system, tau in dict.fromkeys((r.system, r.tau) for r in rows):
            curve = sorted((r.corpus_tokens, r.score) for r in rows if (r.system, r.tau) == (system, tau))
            for tokens, score in curve:
                mlflow.log_metric(f"{rows[0].metric}.{system}.tau{tau:g}", score, step=tokens)
            axes.plot(*zip(*curve, strict=True), marker="o", label=f"{system} τ={tau:g}")
        axes.set(xscale="log", xlabel="reference corpus (tokens)", ylabel=rows[0].metric, ylim=(0, 1), title=task)
        axes.legend()
        figure.tight_layout()
        mlflow.log_figure(figure, "score_by_corpus_size.png")
    plt.close(figure)
