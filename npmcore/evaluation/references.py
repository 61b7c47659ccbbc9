"""Reference corpora of the evaluation tasks, as documents for ``npmcore ingest``, and the
leakage guard.

Each task's reference corpus (domain-matched, as in the paper; the evaluated examples are
never part of it):

| task | documents |
|---|---|
| sst2, mr, cr, rt | every review of the *other* three sentiment sets (SST without neutral items), one per |
|                  | document, plus subj's subjective reviews |
| subj | every review of sst2, mr, cr, rt, plus ``enwiki_sample/wiki_00`` (objective, summary-like text) |
| agn | ``enwiki_sample/wiki_00`` and ``wiki_01`` plus the Lee news corpus shipped in gensim |
| rte | ``enwiki_sample/wiki_00`` plus the Lee news corpus |
| trex, google_re | one document per sampled fact (title = subject): its evidence sentences, unmasked |
| kamel, nq, triviaqa, cloze | none (the caller indexes Wikipedia, or its own corpus for cloze) |

A candidate document that contains an evaluated example (see :func:`leakage`) is dropped.
"""

import json
import logging
import os
from bisect import bisect_right
from collections.abc import Iterable, Iterator
from itertools import accumulate
from pathlib import Path

from npmcore.corpus.readers import DEFAULT_NEWS, default_corpus, read_wikiextractor
from npmcore.evaluation.readers import lama_facts, schema_error
from npmcore.evaluation.tasks import LAMA_TASKS, SENTIMENT_TASKS, TASKS, Task, load_task
from npmcore.mask import MASK

logger = logging.getLogger(__name__)

# Tasks whose leakage needle is the masked query itself (their evidence legitimately
# states the answer, so the filled-in text is expected in the corpus).
_CLOZE_TASKS = (*LAMA_TASKS, "cloze")


def _normalize(text: str) -> str:
    # All whitespace goes, not only runs of it: the sentiment sets share reviews tokenised
    # differently ("that 's" in SST, "that's" in MR), which must still count as the same text.
    return "".join(text.split()).lower()


def _review_documents(names: Iterable[str], data_dir: Path, label: int | None = None) -> Iterator[dict]:
    """Every example text of closed-set tasks (all of the file, not a sample), one per document."""
    for name in names:
        for ex in load_task(name, data_dir, limit=None).examples:
            if label is None or ex.label == label:
                yield {"id": ex.id, "title": "", "text": ex.text}


def _wiki_documents(data_dir: Path, shards: Iterable[str]) -> Iterator[dict]:
    """Articles of WikiExtractor shards of ``enwiki_sample`` (articles without text are skipped)."""
    for shard in shards:
        path = data_dir / "enwiki_sample" / shard
        for doc in read_wikiextractor(path.read_text(encoding="utf-8"), str(path)):
            if doc.text.strip():
                yield {"id": f"enwiki-{doc.doc_id}", "title": doc.title, "text": doc.text}


def _news_documents() -> Iterator[dict]:
    """The Lee news corpus shipped in gensim, one article per line."""
    path = next(p for p in default_corpus() if p.endswith(DEFAULT_NEWS))
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if line.strip():
                yield {"id": f"lee-{line_no}", "title": "", "text": line.strip()}


def _evidence_text(name: str, evidence: dict) -> str:
    if name == "trex":
        return evidence["masked_sentence"].replace(MASK, evidence["obj_surface"])
    return evidence["snippet"]  # Google-RE: raw Wikipedia text


def _lama_documents(task: Task, data_dir: Path) -> Iterator[dict]:
    """One document per evaluated fact: its evidence, with T-REx masks filled by ``obj_surface``."""
    wanted = {ex.id for ex in task.examples}
    for _, path, line, fact in lama_facts(data_dir, task.name):
        if fact["uuid"] not in wanted:
            continue
        try:
            sentences = [" ".join(_evidence_text(task.name, e).split()) for e in fact["evidences"]]
        except (KeyError, TypeError, AttributeError) as e:
            raise schema_error(path, line, f"an evidence lacks its text fields ({e!r})") from e
        text = "\n".join(dict.fromkeys(s for s in sentences if s))
        if text:
            yield {"id": fact["uuid"], "title": fact["sub_label"], "text": text}


