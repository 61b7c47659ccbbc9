"""Fit the weights of evidence scoring on the dev sets, and say how well they rank.

Usage: python bench/ranker.py [--model PATH_OR_URI] [--store DIR] [--lama-limit 300] [--out DIR]
                              [--l2 0.001] [--folds 5] [--dated-indexes INDEX_2015 INDEX_2020 [INDEX_COMBINED]]

Builds, or reuses from the store, the indexes the ``evaluate`` flow searches for the cloze task
(the embedded default corpus) and for LAMA T-REx and Google-RE (their reference corpora), and
answers every dev fact as the flow does (BM25-restricted NPM with its defaults), keeping all
candidates with their evidence features (``NPM.candidates``). The dev facts: the verbatim dev set,
the paraphrase set, the cloze dev split, and a seeded ``--lama-limit`` of the LAMA dev facts (one
fifth of the facts by uuid hash; never test facts), and with ``--dated-indexes`` (the indexes of the
May 2015 and September 2020 dumps that ``bench/paper_table.py`` builds) the dev splits of the tasks
measured on them, asked as the paper table asks them (:data:`DATED`): T-REx, Google-RE and KAMEL
on the 2020 index (``trex_2020``, ``google_re_2020``, ``kamel``: 10 passages, query words allowed), NQ and
TriviaQA on it (10 passages), the temporal facts on it and entity translation on the 2015 index (3
passages), and, given the index of the 2020 dump and Simple English Wikipedia, the five knowledge tasks on it
as the paper table asks them there (``trex_combined`` …: ``COMBINED_PASSAGES``), ``--lama-limit`` facts each,
seeded; each set weighing the same in the fit. A
candidate is right when its decoded text equals a gold answer, accents and punctuation aside
(``npmcore.evaluation.diagnostics.answer_key``).

:func:`npmcore.answer.ranking.fit_ranker` fits the weights on all of them; ``--folds``-fold cross-validation
over the same facts (seeded folds) says how well weights fitted without a fact rank it. Writes
``ranker.json`` into ``--out`` (default: the encoder's own folder, the shipped encoder's when no
``--model`` is given) and logs one MLflow run (experiment npm-ranker in the store): the weights as
params and ``ranker.json``, top-1 accuracy per set under NPM's scoring, the fitted weights and
cross-validation as metrics. Last line: one JSON object {set: {"n", "npm", "current", "fitted", "cv"}}
(top-1 shares: the right answer ranked first; ``current``: under the weights in use before the fit).
"""

import argparse
import json
import tempfile
from pathlib import Path

from npmcore.runtime import configure_environment

configure_environment()

import mlflow  # noqa: E402
import numpy as np  # noqa: E402
from paper_table import COMBINED_PASSAGES, KNOWLEDGE_PASSAGES, NAMES_PASSAGES, QUERY_WORDS_ALLOWED  # noqa: E402

from flows.evaluate import EvalParams, runs_of, task_indexes  # noqa: E402
from flows.params import ClusterParams  # noqa: E402
from flows.prefect_api import prefect_api  # noqa: E402
from npmcore.answer.inference import NPM, InferenceConfig  # noqa: E402
from npmcore.answer.ranking import (  # noqa: E402
    RANKER_FILE,
    Labelled,
    Ranker,
    fit_ranker,
    ranker_of,  # noqa: E402
)
from npmcore.cluster import dask_cluster  # noqa: E402
from npmcore.encoder import default_encoder_path, local_model_dir  # noqa: E402
from npmcore.evaluation.diagnostics import right_answers  # noqa: E402
from npmcore.evaluation.tasks import Task, load_task  # noqa: E402
from npmcore.tracking import resolve_encoder, tracking  # noqa: E402
from npmcore.tracking_store import tracking_uri  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench" / "data"
CLOZE_SETS = {"verbatim": "verbatim-dev.jsonl", "paraphrase": "paraphrase-dev.jsonl", "cloze": "cloze-dev.jsonl"}
BATCH = 32


