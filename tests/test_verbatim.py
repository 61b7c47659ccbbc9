"""The verbatim sets (bench/data/verbatim-{dev,test}.jsonl): sentences of the default corpus word for
word, one phrase masked; and the draw that makes them (npmcore.evaluation.verbatim)."""

import json
from collections import Counter
from dataclasses import asdict
from pathlib import Path

import pytest

from npmcore.corpus.ingest import ingest
from npmcore.corpus.partitions import IngestConfig
from npmcore.evaluation.diagnostics import KINDS, answer_kind
from npmcore.evaluation.verbatim import draw_facts, maskable, sentences
from npmcore.mask import MASK
from npmcore.snapshots import read_blocks
from npmcore.vocab import content_words_of

DATA = Path(__file__).resolve().parents[1] / "bench" / "data"
SETS = {
    split: [json.loads(line) for line in (DATA / f"verbatim-{split}.jsonl").open(encoding="utf-8")]
    for split in ("dev", "test")
}


def masked(sentence: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for kind, lo, hi in maskable(sentence):
        found.setdefault(kind, []).append(sentence[lo:hi])
    return found


def test_maskable_phrases_of_each_kind():
    s = "Albert Einstein was born in Ulm, in the Kingdom of Württemberg in 1879, and had 2,500 friends."
    assert masked(s) == {
        "other": ["born", "friends"],
        "name": ["Ulm", "Kingdom", "Württemberg"],  # never the run at the sentence's start
        "date": ["1879"],
        "number": ["2,500"],
    }
    # a name of several words is masked whole, a phrase repeated in the sentence or sharing a word with it never
    assert masked("The war ended when New York City fell to the rebels of the war in 1783.")["name"] == [
        "New York City"
    ]
    assert "war" not in masked("The war ended when the war was lost.").get("other", [])
    assert masked("In 1905 Einstein published four papers in 1905 alone, said the report.").get("date") is None
    assert masked("He met John Smith and John Brown at the fair in Paris.")["name"] == ["Paris"]


def test_only_whole_plain_sentences_are_drawn():
    text = "Short one. This sentence is long enough to be a query of the verbatim set. [[Link]] markup | here is left out of every query."  # noqa: E501
    assert sentences(text) == ["This sentence is long enough to be a query of the verbatim set."]


def test_the_verbatim_sets_are_balanced_well_formed_and_disjoint():
    for split, facts in SETS.items():
        assert len(facts) >= 300 and len({f["id"] for f in facts}) == len(facts)
        assert Counter(f["kind"] for f in facts) == dict.fromkeys(KINDS, len(facts) // 4), split
        for f in facts:
            assert set(f) == {"id", "query", "answers", "title", "evidence", "kind", "block_id"}
            (answer,) = f["answers"]
            assert f["query"].count(MASK) == 1 and f["query"].replace(MASK, answer) == f["evidence"]
            assert answer_kind(answer) == f["kind"], f["id"]
            # reachable: an open-set answer never shares a content word with the query
            assert content_words_of(answer).isdisjoint(content_words_of(f["query"].replace(MASK, " "))), f["id"]
        assert len({f["evidence"] for f in facts}) == len(facts)
    assert not {f["evidence"] for f in SETS["dev"]} & {f["evidence"] for f in SETS["test"]}


def test_the_verbatim_evidence_is_in_the_default_corpus(dump_documents, news_lines):
    news = " ".join(news_lines)
    for facts in SETS.values():
        missing = [f["id"] for f in facts if f["evidence"] not in dump_documents.get(f["title"], news)]
        assert missing == []
    assert {f["title"] == "" for f in SETS["dev"]} == {True, False}  # both the dump's pages and the news


def test_draw_is_seeded_and_names_a_shortfall(dump_documents):
    rows = [(f"{n}#0", title, text) for n, (title, text) in enumerate(sorted(dump_documents.items())[:20])]
    first = draw_facts(rows, per_kind=5, seed=3, prefix="x")
    assert first == draw_facts(rows, per_kind=5, seed=3, prefix="x")
    assert first != draw_facts(rows, per_kind=5, seed=4, prefix="x")
    assert [f.kind for f in first[:4]] == list(KINDS) and [f.id for f in first[:2]] == ["x-1", "x-2"]
    others = draw_facts(rows, per_kind=5, seed=3, prefix="x", exclude=frozenset(f.evidence for f in first))
    assert not {f.evidence for f in first} & {f.evidence for f in others}
    with pytest.raises(ValueError, match="maskable sentences of kind 'name', 10000 asked for"):
        draw_facts(rows, per_kind=10_000, seed=3, prefix="x")


@pytest.mark.slow  # ingests the default corpus (40 s); by default the evidence is checked against its pages (above)
def test_the_verbatim_sets_are_what_the_script_draws_from_the_ingested_default_corpus(tmp_path, default_inputs):
    corpus = ingest(default_inputs, str(tmp_path), IngestConfig(pages_per_partition=25))
    rows = [
        row
        for t in read_blocks(corpus, ["block_id", "title", "text"])
        for row in zip(*(t.column(c).to_pylist() for c in ("block_id", "title", "text")), strict=True)
    ]
    dev = draw_facts(rows, 80, 1, "verbatim-dev")
    test = draw_facts(rows, 80, 2, "verbatim-test", exclude=frozenset(f.evidence for f in dev))
    assert [asdict(f) for f in dev] == SETS["dev"] and [asdict(f) for f in test] == SETS["test"]
