"""Evaluation tasks: load a task's examples; run it against an index and log the run to MLflow."""

import json
from dataclasses import dataclass, fields, replace

import mlflow
from prefect import task

from npmcore.answer.inference import NPM, InferenceConfig
from npmcore.answer.knnlm import KNN_BACKOFF, MaskedLMHead, MaskedSystem, searchers
from npmcore.answer.ranking import Ranker
from npmcore.ask.asking import Form
from npmcore.evaluation.masked import MaskedRow, MaskedStudy, best, run_masked, sweep_plots
from npmcore.evaluation.run import Result, System, accuracy_by_length, answer_lengths, run_task
from npmcore.evaluation.selective import reliability, risk_coverage
from npmcore.evaluation.tasks import Split, Task, load_task
from npmcore.index.precision import Setting
from npmcore.plots import bar_plot, line_plot
from npmcore.snapshots import open_index
from npmcore.tracking import log_snapshot_input, tracking
from tasks import HOUR, inputs_and_version, link_runs


@dataclass(frozen=True)
class RunSettings:
    """What every evaluation run of a flow shares."""

    model: str | None  # the encoder as the user named it; None: each index's own
    model_version: str | None  # ``model`` with a registry alias resolved to its version (models:/npm-encoder/3)
    encoder: str | None  # ``model`` as a loadable location (registry URIs exported)
    calibrate: bool  # closed-set scores relative to the task's domain premise
    limit: int | None  # the examples' sample size and seed, logged with each run
    seed: int
    tracking_uri: str
    experiment: str
    precision: Setting  # of the query encoder (and of the passages it encodes again)
    label: str = ""  # names the runs: "{label}/{task}/…" (EvalParams.label)

    def run_name(self, name: str) -> str:
        """An MLflow run's name: ``name`` under the label, when there is one."""
        return f"{self.label}/{name}" if self.label else name


@dataclass(frozen=True)
class MaskedSweep:
    """What a kNN-LM study sweeps (:func:`npmcore.evaluation.masked.run_masked`)."""

    systems: tuple[MaskedSystem, ...]
    lams: tuple[float, ...]  # knn-lm weights of p_kNN, each in (0, 1)
    taus: tuple[float, ...]
    fractions: tuple[float, ...]  # shares of the datastore's blocks searched
    exact: bool  # also search a Flat index of the same vectors
    k: int


@task(name="load-task", timeout_seconds=HOUR)
def load_task_examples(
    name: str, limit: int | None, seed: int, data: str | None, split: Split, form: Form | None = None
) -> Task:
    """The task's (sampled) examples; ``data`` is the cloze task's file, ``form`` how its questions are asked."""
    return load_task(name, limit=limit, seed=seed, path=data if name == "cloze" else None, split=split, form=form)


@task(name="evaluate-run", cache_key_fn=inputs_and_version, persist_result=True, timeout_seconds=6 * HOUR)
def evaluate_run_task(
    evaluated: Task,
    index: str,
    system: System,
    config: InferenceConfig,
    settings: RunSettings,
    ranker: str,
    calibrators: str,
) -> Result:
    """Run the task against the index inside one MLflow run (its duration is the evaluation's):
    lineage params, the index and corpus as dataset inputs, score, predictions and, for LAMA,
    the accuracy by answer length. ``ranker``: the weights of evidence scoring (JSON of
    :class:`~npmcore.answer.ranking.Ranker`), logged with open-set runs that use them; ``calibrators``: the confidence
    calibrators the encoder may use (:func:`npmcore.answer.confidence.calibrator_of`), an input so that a refitted one
    is never answered from the cache. With a confidence per prediction, the run logs its calibration
    (``calibration.ece``, ``calibration.aurc``, ``calibration.accuracy_at_<coverage>``), the reliability diagram
    and the risk-coverage curve. The same inputs (index snapshots are immutable) give the cached result."""
    snapshot = open_index(index)
    run_name = settings.run_name(f"{evaluated.name}/{system}/tau={config.tau:g}")
    with tracking(settings.tracking_uri, settings.experiment), mlflow.start_run(run_name=run_name, nested=True):
        link_runs(settings.tracking_uri)
        log_snapshot_input("index", index, "evaluation")
        log_snapshot_input("corpus", snapshot.corpus, "evaluation")
        npm = NPM(index, encoder=settings.encoder, ranker=Ranker.from_json(ranker), precision=settings.precision)
        result = run_task(evaluated, npm, system, config, calibrate=settings.calibrate)
        mlflow.log_params({
            "model": settings.model or snapshot.manifest.config["encoder"], "model_version": settings.model_version,
            "limit": settings.limit, "seed": settings.seed, "task": evaluated.name, "split": evaluated.split,
            "system": system, "index": index, "index_id": snapshot.manifest.id,
            "factory": snapshot.manifest.config["factory"],
            "corpus_id": snapshot.corpus_id, "datastore_id": snapshot.datastore_id,
            "encoder_fingerprint": npm.fingerprint, "index_encoder_fingerprint": snapshot.encoder_fingerprint,
            "precision": npm.precision, "index_precision": snapshot.precision,
            "corpus_tokens": snapshot.manifest.counts["tokens"], "k": config.k, "tau": config.tau,
            "passages": config.passages, "l_max": config.l_max,
            "restrict": system != "npm-no-bm25", "calibrate": settings.calibrate and evaluated.domain is not None,
            "content_words": config.content_words, "exclude_query_words": config.exclude_query_words,
            "scoring": config.scoring, **({"label": settings.label} if settings.label else {}),
            **({"ask": evaluated.form} if evaluated.form else {}),
        })  # fmt: skip
        if evaluated.kind == "open" and system != "npm-single" and config.scoring == "evidence":
            ranker = json.loads(npm.ranker.to_json())
            mlflow.log_params({f"ranker.{k}": v for k, v in {**ranker["phrase"], **ranker["position"]}.items()})
            mlflow.log_dict(ranker, "ranker.json")
        copies = {} if result.query_copy_rate is None else {"query_copy_rate": result.query_copy_rate}
        mlflow.log_metrics({result.metric: result.score, "n": result.n, **result.notes, **copies, **result.breakdown})
        mlflow.log_text("".join(json.dumps(r.__dict__) + "\n" for r in result.records), "predictions.jsonl")
        if result.calibration is not None:
            log_calibration(result, f"{evaluated.name}: {system}")
        if evaluated.macro_key == "answer_length":
            by_length = accuracy_by_length(result, answer_lengths(evaluated, npm))
            mlflow.log_metrics({f"exact_match_len_{b}": v for b, v in by_length.items()})
            figure = bar_plot(by_length, "answer length (tokens)", "exact match", f"{evaluated.name}: {system}")
            mlflow.log_figure(figure, "accuracy_by_answer_length.png")
    return result


