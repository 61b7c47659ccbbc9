"""Incremental backfill: a second version of a dump (articles edited, added, deleted) reuses
the first version's vectors for unchanged blocks and its trained index; both stay queryable.
A month of CC-News WARC files extends the corpus: only its new articles are embedded."""

import bz2
import re
from datetime import date

import faiss
import numpy as np
import pytest
from conftest import PYWB
from news_warc import write_news_months
from reference import unique_articles
from typer.testing import CliRunner

from flows.backfill import BackfillParams, dump_format
from flows.cli import app
from npmcore.answer.inference import NPM, InferenceConfig
from npmcore.corpus.ingest import ingest
from npmcore.corpus.partitions import IngestConfig
from npmcore.corpus.readers import CorpusError, iter_wiki_pages
from npmcore.index.datastore import build_datastore
from npmcore.index.faiss_index import read_index, sa_encode, stored_codes
from npmcore.serve.serving import read_serving
from npmcore.snapshots import iter_shards, open_index, read_blocks
from npmcore.storage import open_snapshot


def dump_versions(path: str, folder) -> tuple[str, str, str, str]:
    """Two small dumps cut from the gensim sample: v2 edits one article, deletes one and
    adds one. Returns (v1 path, v2 path, the deleted title, the added title)."""
    xml = bz2.open(path, "rt", encoding="utf-8").read()
    head, footer = xml[: xml.index("<page>")], "</mediawiki>\n"
    pages = re.findall(r"<page>.*?</page>", xml, flags=re.S)
    articles = [p for p in pages if "#REDIRECT" not in p and "disambig" not in p.lower() and 3_000 < len(p) < 12_000][
        :7
    ]
    title = [re.search(r"<title>(.*?)</title>", p).group(1) for p in articles]
    edited = articles[0].replace("</text>", "\nIn 2026 the article was edited by the backfill test.</text>")
    v1 = head + "".join(articles[:6]) + footer
    v2 = head + edited + "".join(articles[2:7]) + footer
    (folder / "v1.xml").write_text(v1, encoding="utf-8")
    (folder / "v2.xml").write_text(v2, encoding="utf-8")
    return str(folder / "v1.xml"), str(folder / "v2.xml"), title[1], title[6]


def printed_index(output: str) -> str:
    """The index URL the command printed (Prefect may log after it when the server stops)."""
    return next(line for line in reversed(output.splitlines()) if "/index/" in line and " " not in line)


def hashes(corpus: str) -> list[str]:
    return [h for t in read_blocks(corpus, ["content_hash"]) for h in t.column("content_hash").to_pylist()]


def vectors_by_block(datastore: str) -> list[np.ndarray]:
    out = []
    for _, arrays in iter_shards(datastore):
        offsets = arrays["offsets"]
        out += [
            np.asarray(arrays["vectors"][offsets[i] : offsets[i + 1]], dtype=np.float32)
            for i in range(len(offsets) - 1)
        ]
    return out


