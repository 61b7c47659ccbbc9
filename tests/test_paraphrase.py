"""The paraphrased cloze dev set (bench/data/paraphrase-dev.jsonl) and the diagnostics that read it:
answer kinds, gold ranks among NPM's candidates, their summary."""

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from npmcore.evaluation.diagnostics import (
    KINDS,
    Diagnosis,
    answer_key,
    answer_kind,
    gold_rank,
    right_answers,
    summarize,
)
from npmcore.evaluation.metrics import normalize_answer
from npmcore.mask import MASK
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
        assert f["kind"] in KINDS, f["id"]
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


@pytest.mark.parametrize(
    "text, kind",
    [
        ("Hugh Blair of Borgue", "name"),
        ("The Congregationalist", "name"),
        ("Athabasca oil sands", "name"),
        ("Calgary–Edmonton Corridor", "name"),
        ("Lyndon B. Johnson", "name"),
        ("1642", "date"),
        ("333 BC", "date"),
        ("28 May 1871", "date"),
        ("April 13, 1813", "date"),
        ("1920s", "date"),
        ("6th century BC", "date"),
        ("31.1 million", "number"),
        ("24th", "number"),
        ("468 km2", "number"),
        ("seven", "number"),
        ("fourth", "number"),
        ("painted plaster", "other"),
        ("peine forte et dure", "other"),
        ("known", "other"),
        ("called", "other"),
        ("BC", "other"),
        ("", "other"),
    ],
)
def test_answer_kind(text, kind):
    assert answer_kind(text) == kind


def test_answer_kind_agrees_with_the_paraphrase_gold_kinds():
    wrong = [(f["answers"][0], f["kind"]) for f in FACTS if answer_kind(f["answers"][0]) != f["kind"]]
    assert len(wrong) <= 0.02 * len(FACTS), wrong  # "523" (a year) reads as a number


def test_gold_rank_matches_decoded_candidates_to_the_gold():
    assert answer_key("Émile Cohl") == answer_key("emile cohl") == "emile cohl"
    assert answer_key("Calgary–Edmonton Corridor") == answer_key("calgary - edmonton corridor")
    assert answer_key("The Gift") == answer_key("gift")
    candidates = ["known", "bc", "emile cohl", "cohl"]
    assert gold_rank(candidates, ["Émile Cohl"]) == 3
    assert gold_rank(candidates, ["Cohl", "Émile Cohl"]) == 3  # the first matching candidate counts
    assert gold_rank(candidates, ["Fantasmagorie"]) is None
    assert right_answers(candidates, ["Cohl", "Émile Cohl"]).tolist() == [False, False, True, True]
    read = []
    assert gold_rank((read.append(c) or c for c in candidates), ["known"]) == 1 and read == ["known"]


def test_summarize():
    diagnoses = [
        Diagnosis("a", "name", 1, 40, "Max Stirner", True),
        Diagnosis("b", "name", 3, 50, "known", False),
        Diagnosis("c", "date", 12, 60, "BC", False),
        Diagnosis("d", "number", None, 30, "1844", False),
    ]
    summary = summarize(diagnoses)
    assert {k: v for k, v in summary.items() if k != "top1_kind_vs_gold"} == {
        "n": 4,
        "exact_match": 0.25,
        "answer_in_candidates": 0.75,
        "rank_median": 3,
        "rank_at_1": 0.25,
        "rank_le_3": 0.5,
        "rank_le_10": 0.5,
        "exact_match_by_kind": {"name": 0.5, "number": 0.0, "date": 0.0},
    }
    confusion = summary["top1_kind_vs_gold"]
    assert list(confusion) == list(KINDS) and all(list(row) == list(KINDS) for row in confusion.values())
    assert confusion["name"] == {"name": 1, "number": 0, "date": 0, "other": 1}
    assert confusion["date"]["other"] == 1 and confusion["number"]["date"] == 1
    assert sum(sum(row.values()) for row in confusion.values()) == 4
    assert summarize([Diagnosis("e", "other", None, 0, "", False)])["rank_median"] is None
    with pytest.raises(ValueError, match="no diagnoses"):
        summarize([])
