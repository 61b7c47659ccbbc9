"""Corpus readers on real samples: the gensim Wikipedia dump, WikiExtractor output, news; format detection."""

import bz2
import gzip
import json
import re
from pathlib import Path

import mwxml
import pytest
from conftest import PYWB

from npmcore.corpus.ingest import documents, ingest, plan_partitions
from npmcore.corpus.inputs import expand_inputs
from npmcore.corpus.partitions import IngestConfig
from npmcore.corpus.readers import (
    CorpusError,
    Document,
    detect_format,
    input_wiki,
    iter_wiki_pages,
    page_url,
    read_jsonl,
    read_lines,
    read_wikiextractor,
)
from npmcore.storage import list_snapshots


def test_dump_reader_keeps_main_namespace_articles_only(dump_path):
    pages = [p for p, _, _ in iter_wiki_pages(dump_path)]
    with bz2.open(dump_path) as f:
        raw = [(p.title, p.namespace, p.redirect) for p in mwxml.Dump.from_file(f)]
    expected = [title for title, ns, redirect in raw if ns == 0 and not redirect]
    assert [p.title for p in pages] == expected
    assert len(expected) < len(raw)  # the sample has pages outside the main namespace


def test_dump_text_is_plain_and_disambiguation_pages_are_skipped(dump_path, dump_documents):
    pages = [page for page, _, _ in iter_wiki_pages(dump_path)]
    disambiguation = [
        p.title for p in pages if "{{disambiguation" in p.wikitext.lower() or p.title.endswith("(disambiguation)")
    ]
    assert disambiguation and not set(dump_documents) & set(disambiguation)
    assert dump_documents["Anarchism"].startswith("Anarchism is a political philosophy")
    for title, text in dump_documents.items():
        assert not re.search(r"\[\[|\]\]|\{\{|\}\}|<ref|thumb\||Category:|''", text), title


def test_wikiextractor_reader(enwiki_shard):
    text = open(enwiki_shard, encoding="utf-8").read()
    docs = list(read_wikiextractor(text, "wiki_00"))
    headers = re.findall(r'<doc id="(\d+)" url="[^"]*" title="([^"]*)">', text)
    assert [(d.doc_id, d.title) for d in docs] == [
        (i, t.replace("&amp;", "&").replace("&quot;", '"')) for i, t in headers
    ]
    assert len({d.doc_id for d in docs}) == len(docs)
    assert docs[0].text == ""  # real dumps have articles with no text: they are read, then skipped
    first = docs[1]
    assert first.text.startswith("Jarred Shaw (born September 28, 1990)")  # the repeated title line is dropped
    assert first.text in text


def test_lines_reader_ids_are_byte_offsets(news_path):
    data = open(news_path, "rb").read()
    docs = list(read_lines(data.decode(), "lee", 0))
    assert len(docs) == sum(1 for line in data.splitlines() if line.strip())
    for doc in docs:
        assert data[int(doc.doc_id) :].decode().startswith(doc.text)


def test_jsonl_reader(tmp_path, news_path):
    lines = open(news_path).read().splitlines()[:5]
    path = tmp_path / "news.jsonl"
    path.write_text(
        "".join(json.dumps({"id": f"n{i}", "title": f"News {i}", "text": t}) + "\n" for i, t in enumerate(lines))
    )
    docs = list(read_jsonl(path.read_text(), "news", 0))
    assert [(d.doc_id, d.title, d.text) for d in docs] == [(f"n{i}", f"News {i}", t) for i, t in enumerate(lines)]
    assert detect_format(str(path)) == "jsonl"


def as_json_lines(docs: list[Document], wiki: str) -> str:
    """The documents as WikiExtractor --json writes them (its keys in its order)."""
    return "".join(
        json.dumps({"id": d.doc_id, "revid": "1", "url": f"https://{wiki}/wiki?curid={d.doc_id}", "title": d.title,
                    "text": d.text}) + "\n"
        for d in docs
    )  # fmt: skip


