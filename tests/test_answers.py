"""Answers a user can trust, on the default path (the shipped encoder and ranker, default inference):
a sentence of the corpus gets its own phrase back, where NPM's own scoring (kept as ``scoring="npm"``,
the paper's) answers with another phrase of the same passages."""

import json

import pytest

from npmcore.answer.inference import NPM, InferenceConfig
from npmcore.corpus.ingest import ingest
from npmcore.index.datastore import build_datastore
from npmcore.index.indexer import IndexConfig, build_index

QUERY = "Albert Einstein was born in [MASK]."  # the dump's page says: "Albert Einstein was born in Ulm, …"


@pytest.fixture(scope="module")
def einstein(tmp_path_factory, dump_documents) -> NPM:
    """The embedded dump's page on Albert Einstein and its 30 shortest other pages (about 50k tokens:
    words such as "Einstein" are rare in them, as in the whole corpus), indexed with the defaults but a
    Flat index."""
    folder = tmp_path_factory.mktemp("einstein")
    others = sorted((t for t in dump_documents if t != "Albert Einstein"), key=lambda t: len(dump_documents[t]))
    titles = ["Albert Einstein", *others[:30]]
    pages = folder / "pages.jsonl"
    pages.write_text("".join(json.dumps({"id": t, "title": t, "text": dump_documents[t]}) + "\n" for t in titles))
    store = str(folder / "store")
    return NPM(build_index(build_datastore(ingest([str(pages)], store), store), IndexConfig(factory="Flat")))


def test_a_sentence_of_the_corpus_gets_its_own_phrase_back(einstein):
    (answers,) = einstein.predict([QUERY])
    assert answers[0].text == "Ulm"
    best = einstein.evidence.span(answers[0].evidence[0])
    assert "Albert Einstein was born in Ulm" in best.text
    assert answers[0].parts["left_share"] == max(a.parts["left_share"] for a in answers)  # it says so, word for word


def test_the_papers_scoring_answers_as_before(einstein):
    """The pinned case of NPM's own scoring: Zürich (Einstein's son Eduard was born there), then Munich
    (where the family moved); the brute-force tests of tests/test_inference.py hold it to the paper."""
    (answers,) = einstein.predict([QUERY], InferenceConfig(scoring="npm"))
    assert [a.text for a in answers[:2]] == ["Zürich", "Munich"]
    assert answers[0].parts is None


@pytest.mark.slow
def test_on_the_demo_store_einstein_was_born_in_ulm(tmp_path, prefect_server):
    """The demo's own store: the embedded default corpus ingested and indexed by the flows with their
    defaults (FAISS PQ32np and BM25), queried with the defaults."""
    from flows.index import IndexParams, index_corpus
    from flows.ingest import ingest_corpus
    from flows.params import IngestParams

    store = str(tmp_path / "store")
    index = index_corpus(IndexParams(store=store, corpus=ingest_corpus(IngestParams(store=store))))
    (answers,) = NPM(index).predict([QUERY])
    assert answers[0].text == "Ulm"