def test_an_ingest_with_the_previous_dump_copies_unchanged_pages_and_gives_the_same_snapshot(dump_path, tmp_path):
    v1, v2, _, _ = dump_versions(dump_path, tmp_path)
    config = IngestConfig(pages_per_partition=2)
    previous = ingest([v1], str(tmp_path / "a"), config)
    full = ingest([v2], str(tmp_path / "b"), config)
    shards = []
    incremental = ingest([v2], str(tmp_path / "a"), config, on_shard=shards.append, previous=previous)
    assert open_snapshot(incremental).files == open_snapshot(full).files  # byte for byte
    assert open_snapshot(incremental).id == open_snapshot(full).id
    old = {(p.page_id, p.title, p.wikitext) for p, _, _ in iter_wiki_pages(v1)}
    unchanged = [(p.page_id, p.title, p.wikitext) in old for p, _, _ in iter_wiki_pages(v2)]
    assert 0 < sum(unchanged) < len(unchanged)
    assert sum(r.reused_docs for r in shards) == sum(unchanged)  # brute force: pages identical in both dumps


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_backfill_embeds_only_new_blocks_and_keeps_both_versions_queryable(dump_path, tmp_path):
    v1, v2, deleted, added = dump_versions(dump_path, tmp_path)
    store = str(tmp_path / "store")
    runner = CliRunner()
    first = runner.invoke(app, ["backfill", v1, "--date", "2026-01-01", "--store", store])
    assert first.exit_code == 0, first.output
    old_index = printed_index(first.output)
    second = runner.invoke(app, ["backfill", v2, "--date", "2026-02-01", "--store", store])
    assert second.exit_code == 0, second.output
    new_index = printed_index(second.output)
    # the first build of the store is served, and each backfill that followed the served index replaces it
    pointer = read_serving(store)
    assert (pointer.index, pointer.previous) == (new_index, [old_index])
    assert "served (npmcore api): this index" in second.output

    old, new = open_index(old_index, verify=True), open_index(new_index, verify=True)
    old_ds, new_ds = (open_snapshot(i.datastore) for i in (old, new))
    old_hashes, new_hashes = hashes(old.corpus), hashes(new.corpus)
    unchanged = [h in set(old_hashes) for h in new_hashes]
    assert 0 < sum(unchanged) < len(new_hashes)
    assert new_ds.counts["reused_blocks"] == sum(unchanged)  # only new and changed blocks were embedded
    assert (
        new.manifest.config["trained"] == old_index and new.manifest.config["factory"] == old.manifest.config["factory"]
    )

    # reused vectors are the old ones; all of them match a full build of the new corpus
    old_vectors = dict(zip(old_hashes, vectors_by_block(old.datastore), strict=True))
    new_vectors = vectors_by_block(new.datastore)
    full = vectors_by_block(build_datastore(new.corpus, str(tmp_path / "full")))
    for h, mine, reference in zip(new_hashes, new_vectors, full, strict=True):
        if h in old_vectors:
            assert np.array_equal(mine, old_vectors[h])
        np.testing.assert_allclose(mine, reference, atol=0.05)
    assert open_snapshot(old.datastore).id == old_ds.id  # the old snapshots are untouched

    # unchanged blocks copy the old index's codes; the others are the codes of their vectors
    old_codes, new_codes = (
        stored_codes(index, np.arange(index.ntotal))
        for index in (read_index(f"{url}/index.faiss") for url in (old_index, new_index))
    )
    trained = faiss.read_index(f"{new_index}/trained.faiss")
    old_rows = dict(zip(old_hashes, np.split(old_codes, np.cumsum([len(v) for v in old_vectors.values()])[:-1])))
    new_rows = np.split(new_codes, np.cumsum([len(v) for v in new_vectors])[:-1])
    fresh = [(mine, vectors) for h, mine, vectors in zip(new_hashes, new_rows, new_vectors) if h not in old_rows]
    assert all(np.array_equal(mine, old_rows[h]) for h, mine in zip(new_hashes, new_rows) if h in old_rows)
    encoded = np.concatenate([mine for mine, _ in fresh]) == sa_encode(trained, np.concatenate([v for _, v in fresh]))
    assert encoded.all(axis=1).mean() > 0.99  # but for a tie broken by rounding

    # the deleted article answers from the old index only; the added one from the new only
    titles = {
        i.url: {t for tb in read_blocks(i.corpus, ["title"]) for t in tb.column("title").to_pylist()}
        for i in (old, new)
    }
    assert deleted in titles[old_index] and deleted not in titles[new_index]
    assert added in titles[new_index] and added not in titles[old_index]
    query = f"{deleted} is [MASK]."
    config = InferenceConfig(passages=3)
    evidence_titles = {}
    for url in (old_index, new_index):
        npm = NPM(url)
        evidence_titles[url] = {
            npm.evidence.passage(b).title for b in npm.retrieval.bm25_blocks(query, config.passages)
        }
        assert npm.predict([query], config)[0]
    assert deleted in evidence_titles[old_index] and deleted not in evidence_titles[new_index]

    missing = runner.invoke(app, ["backfill", str(tmp_path / "nope.xml"), "--date", "2026-03-01", "--store", store])
    assert missing.exit_code == 2 and "nope.xml: no such file or folder" in " ".join(missing.output.split())


def wikiextractor_docs(text: str, keep: set[str]) -> str:
    """The ``<doc id=…>`` … ``</doc>`` entries of WikiExtractor text whose page id is in ``keep``."""
    docs = re.findall(r'<doc id="(\d+)".*?</doc>\n', text, flags=re.S)
    entries = re.findall(r'<doc id="\d+".*?</doc>\n', text, flags=re.S)
    return "".join(e for i, e in zip(docs, entries, strict=True) if i in keep)