# the dated dumps' dev sets, as bench/paper_table.py asks them: set -> (task, which dated index, passages,
# query words allowed); the planted trex and google_re sets search their reference corpora instead
DATED = {
    "trex_2020": ("trex", 1, KNOWLEDGE_PASSAGES, True),
    "google_re_2020": ("google_re", 1, KNOWLEDGE_PASSAGES, True),
    "kamel": ("kamel", 1, KNOWLEDGE_PASSAGES, True),
    "nq": ("nq", 1, KNOWLEDGE_PASSAGES, False),
    "triviaqa": ("triviaqa", 1, KNOWLEDGE_PASSAGES, False),
    "temporal": ("temporal", 1, NAMES_PASSAGES, False),
    "entity_translation": ("entity_translation", 0, NAMES_PASSAGES, False),
} | {
    f"{task}_combined": (task, 2, passages, task in QUERY_WORDS_ALLOWED) for task, passages in COMBINED_PASSAGES.items()
}


def dev_tasks(lama_limit: int, dated: int) -> dict[str, Task]:
    """The dev sets: the cloze and planted LAMA ones, and those of the first ``dated`` dated indexes."""
    tasks = {name: load_task("cloze", limit=None, path=str(DATA / file)) for name, file in CLOZE_SETS.items()}
    for name in ("trex", "google_re"):
        tasks[name] = load_task(name, limit=lama_limit, seed=0, split="dev")
    for name, (task, index, *_) in DATED.items():
        if index < dated:
            tasks[name] = load_task(task, limit=lama_limit, seed=0, split="dev")
    return tasks


def labelled(npm: NPM, task: Task, config: InferenceConfig, weight: float) -> list[Labelled]:
    """Every fact's candidates, with the phrases equal to a gold answer marked right, each fact
    weighing ``weight`` in the fit (1 / the set's size: every dev set counts the same)."""
    out = []
    for lo in range(0, len(task.examples), BATCH):
        examples = task.examples[lo : lo + BATCH]
        for ex, candidates in zip(examples, npm.candidates([e.query for e in examples], config), strict=True):
            texts = (npm.tokenizer.decode(ids[ids >= 0].tolist()) for ids in candidates.phrases.token_ids)
            out.append(Labelled(candidates, right_answers(texts, ex.answers), weight))
    return out


def top1(examples: list[Labelled], ranker: Ranker | None) -> float:
    """Share of facts whose first candidate is right (NPM's order when ``ranker`` is None)."""
    return float(np.mean([e.right_first(ranker) for e in examples]))