def _candidates(task: Task, data_dir: Path) -> Iterator[dict]:
    if task.name not in TASKS:
        raise ValueError(f"no reference corpus for unknown task {task.name!r}; known tasks: {', '.join(TASKS)}")
    if task.name in SENTIMENT_TASKS:
        yield from _review_documents([n for n in SENTIMENT_TASKS if n != task.name], data_dir)
        yield from _review_documents(["subj"], data_dir, label=0)  # subj label 0: subjective review
    elif task.name == "subj":
        yield from _review_documents(SENTIMENT_TASKS, data_dir)
        yield from _wiki_documents(data_dir, ["wiki_00"])
    elif task.name == "agn":
        yield from _wiki_documents(data_dir, ["wiki_00", "wiki_01"])
        yield from _news_documents()
    elif task.name == "rte":
        yield from _wiki_documents(data_dir, ["wiki_00"])
        yield from _news_documents()
    elif task.name in LAMA_TASKS:
        yield from _lama_documents(task, data_dir)
    # kamel, nq, triviaqa and cloze: no documents of their own.


def _hits(task: Task, documents: list[dict]) -> list[set[int]]:
    """Per evaluated example, the indices of the documents that contain its needle (see leakage)."""
    texts = [_normalize(str(d["text"])) for d in documents]
    starts = [0, *accumulate(len(t) + 1 for t in texts)]  # offsets in the "\n"-joined haystack
    haystack = "\n".join(texts)  # needles have no whitespace: a match never spans two documents
    hits = []
    for ex in task.examples:
        needle = _normalize(ex.query if task.name in _CLOZE_TASKS else ex.text)
        if not needle:
            raise ValueError(f"task {task.name!r}: example {ex.id!r} has no text to check for leakage")
        found, pos = set(), haystack.find(needle)
        while pos >= 0:
            found.add(bisect_right(starts, pos) - 1)
            pos = haystack.find(needle, pos + 1)
        hits.append(found)
    return hits


def leakage(task: Task, documents: Iterable[dict]) -> list[str]:
    """Ids of evaluated examples that appear verbatim in a reference document.

    The comparison is substring-wise on lower-cased text with all whitespace removed. Closed-set
    and question tasks are checked strictly: the example's input before templating
    (``Example.text``: review, "title description", premise, question) must not occur in any
    document. LAMA (and cloze) evidence legitimately states the answer, so there the needle
    is the masked query itself (with its ``[MASK]``): a document may support the fact but
    must not be the probe; in practice this checks that no document contains ``[MASK]`` text.

    Args:
        task: the task whose examples are evaluated.
        documents: ``{"id", "title", "text"}`` dicts; only ``text`` is searched.

    Returns:
        Example ids, in task order; empty when nothing leaks.
    """
    hits = _hits(task, list(documents))
    return [ex.id for ex, found in zip(task.examples, hits) if found]


def reference_documents(task: Task, data_dir: Path) -> Iterator[dict]:
    """The reference corpus of ``task`` as ``{"id", "title", "text"}`` documents (the jsonl
    format ``npmcore ingest`` reads), without any document that leaks an evaluated example.

    The candidates are built in memory (a few MB) to filter them before the first one is yielded.
    """
    data_dir = Path(data_dir)
    documents = list(_candidates(task, data_dir))
    dropped = set().union(*_hits(task, documents))
    if dropped:
        logger.info(
            "task %s: dropped %d of %d reference documents that contain an evaluated example",
            task.name,
            len(dropped),
            len(documents),
        )
    for i, doc in enumerate(documents):
        if i not in dropped:
            yield doc


def write_reference_corpus(task: Task, data_dir: Path, out_path: str | Path) -> str:
    """Write :func:`reference_documents` as jsonl to ``out_path`` (via a temporary file and
    a rename, so a crash never leaves a partial corpus). Returns ``out_path`` as a string;
    the file is empty for tasks without documents of their own (kamel, nq, triviaqa, cloze)."""
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    count = 0
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            for doc in reference_documents(task, data_dir):
                f.write(json.dumps(doc, ensure_ascii=False) + "\n")
                count += 1
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    logger.info("task %s: wrote %d reference documents to %s", task.name, count, out)
    return str(out)
