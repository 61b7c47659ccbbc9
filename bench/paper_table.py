"""NPM measured as the paper measures it: its seven open-set tasks against a real Wikipedia.

Usage: python bench/paper_table.py [--store DIR] [--split test|dev] [--limit 1000] [--passages 10]
                                   [--baseline-limit 1000] [--no-baselines] [--no-adapted] [--model ENCODER]
                                   [--dumps DIR] [--simplewiki DIR]

Through the users' path, on the two dated dumps of the same 15k articles (``shared/data/enwiki_dated``,
unpacked once into the cache, or ``--dumps DIR`` holding ``2015-05/`` and ``2020-09/``) and Simple English
Wikipedia of December 2021 (``shared/data/simplewiki``, or ``--simplewiki DIR``):

1. the May 2015 dump is ingested and indexed as BM25 alone (``npmcore ingest``, ``npmcore index --bm25-only``);
2. the September 2020 dump is backfilled into the same store (``npmcore backfill --previous`` the 2015 index:
   its index is BM25 alone too);
3. Simple English Wikipedia is backfilled beside it (``npmcore backfill --previous`` the 2020 index: a source of
   another wiki, added; the 2020 pages are kept as they are): the **combined** datastore, BM25 over both (the
   2020 index's Lucene index extended by Simple English's blocks);
4. one MLflow parent run (experiment ``npm-paper-table``) holds every evaluation as a nested run named
   ``{datastore}/{task}/{system}/tau=1``: against 2015, the temporal facts and entity translation; against
   2020, the temporal facts again, then each of T-REx, Google-RE, KAMEL, NQ and TriviaQA against 2020 and at once
   against the combined datastore (the passages the two share are encoded once: :mod:`npmcore.answer.passage_vectors`);
   the parent's metrics are the table (every number of the JSON line below, flattened: ``combined.trex``,
   ``ceilings.trex``, ``calibration.trex.ece``, …), its params the encoder, the split and the datastores;
5. the **statements** row: KAMEL, NQ and TriviaQA against the combined datastore asked as the query service asks a
   question (``npmcore eval --ask statements``: KAMEL's relations stated, NQ's and TriviaQA's questions as the
   statements they stand for, each with the paper's question beside it, the answers of the most confident and of the
   kind the question asks for; :mod:`npmcore.ask.asking`), query words excluded and :data:`STATEMENTS_PASSAGES`
   passages, both chosen on their dev facts (300 a task; statements and paper form, answers of the kind asked, with
   the calibrator fitted before): NQ 0.053, 0.063, 0.063 with 3, 5 and 10 passages; TriviaQA 0.143, 0.153, 0.143;
   KAMEL 0.017, 0.020 with 3 and 5 (0.017 with 20, and 0.007 with 20 and query words allowed). One nested MLflow run
   (``statements``) holds the row; the paper's rows above stay as the paper asks them;
6. the **adapted** row (``--no-adapted`` leaves it out): a query encoder (``npmcore train --side query``) trained
   against the 2020 index on a query log, the KAMEL dev facts of half of KAMEL's relations
   (:mod:`npmcore.evaluation.adapted`: :data:`ADAPTED_QUERIES` of them sampled, :data:`ADAPTED_STEPS` steps),
   measured on the split's facts of the *other* half (as a cloze task: ``kamel_heldout``, and the answering
   encoder's own score on them, ``kamel_heldout_zero_shot``) and, on the test split, TriviaQA and NQ: tasks it
   never saw. Every other row is zero-shot: no task's facts are trained on.

Every evaluation is the ``evaluate`` flow (each task an MLflow run in the store's tracking database): system
``npm`` (the top BM25 passages encoded per query, evidence scoring: ``--passages`` of them for the five
knowledge tasks, :data:`NAMES_PASSAGES` for the temporal facts and entity translation), each task's ceiling (the
share of examples whose gold answer is written in the passages searched), and the baselines ``mlm-head`` and
``mlm-read`` on at most ``--baseline-limit`` examples. T-REx, Google-RE and KAMEL allow answers that repeat a
word of the query (``--allow-query-words``; "Toyota Allion is produced by [MASK]." is answered "Toyota"),
chosen on their dev facts against the 2020 dump: right for 49 of 900 dev facts with them allowed, 26 with the
default exclusion. NQ and TriviaQA (no dev data), the temporal facts and entity translation keep the default.
The passages were chosen on the same dev facts (300 a task, the shipped encoder): T-REx 0.150 with 3 passages,
0.180 with 10, 0.167 with 20; KAMEL 0.007, 0.013, 0.010; Google-RE 0.007 with 3 and 10; entity translation
(170 facts, 2015 dump) 0.341 with 3, 0.294 with 10: its answers are names in an article's opening sentence,
which the top passages hold, and more passages only add rival names. On the combined datastore the knowledge
tasks read :data:`COMBINED_PASSAGES`, chosen on their dev facts there (300 a task): T-REx 0.183 with 10 passages,
0.207 with 20, 0.200 with 30; Google-RE 0.033, 0.037; KAMEL 0.010, 0.013; NQ 0.047, 0.043; TriviaQA 0.110, 0.097
(with 10 and 20): the cloze-style tasks read 20, the questions 10. Two sources compete for the same top
passages, so the sentence-like queries need more of them to keep the 2020 dump's. Query words stay allowed for
the same three tasks: excluding them there gave T-REx 0.095 against 0.163 (1,000 dev facts, 20 passages).
``--split dev`` evaluates the dev data. ``--model`` answers with another encoder
than the shipped one (a query encoder with the passage encoder it names); ``--no-baselines`` leaves the
baselines out (comparing encoders on dev). The last line is one JSON object, also written to
``<store>/paper_table.json``::

    {"trex", "google_re", "kamel", "nq", "triviaqa", "entity_translation", "entity_translation_languages",
     "temporal": {"changed_before", "changed_after", "stale_before", "stale_after", "unchanged_before",
                  "unchanged_after"},
     "ceilings": {task: share}, "query_copy_rates": {task: share},
     "calibration": {task: {"ece", "aurc", "accuracy_at_coverage": {"0.1", "0.25", "0.5", "1.0"}, "n"}},
     "shown": {task: {"min_confidence", "sure", "precision", "right_greyed"}},
     "baselines": {"mlm-head": {task: score}, "mlm-read": {…}},
     "combined": {"trex", "google_re", "kamel", "nq", "triviaqa", "ceilings": {task: share},
                  "calibration": {task: {…}}, "shown": {task: {…}}, "query_copy_rates": {task: share},
                  "n": {task: n},
                  "statements": {"kamel", "nq", "triviaqa", "ceilings": {task: share}, "calibration": {task: {…}},
                                 "shown": {task: {…}}, "n": {task: n}}},
     "corpus_tokens": {datastore: tokens}, "indexes": {"2015-05", "2020-09", "2020-09+simplewiki-2021-12"},
     "passages": {"knowledge", "combined": {task: passages}, "temporal", "entity_translation"}, "split", "n", "model",
     "adapted": {"kamel_heldout", "kamel_heldout_zero_shot", "triviaqa", "nq", "trained_on", "encoder"},
     "seconds"}

The top-level knowledge scores, ``ceilings`` and ``calibration`` are the 2020 dump's; ``combined`` holds the same
against the 2020 dump and Simple English Wikipedia together. ``calibration``: how well each answer's confidence
(``npmcore.answer.confidence``, the encoder's calibrator; null without one) says when it is right, per task (temporal:
against the 2020 dump): expected calibration error, area under the risk-coverage curve, accuracy of the most
confident 10%, 25%, 50% and all answers. ``shown``: what a person sees of them
(:func:`npmcore.evaluation.selective.shown_report`): the share shown as sure (at or above the service's
``min_confidence``), the share of those right, and the share of the right ones shown greyed.
``entity_translation`` is the average over the languages with at least 30 facts of their exact match (the
paper averages its languages); ``entity_translation_languages`` has every language's, with its count.
"""

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path