def test_wikiextractor_json_is_told_apart_by_content_and_read_as_its_doc_form(tmp_path):
    from npmcore.evaluation.dumps import dump_file_text

    text = dump_file_text("2020-09/AA/wiki_00")  # <doc> form, English Wikipedia's URLs
    docs = list(read_wikiextractor(text, "wiki_00"))
    assert {d.wiki for d in docs} == {"en.wikipedia.org"} and docs[0].key == f"en.wikipedia.org:{docs[0].doc_id}"
    path = tmp_path / "wiki_00"  # the same pages, as --json writes them: no suffix says which
    path.write_text(as_json_lines(docs, "en.wikipedia.org"), encoding="utf-8")
    renamed = tmp_path / "pages.jsonl"  # not even a .jsonl name: the keys say it
    renamed.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    for form in (path, renamed):
        assert (
            detect_format(str(form)) == "wikiextractor" and input_wiki(str(form), "wikiextractor") == "en.wikipedia.org"
        )
        assert list(read_wikiextractor(form.read_text(encoding="utf-8"), "wiki_00")) == docs


def test_simple_english_wikipedia_pages_are_of_their_own_wiki(simplewiki_shard):
    rows = [json.loads(line) for line in open(simplewiki_shard, encoding="utf-8")]
    docs = list(read_wikiextractor(open(simplewiki_shard, encoding="utf-8").read(), "wiki_00", simplewiki_shard))
    assert [(d.doc_id, d.title, d.text) for d in docs] == [(r["id"], r["title"], r["text"].strip()) for r in rows]
    assert {d.wiki for d in docs} == {"simple.wikipedia.org"}
    apple = next(d for d in docs if d.doc_id == "39")  # English Wikipedia's page 39 is Albedo
    assert (apple.title, apple.key) == ("Apple", "simple.wikipedia.org:39")
    assert page_url(apple.wiki, "Autonomous communities of Spain") == (
        "https://simple.wikipedia.org/wiki/Autonomous_communities_of_Spain"
    )


def test_a_bad_json_line_is_named_by_file_and_line_and_nothing_is_published(tmp_path, simplewiki_shard):
    lines = open(simplewiki_shard, encoding="utf-8").read().splitlines(keepends=True)[:40]
    cut = lines[30][:80] + "\n"  # a record cut short, as a copy that stopped would leave it
    bad = tmp_path / "wiki_07"
    bad.write_text("".join(lines[:30] + [cut] + lines[31:]), encoding="utf-8")
    store = str(tmp_path / "store")
    with pytest.raises(CorpusError, match=rf"^{bad}, line 31: not a WikiExtractor --json record"):
        ingest([str(bad)], store, IngestConfig(partition_bytes=50_000))
    assert list_snapshots(store, "corpus") == [] and not list((tmp_path / "store").glob("corpus/*/manifest.json"))
    english = lines[:5] + [lines[5].replace("simple.wikipedia.org", "en.wikipedia.org")]
    mixed = tmp_path / "wiki_08"
    mixed.write_text("".join(english), encoding="utf-8")
    with pytest.raises(
        CorpusError, match=r"wiki_08: page \d+ .* is of en.wikipedia.org, the file's first page of simple"
    ):
        ingest([str(mixed)], store)
    with pytest.raises(
        CorpusError, match=r"notes: not WikiExtractor output \(neither <doc …> blocks nor --json lines\)"
    ):
        list(read_wikiextractor("these are notes\n", "notes"))


@pytest.mark.parametrize("fmt", ["wikiextractor", "wikiextractor --json", "lines"])
def test_byte_range_partitions_read_every_document_once(fmt, enwiki_shard, news_path, tmp_path):
    url = enwiki_shard if fmt.startswith("wikiextractor") else news_path
    if fmt == "wikiextractor --json":  # its records end at a line, not at </doc>
        url = str(tmp_path / "wiki_00")
        Path(url).write_text(
            as_json_lines(list(read_wikiextractor(open(enwiki_shard).read(), "x")), "en.wikipedia.org")
        )
        fmt = "wikiextractor"
    whole = list(documents(next(plan_partitions([url], [fmt], IngestConfig(partition_bytes=1 << 40)))))
    parts = list(plan_partitions([url], [fmt], IngestConfig(partition_bytes=20_000)))
    assert len(parts) > 10
    assert [d for p in parts for d in documents(p)] == whole


def test_detect_format(dump_path, enwiki_shard, news_path):
    assert [detect_format(u) for u in (dump_path, enwiki_shard, news_path)] == ["mediawiki", "wikiextractor", "lines"]