def log_calibration(result: Result, title: str) -> None:
    """A run's calibration as metrics, its reliability diagram and its risk-coverage curve as figures."""
    report = result.calibration
    mlflow.log_metrics({"calibration.ece": report["ece"], "calibration.aurc": report["aurc"]})
    mlflow.log_metrics({f"calibration.accuracy_at_{c}": v for c, v in report["accuracy_at_coverage"].items()})
    if result.shown is not None:
        mlflow.log_metrics({f"shown.{k}": v for k, v in result.shown.items() if v is not None})
    confidence = [r.confidence for r in result.records]
    correct = [r.correct for r in result.records]
    points = reliability(confidence, correct)
    diagram = line_plot(
        {"answers": [(c, a) for c, a, _ in points], "calibrated": [(0.0, 0.0), (1.0, 1.0)]},
        "confidence (10 bins, their mean)", "accuracy", f"{title}: ECE {report['ece']:.3f}",
    )  # fmt: skip
    mlflow.log_figure(diagram, "reliability.png")
    coverage, risk = risk_coverage(confidence, correct)
    step = max(1, len(coverage) // 200)
    curve = line_plot(
        {"NPM": list(zip(coverage[::step].tolist(), risk[::step].tolist(), strict=True))},
        "coverage (most confident first)", "risk (share wrong)", f"{title}: AURC {report['aurc']:.3f}",
    )  # fmt: skip
    mlflow.log_figure(curve, "risk_coverage.png")


@task(name="masked-study", cache_key_fn=inputs_and_version, persist_result=True, timeout_seconds=6 * HOUR)
def masked_study_task(evaluated: Task, index: str, sweep: MaskedSweep, settings: RunSettings) -> MaskedStudy:
    """The kNN-LM study of a task against an index inside one MLflow run: every row as the
    table ``sweep.json``, the best row of each system as metrics (``perplexity.knn-lm``, …),
    and plots of the metric against λ, τ and the datastore fraction."""
    snapshot = open_index(index)
    with (
        tracking(settings.tracking_uri, settings.experiment),
        mlflow.start_run(run_name=settings.run_name(f"{evaluated.name}/{'+'.join(sweep.systems)}"), nested=True),
    ):
        link_runs(settings.tracking_uri)
        log_snapshot_input("index", index, "evaluation")
        log_snapshot_input("corpus", snapshot.corpus, "evaluation")
        npm = NPM(index, encoder=settings.encoder, precision=settings.precision)
        head = MaskedLMHead(npm.encoder_source, npm.fingerprint)
        needs_search = any(s != "mlm" for s in sweep.systems)
        found = (
            searchers(npm.retrieval.index, snapshot.datastore, npm.corpus.offsets, sweep.fractions, sweep.exact)
            if needs_search
            else []
        )
        lams = sweep.lams if "knn-lm" in sweep.systems else ()  # no mixtures nobody asked for
        study = run_masked(evaluated, npm, head, found, lams, sweep.taus, sweep.k, settings.calibrate)
        study = replace(study, rows=tuple(r for r in study.rows if r.system in sweep.systems))
        mlflow.log_params({
            "model": settings.model or snapshot.manifest.config["encoder"], "model_version": settings.model_version,
            "limit": settings.limit, "seed": settings.seed, "task": evaluated.name, "split": evaluated.split,
            "system": ",".join(sweep.systems), "index": index, "index_id": snapshot.manifest.id,
            "factory": snapshot.manifest.config["factory"], "corpus_id": snapshot.corpus_id,
            "encoder_fingerprint": npm.fingerprint, "precision": npm.precision,
            "index_precision": snapshot.precision, "corpus_tokens": snapshot.manifest.counts["tokens"],
            "k": sweep.k, "lambdas": sweep.lams, "taus": sweep.taus, "fractions": sweep.fractions,
            "exact": sweep.exact, "calibrate": settings.calibrate and evaluated.domain is not None,
            "knn_backoff": KNN_BACKOFF,
        })  # fmt: skip
        mlflow.log_metrics({"n": study.rows[0].n, **study.notes})
        for system in sweep.systems:
            top = best(list(study.rows), system)
            mlflow.log_metric(f"accuracy.{system}", top.accuracy)
            if top.perplexity is not None:
                mlflow.log_metric(f"perplexity.{system}", top.perplexity)
            if system != "mlm":
                mlflow.log_metrics({f"tau.{system}": top.tau, f"lambda.{system}": top.lam})
        mlflow.log_table({f.name: [getattr(r, f.name) for r in study.rows] for f in fields(MaskedRow)}, "sweep.json")
        for name, figure in sweep_plots(list(study.rows), evaluated.name).items():
            mlflow.log_figure(figure, name)
    return study