from npmcore.runtime import configure_environment

configure_environment()

import fsspec  # noqa: E402
import mlflow  # noqa: E402

from flows.backfill import BackfillParams, backfill_dump  # noqa: E402
from flows.evaluate import EvalParams, evaluate  # noqa: E402
from flows.index import IndexParams, index_corpus  # noqa: E402
from flows.ingest import ingest_corpus  # noqa: E402
from flows.params import ClusterParams, IngestParams  # noqa: E402
from flows.prefect_api import prefect_api  # noqa: E402
from flows.results import EvalRow  # noqa: E402
from flows.train import QueryTrainParams, train_query_encoder  # noqa: E402
from npmcore.cluster import dask_cluster  # noqa: E402
from npmcore.evaluation.adapted import kamel_facts, kamel_halves, write_query_log  # noqa: E402
from npmcore.evaluation.baselines import BASELINES  # noqa: E402
from npmcore.evaluation.dumps import DUMP_DATES, SIMPLE, dated_dump, simple_wikipedia  # noqa: E402
from npmcore.snapshots import open_index  # noqa: E402
from npmcore.storage import cache_dir, join  # noqa: E402
from npmcore.tracking import resolve_encoder, tracking  # noqa: E402
from npmcore.tracking_store import tracking_uri  # noqa: E402

