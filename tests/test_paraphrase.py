"""The paraphrased cloze dev set (bench/data/paraphrase-dev.jsonl)."""

import json
import re
from collections import Counter
from pathlib import Path

from npmcore.evaluation.metrics import normalize_answer
from npmcore.evaluation.templates import MASK
from npmcore.vocab import FUNCTION_WORDS, content_words_of

DATA = Path(__file__).resolve().parents[1] / "bench" / "data"
FACTS = [json.loads(line) for line in (DATA / "paraphrase-dev.jsonl").read_text(encoding="utf-8").splitlines()]
RUN = 4  # the shortest run of words a query may not share with its evidence


def word_runs(text: str, n: int = RUN) -> set[tuple[str, ...]]:
    words = re.findall(r"\w+", text.lower())
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def test_paraphrase_facts_are_well_formed():
    assert len(FACTS) >= 100
    assert len({f["id"] for f in FACTS}) == len(FACTS)
    for f in FACTS:
        assert set(f) == {"id", "query", "answers", "title", "evidence", "kind"}, f["id"]
        assert f["query"].count(MASK) == 1, f["id"]
        assert f["kind"] in ("name", "number", "date", "other"), f["id"]
        assert f["answers"] and all(a in f["evidence"] for a in f["answers"]), f["id"]
        assert 1 <= len(f["answers"][0].split()) <= 4, f["id"]
    kinds = Counter(f["kind"] for f in FACTS)
    assert kinds["name"] + kinds["number"] + kinds["date"] >= 0.75 * len(FACTS) and kinds["other"] > 0
    assert len({f["title"] for f in FACTS}) >= 40


def test_paraphrase_evidence_is_verbatim_in_the_text_the_cloze_task_indexes(dump_documents):
    missing = [f["id"] for f in FACTS if f["evidence"] not in dump_documents.get(f["title"], "")]
    assert missing == []


def test_paraphrase_queries_are_reworded_not_copied():
    copied = {}
    for f in FACTS:
        runs = set().union(*(word_runs(part) for part in f["query"].split(MASK)))
        if shared := runs & word_runs(f["evidence"]):
            copied[f["id"]] = shared
    assert copied == {}


def test_paraphrase_answers_can_be_predicted():
    """Open-set answers start and end with a content word and hold none of the query's (the
    evaluation's defaults): a gold answer breaking either rule could never be predicted."""
    for f in FACTS:
        answer = f["answers"][0]
        words = normalize_answer(answer).split()  # articles dropped, as exact match does
        assert words[0] not in FUNCTION_WORDS and words[-1] not in FUNCTION_WORDS, f["id"]
        assert content_words_of(answer).isdisjoint(content_words_of(f["query"].replace(MASK, " "))), f["id"]


def test_paraphrase_facts_use_no_evidence_of_the_cloze_splits():
    others = {
        json.loads(line)["evidence"]
        for name in ("cloze-dev.jsonl", "cloze-test.jsonl")
        for line in (DATA / name).read_text(encoding="utf-8").splitlines()
    }
    assert len(others) == 140
    assert [f["id"] for f in FACTS if f["evidence"] in others] == []
