"""The adapted setting: a query encoder trained on a query log of some questions, measured on others.

People who run a service have its query log: the questions asked and the answers that were right.
Measured the way Zemi measures multitask training, on tasks never seen: KAMEL's relations are split
in two halves by a hash of their id (:func:`kamel_halves`); the dev facts of the first half are the
query log a query encoder trains on (:func:`write_query_log`), and the test facts of the *other*
half, TriviaQA and NQ are what it is measured on. No fact of a measured task is trained on.
"""

import hashlib
import json
from pathlib import Path

from npmcore.evaluation.tasks import DEFAULT_DATA_DIR, Example, load_task


def relation_of(example: Example) -> str:
    """The KAMEL relation of an example (ids ``kamel-{relation}-{split}-{line}``)."""
    return example.id.split("-")[1]


def kamel_halves(data_dir: Path = DEFAULT_DATA_DIR) -> tuple[frozenset[str], frozenset[str]]:
    """KAMEL's relations split in two by a hash of their id: (trained on, held out)."""
    relations = {relation_of(e) for e in load_task("kamel", data_dir, limit=None, split="dev").examples}
    trained = frozenset(r for r in relations if int(hashlib.sha256(r.encode()).hexdigest()[:8], 16) % 2 == 0)
    return trained, frozenset(relations - trained)


def kamel_facts(relations: frozenset[str], split: str, data_dir: Path = DEFAULT_DATA_DIR) -> list[Example]:
    """KAMEL's facts of ``split`` whose relation is one of ``relations``."""
    return [e for e in load_task("kamel", data_dir, limit=None, split=split).examples if relation_of(e) in relations]


def write_query_log(examples: list[Example], path: Path) -> Path:
    """A query log (jsonl of ``{"id", "query", "answers"}``: what query-side training reads, and what the cloze
    task evaluates), written whole under a temporary name, then renamed."""
    partial = path.with_name(f".{path.name}.tmp")
    with partial.open("w", encoding="utf-8") as f:
        for e in examples:
            f.write(json.dumps({"id": e.id, "query": e.query, "answers": list(e.answers)}, ensure_ascii=False) + "\n")
    return partial.rename(path)