KNOWLEDGE = ("trex", "google_re", "kamel", "nq", "triviaqa")
QUERY_WORDS_ALLOWED = ("trex", "google_re", "kamel")  # chosen on their dev facts (module docstring)
KNOWLEDGE_PASSAGES = 10  # top BM25 passages of the knowledge tasks, chosen on their dev facts (module docstring)
NAMES_PASSAGES = 3  # of the temporal facts and entity translation, answered from an article's own sentences
MIN_LANGUAGE_FACTS = 30  # the languages averaged for entity translation
ADAPTED_QUERIES = 6000  # the adapted row's query log: a seeded sample of the KAMEL dev facts of half the relations
ADAPTED_STEPS = 400  # of 16 queries
ADAPTED_TASKS = ("triviaqa", "nq")  # what the adapted query encoder is measured on beside KAMEL's other relations
EXPERIMENT = "npm-paper-table"
COMBINED = f"2020-09+{SIMPLE}"  # the datastore of the 2020 dump and Simple English Wikipedia
# top BM25 passages of the knowledge tasks on the combined datastore, chosen on their dev facts (module docstring)
COMBINED_PASSAGES = {"trex": 20, "google_re": 20, "kamel": 20, "nq": 10, "triviaqa": 10}
# the statements row: the question tasks asked as the query service asks them, and their passages, chosen on dev
STATEMENTS_PASSAGES = {"kamel": 5, "nq": 5, "triviaqa": 5}


def rows_by(rows: list[EvalRow]) -> dict[tuple[str, str], EvalRow]:
    return {(r.task, r.system): r for r in rows}


def translation_scores(row: EvalRow) -> tuple[float | None, dict[str, dict]]:
    """The average over languages with at least MIN_LANGUAGE_FACTS facts, and each language's score and count."""
    counts = {k.removeprefix("count."): int(v) for k, v in row.breakdown.items() if k.startswith("count.")}
    languages = {
        lang: {"exact_match": row.breakdown[f"exact_match.{lang}"], "n": n} for lang, n in sorted(counts.items())
    }
    kept = [v["exact_match"] for v in languages.values() if v["n"] >= MIN_LANGUAGE_FACTS]
    return (sum(kept) / len(kept) if kept else None), languages


def key_of(name: str) -> str:
    """A datastore's name as an MLflow key may write it (no "+": the combined datastore is ``combined``)."""
    return "combined" if name == COMBINED else name


def flat(table: dict, prefix: str = "") -> dict[str, float]:
    """The numbers of the table as MLflow metrics: nested keys joined by dots (``combined.ceilings.trex``)."""
    out = {}
    for key, value in table.items():
        name = f"{prefix}{key_of(key)}"
        if isinstance(value, dict):
            out |= flat(value, f"{name}.")
        elif isinstance(value, int | float) and not isinstance(value, bool):
            out[name] = value
    return out