def cross_validated(sets: dict[str, list[Labelled]], folds: int, l2: float) -> dict[str, float]:
    """Top-1 share per set of weights fitted on the other folds (folds seeded over all facts)."""
    pooled = [(name, e) for name, examples in sets.items() for e in examples]
    fold = np.random.default_rng(0).integers(0, folds, len(pooled))
    hits: dict[str, list[float]] = {name: [] for name in sets}
    for f in range(folds):
        ranker = fit_ranker([e for (_, e), k in zip(pooled, fold, strict=True) if k != f], l2=l2)
        for (name, e), k in zip(pooled, fold, strict=True):
            if k == f:
                hits[name].append(top1([e], ranker))
    return {name: float(np.mean(h)) for name, h in hits.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None, help="encoder (path, cached name or models:/…); default: shipped")
    parser.add_argument("--store", default=None, help="store of the corpora, indexes and MLflow runs (default: temp)")
    parser.add_argument("--lama-limit", type=int, default=300, help="LAMA dev facts per task (seeded sample)")
    parser.add_argument("--out", type=Path, default=None, help="folder for ranker.json (default: the encoder's)")
    parser.add_argument("--l2", type=float, default=1e-3)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument(
        "--dated-indexes", nargs="+", default=[], metavar="INDEX",
        help="the indexes bench/paper_table.py builds: of 2015 and 2020 (adds their tasks' dev sets) and of 2020 and "
        "Simple English Wikipedia (adds the knowledge tasks' dev sets on both)",
    )  # fmt: skip
    args = parser.parse_args()
    if len(args.dated_indexes) not in (0, 2, 3):
        raise SystemExit("--dated-indexes takes the 2015 and 2020 indexes, and the combined one")
    if args.out is None and args.model is not None and not Path(args.model).is_dir():
        raise SystemExit(f"--model {args.model} is not a folder to write {RANKER_FILE} into: give --out")
    out = args.out or Path(local_model_dir(args.model or str(default_encoder_path())))
    tasks = dev_tasks(args.lama_limit, len(args.dated_indexes))
    with tempfile.TemporaryDirectory() as tmp, prefect_api():
        store = args.store or tmp
        params = EvalParams(tasks=list(tasks), store=store, model=args.model)
        encoder = resolve_encoder(args.model, store)
        sets: dict[str, list[Labelled]] = {}
        indexes = {}
        with dask_cluster(None, None) as address:
            cluster = params.model_copy(update={"cluster": ClusterParams(dask_address=address)})
            for name, task in tasks.items():
                dated = args.dated_indexes[DATED[name][1]] if name in DATED else None
                indexes[name] = dated or task_indexes(task, cluster)[0]
        npms: dict[str, NPM] = {}
        for name, task in tasks.items():
            _, _, passages, query_words = DATED.get(name, (None, None, params.passages, False))
            asked = params.model_copy(update={"passages": passages, "exclude_query_words": not query_words})
            ((_, tau),) = runs_of(task, asked)
            npm = npms.setdefault(indexes[name], NPM(indexes[name], encoder=encoder))
            sets[name] = labelled(npm, task, asked.inference(tau, task.name), 1 / len(task.examples))
            print(f"{name}: {len(sets[name])} facts, right answer among the candidates for "
                  f"{np.mean([e.gold.any() for e in sets[name]]):.3f}", flush=True)  # fmt: skip
        pooled = [e for examples in sets.values() for e in examples]
        provenance = {
            "encoder": args.model or "default",
            "sets": {name: len(examples) for name, examples in sets.items()},
            "lama_limit": args.lama_limit,
            "fitted_by": "bench/ranker.py",
        }
        ranker = fit_ranker(pooled, l2=args.l2, provenance=provenance)
        cv = cross_validated(sets, args.folds, args.l2)
        current = ranker_of(encoder or str(default_encoder_path()))  # the weights in use before this fit
        report = {
            name: {
                "n": len(examples),
                "npm": round(top1(examples, None), 4),
                "current": round(top1(examples, current), 4),
                "fitted": round(top1(examples, ranker), 4),
                "cv": round(cv[name], 4),
            }
            for name, examples in sets.items()
        }
        out.mkdir(parents=True, exist_ok=True)
        path = out / RANKER_FILE
        tmp_path = path.with_suffix(".json.tmp")
        tmp_path.write_text(ranker.to_json() + "\n", encoding="utf-8")
        tmp_path.replace(path)
        weights = json.loads(ranker.to_json())
        with tracking(tracking_uri(store), "npm-ranker"), mlflow.start_run(run_name="ranker/fit"):
            mlflow.log_params({f"ranker.{k}": v for k, v in {**weights["phrase"], **weights["position"]}.items()})
            run = {"model": args.model or "default", "l2": args.l2, "folds": args.folds, "lama_limit": args.lama_limit}
            mlflow.log_params({**run, **{f"index.{name}": url for name, url in indexes.items()}})
            mlflow.log_metrics({f"{metric}.{name}": v for name, row in report.items() for metric, v in row.items()})
            mlflow.log_dict(weights, RANKER_FILE)
    for name, row in report.items():
        print(f"{name:<11} n={row['n']:<4} top-1: NPM {row['npm']:.3f}, current {row['current']:.3f}, "
              f"fitted {row['fitted']:.3f}, cross-validated {row['cv']:.3f}")  # fmt: skip
    print(f"wrote {path}")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
