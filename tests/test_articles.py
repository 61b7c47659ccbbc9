"""The table of a corpus's article openings (npmcore.index.articles) on the first file of Simple English Wikipedia
(371 real pages): the same articles a plain reading of the corpus gives, written with every index, and written once
into the cache for an index that has none."""

import sqlite3

import pytest

from npmcore.answer import inference
from npmcore.answer.inference import NPM
from npmcore.corpus.ingest import ingest
from npmcore.index.articles import ARTICLES, Article, Articles, article_of, name_of, write_articles
from npmcore.index.bm25_index import build_bm25_index
from npmcore.snapshots import open_index, read_blocks
from npmcore.storage import local_folder


@pytest.fixture(scope="module")
def simple_corpus(tmp_path_factory, simplewiki_shard) -> str:
    return ingest([simplewiki_shard], str(tmp_path_factory.mktemp("simple") / "store"))


def plainly(corpus: str) -> dict[str, list[Article]]:
    """Every article read plainly: each title's first block, whole corpus in memory, by the name its title spells."""
    rows = [row for table in read_blocks(corpus, ["title", "text"]) for row in table.to_pylist()]
    by_name: dict[str, list[Article]] = {}
    for k, row in enumerate(rows):
        if row["title"] and (k == 0 or rows[k - 1]["title"] != row["title"]):
            by_name.setdefault(name_of(row["title"]), []).append(article_of(row["title"], row["text"]))
    return by_name


def test_the_table_holds_each_articles_opening_as_a_plain_reading_of_the_corpus_does(simple_corpus, tmp_path):
    path = tmp_path / ARTICLES
    expected = plainly(simple_corpus)
    assert write_articles(simple_corpus, path) == sum(len(v) for v in expected.values()) > 300
    table = Articles(path)
    for name, articles in expected.items():
        assert table.named(name) == articles, name
    assert table.named("nosucharticleanywhere") == []
    alan = table.named(name_of("Alan Turing"))
    assert len(alan) == 1 and alan[0].life and "(" not in alan[0].opening[:60]  # a person's: his years in brackets
    assert [p.name for p in tmp_path.iterdir()] == [ARTICLES]  # no partial file left beside it
    with pytest.raises(sqlite3.OperationalError):  # opened to read only
        table._db.execute("DELETE FROM articles")
    table.close()
    with pytest.raises(FileNotFoundError, match="no table of article openings"):
        Articles(tmp_path / "missing.sqlite")


def test_an_index_holds_its_table_and_one_built_before_gets_one_once_in_the_cache(
    simple_corpus, tmp_path, monkeypatch, caplog
):
    url = build_bm25_index(simple_corpus)
    assert ARTICLES in open_index(url).manifest.files  # written with the index, checksummed with it
    npm = NPM(url, cache=tmp_path)
    assert npm.articles.path == local_folder(url) / ARTICLES
    npm.close()
    monkeypatch.setattr(inference, "ARTICLES", "an-index-from-before.sqlite")  # as an index without the table reads
    old = NPM(url, cache=tmp_path)
    with caplog.at_level("WARNING"):
        cached = old.articles
    assert cached.path.parent == tmp_path / "articles" and "holds no table of article openings" in caplog.text
    assert cached.named(name_of("Alan Turing")) == npm_articles(url).named(name_of("Alan Turing"))
    old.close()
    caplog.clear()
    again = NPM(url, cache=tmp_path).articles  # written once: the next process reads it
    assert again.path == cached.path and "holds no table" not in caplog.text


def npm_articles(url: str) -> Articles:
    return Articles(local_folder(url) / ARTICLES)