def knowledge_table(rows: dict[tuple[str, str], EvalRow]) -> dict:
    """The five knowledge tasks against one datastore: their scores, ceilings, calibration and copy rates."""
    return {
        **{t: rows[(t, "npm")].score for t in KNOWLEDGE},
        "ceilings": {t: rows[(t, "npm")].breakdown.get("ceiling") for t in KNOWLEDGE},
        "calibration": {t: rows[(t, "npm")].calibration for t in KNOWLEDGE},
        "shown": {t: rows[(t, "npm")].shown for t in KNOWLEDGE},
        "query_copy_rates": {t: rows[(t, "npm")].query_copy_rate for t in KNOWLEDGE},
        "n": {t: rows[(t, "npm")].n for t in KNOWLEDGE},
    }


def statements_row(rows: dict[tuple[str, str], EvalRow]) -> dict:
    """The statements row: each task's score, ceiling and calibration asked as statements, and its count."""
    return {
        **{t: rows[(t, "npm")].score for t in STATEMENTS_PASSAGES},
        "ceilings": {t: rows[(t, "npm")].breakdown.get("ceiling") for t in STATEMENTS_PASSAGES},
        "calibration": {t: rows[(t, "npm")].calibration for t in STATEMENTS_PASSAGES},
        "shown": {t: rows[(t, "npm")].shown for t in STATEMENTS_PASSAGES},
        "n": {t: rows[(t, "npm")].n for t in STATEMENTS_PASSAGES},
    }


@dataclass(frozen=True)
class Adapted:
    """The adapted row's query encoder and the held-out facts it is measured on."""

    model: str  # the registered query encoder (models:/npm-query-encoder/N)
    encoder: str  # where it loads from
    heldout: Path  # the split's KAMEL facts of the relations it was not trained on, as a cloze file
    trained_on: str

    def row(self, mine: dict[tuple[str, str], EvalRow], theirs: dict[tuple[str, str], EvalRow], split: str) -> dict:
        return {
            "kamel_heldout": mine[("cloze", "npm")].score,
            "kamel_heldout_zero_shot": theirs[("cloze", "npm")].score,
            **{t: (mine[(t, "npm")].score if split == "test" else None) for t in ADAPTED_TASKS},
            "trained_on": self.trained_on,
            "encoder": self.model,
        }


