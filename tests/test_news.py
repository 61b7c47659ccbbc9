"""CC-News as it is published: a month of WARC files ingests to exactly its unique English articles
(against a brute-force reference), on Dask as in one process, and the next month extends the corpus
with only its new articles; the command line on pywb's real crawl and on the same file cut in half."""

import pytest
from conftest import PYWB
from news_warc import headline, write_news_months
from reference import unique_articles
from typer.testing import CliRunner

from flows.cli import app
from npmcore.cluster import dask_client
from npmcore.corpus.ingest import ingest
from npmcore.corpus.partitions import IngestConfig
from npmcore.corpus.readers import CorpusError, source_name
from npmcore.snapshots import open_corpus, read_blocks
from npmcore.storage import list_snapshots, open_snapshot

FILES_PER_MONTH = 3  # duplicates cross the files of a month, as the crawl's recrawls do


@pytest.fixture(scope="module")
def months(tmp_path_factory):
    return write_news_months(tmp_path_factory.mktemp("cc-news"), FILES_PER_MONTH)


@pytest.fixture(scope="module")
def october(months, tmp_path_factory) -> str:
    return ingest([str(p) for p in months[0].files], str(tmp_path_factory.mktemp("store")))


def unique_english(pages: list, kept: list | None = None) -> list:
    """The pages a brute-force pass keeps: English (the Bulgarian ones are "foreign"), no duplicates."""
    return unique_articles([p for p in pages if p.kind != "foreign"], kept)


def documents(corpus: str) -> list[dict]:
    """The documents of a corpus snapshot in order: their first block's row, the whole text."""
    docs: dict[str, dict] = {}
    for table in read_blocks(corpus, ["doc_id", "title", "text", "url", "date", "source"]):
        for row in table.to_pylist():
            if row["doc_id"] in docs:
                docs[row["doc_id"]]["text"] += " " + row["text"]
            else:
                docs[row["doc_id"]] = row
    return list(docs.values())


def test_a_month_ingests_to_exactly_its_unique_english_articles(months, october):
    expected = unique_english(months[0].articles)
    docs = documents(october)
    assert [d["url"] for d in docs] == [p.url for p in expected]
    assert len(docs) == 292  # 300 Lee articles less 7 exact and 1 near duplicate; every planted copy dropped
    for doc, page in zip(docs, expected, strict=True):
        assert doc["title"] == page.title
        assert " ".join(doc["text"].split()) == " ".join(f"{headline(page.text)} {page.text}".split())
        assert (doc["date"].year, doc["date"].month) == (2026, 10)
    counts = open_snapshot(october).counts
    dropped = ("bad_records", "no_article", "other_language", "duplicate_urls", "duplicate_texts", "near_duplicates")
    assert counts["pages"] == len(months[0].articles)  # the 404 and the redirect are HTML but not 200s
    assert counts["pages"] == sum(counts[k] for k in dropped) + counts["articles"]
    assert (counts["articles"], counts["docs"], counts["other_language"]) == (292, 292, 3)
    assert counts["near_duplicates"] == 2 and counts["bad_records"] == counts["no_article"] == 0
    assert counts["records"] == FILES_PER_MONTH + 2 * len(months[0].planted)  # warcinfo, then request + response


def test_dask_workers_give_the_same_snapshot(months, october, tmp_path, dask_scheduler):
    with dask_client(dask_scheduler) as client:
        parallel = ingest([str(p) for p in months[0].files], str(tmp_path), client=client)
    a, b = open_snapshot(october), open_snapshot(parallel)
    assert a.id == b.id and a.files == b.files and a.counts == b.counts


def test_the_next_month_extends_the_corpus_with_only_its_new_articles(months, october, tmp_path):
    store = october.rsplit("/corpus/", 1)[0]
    november = ingest([str(p) for p in months[1].files], store, extends=october)
    old, new = open_snapshot(october), open_snapshot(november)
    assert old.files.items() <= new.files.items()  # October's shards, byte for byte
    expected = unique_english(months[1].articles, unique_english(months[0].articles))
    docs = documents(november)
    assert [d["url"] for d in docs[: old.counts["docs"]]] == [d["url"] for d in documents(october)]
    assert [d["url"] for d in docs[old.counts["docs"] :]] == [p.url for p in expected]
    assert len(expected) == 50 and new.counts["articles"] == 50 and new.counts["docs"] == 292 + 50
    assert {d["date"].month for d in docs[old.counts["docs"] :]} == {11}
    # the same articles as an ingest of both months at once
    both = ingest([str(p) for m in months for p in m.files], str(tmp_path / "both"))
    assert [d["doc_id"] for d in documents(both)] == [d["doc_id"] for d in docs]
    # a month backfilled again adds nothing
    assert ingest([str(p) for p in months[1].files], store, extends=november) == november
    assert ingest([str(p) for p in months[1].files], store, extends=october) == november


def test_a_corpus_is_extended_by_inputs_of_its_tokenizer_and_block_length_only(months, october, news_path):
    store = october.rsplit("/corpus/", 1)[0]
    crawl, both = open_corpus(october), open_corpus(ingest([news_path], store, extends=october))
    assert [s.name for s in both.sources] == [*(s.name for s in crawl.sources), source_name(news_path)]
    assert both.sources[0] == crawl.sources[0]  # the crawl's source carried over as it was, shard for shard
    with pytest.raises(CorpusError, match="cannot be extended: it has max_tokens 256, not 128"):
        ingest([str(months[1].files[0])], store, IngestConfig(max_tokens=128), extends=october)
    with pytest.raises(CorpusError, match="cannot be extended: it has lang 'en', not 'bg'"):
        ingest([str(months[1].files[0])], store, IngestConfig(lang="bg"), extends=october)


def test_cli_ingests_a_real_crawl_and_refuses_it_cut_in_half(tmp_path, prefect_server):
    runner = CliRunner()
    crawl = PYWB / "example-wget-1-14.warc.gz"
    result = runner.invoke(app, ["ingest", str(crawl), "--store", str(tmp_path / "store"), "--workers", "1"])
    assert result.exit_code == 0, result.output
    (doc,) = documents(result.output.strip().splitlines()[-1])
    assert (doc["title"], doc["url"]) == ("Example Domain", "http://example.com/")
    assert doc["text"].startswith("This domain is established to be used for illustrative examples")
    half = tmp_path / crawl.name
    half.write_bytes(crawl.read_bytes()[: crawl.stat().st_size // 2])
    cut = runner.invoke(app, ["ingest", str(half), "--store", str(tmp_path / "cut"), "--workers", "1"])
    assert cut.exit_code == 2, cut.output
    (message,) = [line for line in cut.output.splitlines() if line.startswith("error: ")]  # one line, unfolded
    assert f"{half}: record at byte 792 is truncated (853 of its 1591 bytes missing" in message
    assert list_snapshots(str(tmp_path / "cut"), "corpus") == []