def test_a_wikiextractor_dump_backfills_an_index_of_bm25_alone(tmp_path):
    """Articles of the May 2015 dump, then the same articles of the September 2020 dump backfilled over
    their index of BM25 alone: the new index holds BM25 alone, nothing embedded, and a fact that changed
    between the dumps is written in the passages each index searches as its own dump writes it."""
    from npmcore.corpus.readers import read_wikiextractor
    from npmcore.evaluation.dumps import dump_file_text
    from npmcore.evaluation.metrics import in_passages
    from npmcore.evaluation.temporal import aligned, candidates

    try:
        old_text, new_text = (dump_file_text(f"{d}/AA/wiki_00") for d in ("2015-05", "2020-09"))
    except FileNotFoundError as e:
        pytest.skip(str(e))
    old_docs, new_docs = ({d.doc_id: d for d in read_wikiextractor(t, "wiki_00")} for t in (old_text, new_text))
    changed, _ = candidates(aligned(old_docs, new_docs))
    keep = sorted({f.page_id for f in changed})[:4]  # a few articles, each with a changed fact
    paths = []
    for name, text in (("2015-05", old_text), ("2020-09", new_text)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "wiki_00").write_text(wikiextractor_docs(text, set(keep)), encoding="utf-8")
        paths.append(str(tmp_path / name / "wiki_00"))
    store = str(tmp_path / "store")
    runner = CliRunner()
    ingested = runner.invoke(app, ["ingest", paths[0], "--store", store])
    assert ingested.exit_code == 0, ingested.output
    indexed = runner.invoke(app, ["index", "--bm25-only", "--store", store])
    assert indexed.exit_code == 0 and "BM25 alone" in indexed.output, indexed.output
    old_index = printed_index(indexed.output)
    assert read_serving(store).index == old_index  # the store's first index is served
    args = ["backfill", paths[1], "--date", "2020-09-01", "--previous", old_index, "--store", store]
    backfilled = runner.invoke(app, [*args, "--no-serve"])
    assert backfilled.exit_code == 0, backfilled.output
    assert "BM25 alone: nothing embedded" in backfilled.output
    new_index = printed_index(backfilled.output)
    assert read_serving(store).index == old_index and f"served (npmcore api): {old_index}" in backfilled.output
    assert printed_index(runner.invoke(app, args).output) == new_index  # nothing to do again, but it is served now
    assert read_serving(store).index == new_index
    old, new = open_index(old_index, verify=True), open_index(new_index, verify=True)
    assert not old.vectors and not new.vectors and old.corpus != new.corpus
    assert new.manifest.counts["blocks"] == sum(1 for t in read_blocks(new.corpus, ["title"]) for _ in t.column(0))
    searched = {url: NPM(url) for url in (old_index, new_index)}
    for fact in (f for f in changed if f.page_id in keep):
        before = searched[old_index].retrieval.passages(fact.query, 3)
        after = searched[new_index].retrieval.passages(fact.query, 3)
        assert in_passages(fact.answers_2020, after) and not in_passages(fact.answers_2020, before), fact


def test_a_backfill_takes_one_dump_or_a_month_of_warc_files(dump_path, tmp_path):
    old = BackfillParams(dump=dump_path, dump_date="2026-01-01")  # a deployment's parameters before WARC files
    assert old.dump == [dump_path] and old.dump_date == date(2026, 1, 1)
    month = BackfillParams(dump=["a.warc.gz", "b.warc.gz"], dump_date="2026-11")
    assert month.dump == ["a.warc.gz", "b.warc.gz"] and month.dump_date == date(2026, 11, 1)
    crawl = str(PYWB / "example-wget-1-14.warc.gz")
    assert (dump_format([dump_path]), dump_format([crawl])) == ("mediawiki", "warc")
    with pytest.raises(CorpusError, match="takes MediaWiki dump files, WikiExtractor output .* not mediawiki and warc"):
        dump_format([dump_path, crawl])


@pytest.mark.slow
@pytest.mark.timeout(1800)  # two index builds on two shared cores
def test_backfilling_a_month_of_news_embeds_only_its_new_articles(tmp_path):
    october, november = write_news_months(tmp_path / "cc-news", articles=40)  # 40 in October: a short index build
    store = str(tmp_path / "store")
    runner = CliRunner()
    first = runner.invoke(app, ["backfill", *map(str, october.files), "--date", "2026-10", "--store", store])
    assert first.exit_code == 0, first.output
    second = runner.invoke(app, ["backfill", *map(str, november.files), "--date", "2026-11", "--store", store])
    assert second.exit_code == 0, second.output
    old, new = open_index(printed_index(first.output)), open_index(printed_index(second.output))
    assert open_snapshot(new.corpus).config["extends"] == open_snapshot(old.corpus).id
    kept = unique_articles([p for p in october.articles if p.kind != "foreign"])
    added = unique_articles([p for p in november.articles if p.kind != "foreign"], kept)
    assert open_snapshot(new.corpus).counts["articles"] == len(added) == 50  # November's own 50 articles
    old_hashes, new_hashes = hashes(old.corpus), hashes(new.corpus)
    assert new_hashes[: len(old_hashes)] == old_hashes  # October's blocks, then November's new articles
    assert open_snapshot(new.datastore).counts["reused_blocks"] == len(old_hashes)  # only November's are embedded
    assert new.manifest.config["trained"] == old.url
    again = runner.invoke(app, ["backfill", *map(str, november.files), "--date", "2026-11", "--store", store])
    assert again.exit_code == 0 and printed_index(again.output) == new.url  # a month backfilled twice adds nothing