def train_adapted(args: argparse.Namespace, index: str) -> Adapted:
    """A query encoder trained on the KAMEL dev facts of half the relations (a query log) against ``index``; it is
    measured on the other half's facts of the split and (test) on TriviaQA and NQ, the answering encoder beside it
    on the same held-out facts."""
    trained, held = kamel_halves()
    folder = Path(args.store if "://" not in args.store else cache_dir()) / "adapted"
    folder.mkdir(parents=True, exist_ok=True)
    log = write_query_log(kamel_facts(trained, "dev"), folder / "kamel-dev-trained-relations.jsonl")
    heldout = write_query_log(kamel_facts(held, args.split), folder / f"kamel-{args.split}-heldout-relations.jsonl")
    params = QueryTrainParams(
        store=args.store,
        index=index,
        queries=str(log),
        count=ADAPTED_QUERIES,
        steps=ADAPTED_STEPS,
        passages=args.passages,
        experiment=EXPERIMENT,
    )
    model = train_query_encoder(params)
    return Adapted(
        model,
        resolve_encoder(model, args.store),
        heldout,
        f"KAMEL dev facts of {len(trained)} relations ({ADAPTED_QUERIES} sampled of {sum(1 for _ in log.open())}); "
        f"measured on the {args.split} facts of the other {len(held)}",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", default="paper-store", help="store of the corpora, indexes and MLflow runs")
    parser.add_argument("--split", choices=("test", "dev"), default="test")
    parser.add_argument(
        "--limit", type=int, default=1000,
        help="examples per task (a seeded sample; with 1000, 64 min from an empty store on 2 cores with AMX)",
    )  # fmt: skip
    parser.add_argument("--baseline-limit", type=int, default=1000, help="examples per task of the baselines")
    parser.add_argument(
        "--passages", type=int, default=KNOWLEDGE_PASSAGES, help="top BM25 passages of a knowledge query on 2020"
    )
    parser.add_argument("--dumps", type=Path, default=None, help="folder holding 2015-05/ and 2020-09/")
    parser.add_argument("--simplewiki", type=Path, default=None, help="Simple English Wikipedia's folder (AA/ AB/)")
    parser.add_argument("--model", default=None, help="the encoder that answers (default: the shipped one)")
    parser.add_argument("--baselines", action=argparse.BooleanOptionalAction, default=True, help="mlm-head, mlm-read")
    parser.add_argument(
        "--adapted", action=argparse.BooleanOptionalAction, default=True, help="the adapted row (module docstring)"
    )
    args = parser.parse_args()
    if "://" not in args.store:
        args.store = str(Path(args.store).resolve())
    started = time.perf_counter()
    dumps = {name: (args.dumps / name if args.dumps else dated_dump(name)) for name in ("2015-05", "2020-09")}
    dumps[SIMPLE] = args.simplewiki or simple_wikipedia()
    baselines = list(BASELINES) if args.baselines else []
    with prefect_api(), dask_cluster(store=args.store) as address:
        cluster = ClusterParams(dask_address=address)  # one cluster for every stage: no start-up per evaluation

        def run(
            tasks: list[str],
            index: str,
            systems: list[str],
            label: str,
            passages: int,
            limit: int = args.limit,
            query_words: bool = False,
            model: str | None = args.model,
            data: Path | None = None,
            ask: str | None = None,
        ) -> dict[tuple[str, str], EvalRow]:
            if not tasks or not systems:  # --no-baselines
                return {}
            params = EvalParams(
                tasks=tasks,
                store=args.store,
                index=index,
                systems=systems,
                limit=limit,
                split=args.split,
                passages=passages,
                exclude_query_words=not query_words,
                model=model,
                data=None if data is None else str(data),
                ask=ask,
                experiment=EXPERIMENT,
                label=label,
                cluster=cluster,
            )
            return rows_by(evaluate(params))

        first = IngestParams(
            inputs=[str(dumps["2015-05"])], store=args.store, cluster=cluster, dump_date=DUMP_DATES["2015-05"]
        )
        old = index_corpus(IndexParams(store=args.store, corpus=ingest_corpus(first), vectors=False, cluster=cluster))
        indexes = {"2015-05": old}
        for name, previous in (("2020-09", "2015-05"), (SIMPLE, "2020-09")):
            backfill = BackfillParams(
                dump=[str(dumps[name])],
                dump_date=DUMP_DATES[name],
                store=args.store,
                previous=indexes[previous],
                cluster=cluster,
            )
            indexes[COMBINED if name == SIMPLE else name] = backfill_dump(backfill).index
        new, both = indexes["2020-09"], indexes[COMBINED]
        with (
            tracking(tracking_uri(args.store), EXPERIMENT),
            mlflow.start_run(run_name=f"paper table: {args.split}, {args.model or 'the shipped encoder'}") as parent,
        ):
            mlflow.log_params(
                {
                    "model": args.model or "default",
                    "split": args.split,
                    "limit": args.limit,
                    "passages": args.passages,
                    "passages.combined": json.dumps(COMBINED_PASSAGES),
                    "datastores": ", ".join(indexes),
                    **{f"index.{key_of(name)}": url for name, url in indexes.items()},
                    "baselines": ", ".join(baselines) or "none",
                    "adapted": args.adapted,
                }
            )
            adapted = train_adapted(args, new) if args.adapted else None  # first: its runs share passages below
            before = run(["temporal", "entity_translation"], old, ["npm"], "2015-05", NAMES_PASSAGES)
            before |= run(["entity_translation"], old, baselines, "2015-05", NAMES_PASSAGES, args.baseline_limit)
            after = run(["temporal"], new, ["npm"], "2020-09", NAMES_PASSAGES)
            combined, mine = {}, {}
            for task in KNOWLEDGE:  # a task against 2020, then both: the 2020 passages of both encoded once
                words = task in QUERY_WORDS_ALLOWED
                after |= run([task], new, ["npm"], "2020-09", args.passages, query_words=words)
                combined |= run([task], both, ["npm"], COMBINED, COMBINED_PASSAGES[task], query_words=words)
                if adapted is not None and task in ADAPTED_TASKS and args.split == "test":  # tasks it never saw
                    mine |= run([task], new, ["npm"], "adapted", args.passages, model=adapted.encoder)
                if adapted is not None and task == "kamel":  # its other relations, by both encoders
                    held = {"passages": args.passages, "query_words": True, "data": adapted.heldout}
                    mine |= run(["cloze"], new, ["npm"], "adapted/kamel_heldout", model=adapted.encoder, **held)
                    theirs = run(["cloze"], new, ["npm"], "zero-shot/kamel_heldout", **held)
            stated = {}
            for task, passages in STATEMENTS_PASSAGES.items():
                stated |= run([task], both, ["npm"], f"{COMBINED}/statements", passages, ask="statements")
            after |= run(list(KNOWLEDGE), new, baselines, "2020-09", args.passages, args.baseline_limit)

            temporal = {
                f"{kind}_{when}": rows[("temporal", "npm")].breakdown[f"exact_match.{kind}"]
                for when, rows in (("before", before), ("after", after))
                for kind in ("changed", "unchanged")
            } | {
                f"stale_{when}": rows[("temporal", "npm")].breakdown["stale_rate"]
                for when, rows in (("before", before), ("after", after))
            }
            average, languages = translation_scores(before[("entity_translation", "npm")])
            zero_shot = knowledge_table(after)
            ceilings = zero_shot["ceilings"] | {
                "entity_translation": before[("entity_translation", "npm")].breakdown.get("ceiling")
            }
            ceilings |= {
                f"temporal_{k}": after[("temporal", "npm")].breakdown.get(f"ceiling.{k}")
                for k in ("changed", "unchanged")
            }
            table = {
                **{t: zero_shot[t] for t in KNOWLEDGE},
                "entity_translation": average,
                "entity_translation_languages": languages,
                "temporal": temporal,
                "ceilings": ceilings,
                "query_copy_rates": zero_shot["query_copy_rates"],
                "calibration": zero_shot["calibration"]
                | {"entity_translation": before[("entity_translation", "npm")].calibration}
                | {"temporal": after[("temporal", "npm")].calibration},
                "shown": zero_shot["shown"]
                | {"entity_translation": before[("entity_translation", "npm")].shown}
                | {"temporal": after[("temporal", "npm")].shown},
                "baselines": {
                    system: {t: after[(t, system)].score for t in KNOWLEDGE}
                    | {"entity_translation": before[("entity_translation", system)].score}
                    for system in baselines
                },
                "combined": knowledge_table(combined),
                "model": args.model or "default",
                "adapted": None if adapted is None else adapted.row(mine, theirs, args.split),
                "n": zero_shot["n"]
                | {"entity_translation": before[("entity_translation", "npm")].n}
                | {"temporal": after[("temporal", "npm")].n},
                "corpus_tokens": {name: open_index(url).manifest.counts["tokens"] for name, url in indexes.items()},
                "indexes": indexes,
                "passages": {
                    "knowledge": args.passages,
                    "combined": COMBINED_PASSAGES,
                    "temporal": NAMES_PASSAGES,
                    "entity_translation": NAMES_PASSAGES,
                },
                "split": args.split,
                "seconds": round(time.perf_counter() - started, 1),
            }
            table["combined"]["statements"] = statements_row(stated)
            with mlflow.start_run(run_name=f"statements: {', '.join(STATEMENTS_PASSAGES)} on {COMBINED}", nested=True):
                mlflow.log_params({"ask": "statements", "passages": json.dumps(STATEMENTS_PASSAGES), "index": both})
                mlflow.log_metrics(flat(table["combined"]["statements"]))
            mlflow.log_metrics(flat(table))
            mlflow.log_dict(table, "paper_table.json")
            table["run"] = parent.info.run_id
    line = json.dumps(table, ensure_ascii=False)
    out = join(args.store, "paper_table.json")
    with fsspec.open(f"{out}.tmp", "w") as f:
        f.write(line + "\n")
    fs, _ = fsspec.core.url_to_fs(out)
    fs.mv(f"{out}.tmp", out)
    print(line)


if __name__ == "__main__":
    main()