def test_bad_inputs_name_the_file_and_the_problem(tmp_path, dump_path):
    with pytest.raises(CorpusError, match="nope.xml: no such file"):
        expand_inputs([str(tmp_path / "nope.xml")])
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(CorpusError, match="empty.txt: empty file"):
        expand_inputs([str(empty)])
    truncated = tmp_path / "cut.xml.bz2"
    truncated.write_bytes(open(dump_path, "rb").read()[:200_000])
    with pytest.raises(CorpusError, match="cut.xml.bz2: truncated or corrupt"):
        list(iter_wiki_pages(str(truncated)))
    not_xml = tmp_path / "notes.xml"
    not_xml.write_text("these are notes, not a dump\n")
    with pytest.raises(CorpusError, match="notes.xml: not a MediaWiki XML dump"):
        list(iter_wiki_pages(str(not_xml)))
    with pytest.raises(CorpusError, match=r"bad.jsonl, byte 0: not a"):
        list(read_jsonl('{"title": "no id or text"}\n', "bad.jsonl", 0))
    with pytest.raises(CorpusError, match="has no closing"):
        list(read_wikiextractor('<doc id="1" url="u" title="T">\nT\ntext\n', "bad"))


def test_auto_detects_crawls_by_name_and_content_and_never_reads_binary_data_as_lines(tmp_path, news_path):
    crawl = PYWB / "example-wget-1-14.warc.gz"
    renamed = tmp_path / "crawl.dat"  # an uncompressed WARC under another name: its magic says it
    renamed.write_bytes(gzip.decompress(crawl.read_bytes()))
    arc = tmp_path / "old-crawl.dat"
    arc.write_bytes(gzip.decompress((PYWB / "example.arc.gz").read_bytes()))
    xml = tmp_path / "dump.txt"
    xml.write_text('<?xml version="1.0" encoding="utf-8"?>\n<mediawiki>\n')
    assert [detect_format(str(p)) for p in (crawl, renamed, arc, xml)] == ["warc", "warc", "warc", "mediawiki"]
    gz = tmp_path / "news.dat"
    gz.write_bytes(gzip.compress(open(news_path, "rb").read()))
    with pytest.raises(CorpusError, match="news.dat: .gz compressed data under a name that does not end in .gz"):
        detect_format(str(gz))
    image = tmp_path / "image.txt"
    image.write_bytes(b"GIF89a\x01\x00\x01\x00\x00\xff\x00,")
    with pytest.raises(CorpusError, match=r"image.txt: binary data or text that is not UTF-8 \(byte 7\)"):
        detect_format(str(image))
    latin = tmp_path / "news.cor"
    latin.write_bytes("The bill came to £5 million.\n".encode("latin-1"))
    with pytest.raises(CorpusError, match=r"news.cor: binary data or text that is not UTF-8 \(byte 17\)"):
        detect_format(str(latin))


@pytest.mark.parametrize("fmt", ["lines", "jsonl", "wikiextractor", "mediawiki", "warc"])
def test_a_truncated_gz_of_every_format_fails_with_its_name_and_leaves_no_snapshot(
    fmt, tmp_path, news_path, enwiki_shard, dump_path
):
    raw = {
        "lines": lambda: open(news_path, "rb").read(),
        "jsonl": lambda: "".join(
            json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(open(news_path))
        ).encode(),
        "wikiextractor": lambda: open(enwiki_shard, "rb").read(),
        "mediawiki": lambda: bz2.open(dump_path).read(),
        "warc": lambda: gzip.decompress((PYWB / "example-wget-1-14.warc.gz").read_bytes()),
    }[fmt]()
    name = {"lines": "news.txt.gz", "jsonl": "news.jsonl.gz", "wikiextractor": "wiki_00.gz"}.get(fmt, f"x.{fmt}.gz")
    data = (PYWB / "example-wget-1-14.warc.gz").read_bytes() if fmt == "warc" else gzip.compress(raw)
    cut = tmp_path / name.replace("x.mediawiki", "dump.xml")
    cut.write_bytes(data[: len(data) // 2])
    assert detect_format(str(cut)) == fmt
    with pytest.raises(CorpusError, match=rf"{cut.name}: .*(truncated|corrupt)"):
        ingest([str(cut)], str(tmp_path / "store"))
    assert list_snapshots(str(tmp_path / "store"), "corpus") == []
