"""Reading crawls: real crawler output (pywb's samples), every way a file can be cut, bad records,
the language filter, and the near-duplicate detector against brute-force Jaccard similarity."""

import gzip
import itertools
import shutil
import zlib
from datetime import UTC, datetime
from io import BytesIO
from pathlib import Path
from uuid import NAMESPACE_URL, uuid5

import pytest
from conftest import PYWB
from news_warc import SITES, bulgarian_articles, lee_articles, render
from reference import jaccard
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from npmcore.corpus.dedup import THRESHOLD, ArticleKey, Deduplicator, shingles, signature, text_hash
from npmcore.corpus.readers import CorpusError, detect_format
from npmcore.corpus.warc import WarcCounts, check_language, iter_records, read_articles

EXAMPLE_TEXT = (
    "This domain is established to be used for illustrative examples in documents. "
    "You may use this domain in examples without prior coordination or asking for permission."
)


def members(data: bytes) -> list[int]:
    """Start offsets of the gzip members of ``data``, and its end (zlib: an independent reference)."""
    starts = [0]
    while starts[-1] < len(data):
        member = zlib.decompressobj(wbits=31)
        member.decompress(data[starts[-1] :])
        starts.append(len(data) - len(member.unused_data))
    return starts


# file: records, the page's record id (ARC: its offset), URL and date, as the files' headers say
CRAWLS = {
    "example-wget-1-14.warc.gz": (
        6,
        "urn:uuid:4ce28b1a-3d22-4158-bb1d-5e21ad0d07da",
        "http://example.com/",
        "2014-02-16T01:29:08",
    ),
    "example-wpull.warc.gz": (
        4,
        "urn:uuid:44757ce4-94e1-4cd9-b2ef-e18bbd242c94",
        "http://example.com/",
        "2015-03-30T23:50:46",
    ),
    "example.warc.gz": (
        6,
        "urn:uuid:6d058047-ede2-4a13-be79-90c17c631dd4",
        "http://example.com?example=1",
        "2014-01-03T03:03:21",
    ),
    "example.arc.gz": (2, "171", "http://example.com/", "2014-02-16T05:02:21"),
}


@pytest.mark.parametrize("name", CRAWLS)
def test_real_crawls_give_the_example_page(name):
    records, record_id, url, date = CRAWLS[name]
    path = str(PYWB / name)
    assert detect_format(path) == "warc"
    articles, counts = read_articles(path, "crawl", "en", strict=True)
    assert counts == WarcCounts(records=records, pages=1)  # requests, warcinfo, metadata, revisits, a 302: no pages
    (article,) = articles
    assert (article.doc_id, article.title, article.url) == (record_id, "Example Domain", url)
    assert article.date == datetime.fromisoformat(date).replace(tzinfo=UTC)
    assert article.text == EXAMPLE_TEXT


def test_every_cut_of_a_warc_gz_fails_naming_the_file_and_record(tmp_path):
    data = (PYWB / "example-wget-1-14.warc.gz").read_bytes()
    starts = members(data)
    cut = tmp_path / "cut.warc.gz"
    near_members = {end for s in starts for end in range(s - 24, s + 24)}  # trailers and headers of gzip members
    for end in sorted({*range(1, len(data), 11), *near_members} & set(range(1, len(data)))):
        cut.write_bytes(data[:end])
        if end in starts:  # a cut between records is a shorter, valid file
            assert sum(1 for _ in iter_records(str(cut), strict=True)) == starts.index(end)
            continue
        record = max(s for s in starts if s < end)
        with pytest.raises(CorpusError, match=rf"^{cut}: (no WARC or ARC record in it|record at byte {record}\b)"):
            list(iter_records(str(cut), strict=False))


def test_a_cut_uncompressed_warc_fails_unless_only_blank_lines_are_missing(tmp_path):
    raw = gzip.decompress((PYWB / "example-wget-1-14.warc.gz").read_bytes())
    cut = tmp_path / "cut.warc"
    for end in range(1, len(raw), 7):
        cut.write_bytes(raw[:end])
        try:
            list(iter_records(str(cut), strict=False))
        except CorpusError as e:
            assert str(e).startswith(f"{cut}: ")
        else:  # every record read in full: only the blank lines after the last one are missing
            assert not raw[end:].split(b"WARC/1.0", 1)[0].strip()


def test_broken_files_stop_with_the_file_and_the_offset(tmp_path):
    data = (PYWB / "example-wget-1-14.warc.gz").read_bytes()
    starts = members(data)
    parts = [gzip.decompress(data[a:b]) for a, b in itertools.pairwise(starts)]
    parts[2] = parts[2].replace(b"WARC/1.0\r\n", b"WARX/1.0 garbage\r\n", 1)
    broken = tmp_path / "broken.warc.gz"
    broken.write_bytes(b"".join(gzip.compress(p, mtime=0) for p in parts))
    third = members(broken.read_bytes())[2]
    with pytest.raises(CorpusError, match=rf"broken.warc.gz: record at byte {third}: not a readable WARC or ARC"):
        list(iter_records(str(broken), strict=False))
    one_stream = tmp_path / "one-stream.warc.gz"
    shutil.copy(PYWB / "example-bad.warc.gz.bad", one_stream)
    with pytest.raises(CorpusError, match="one-stream.warc.gz: not one gzip member per record .*warcio recompress"):
        list(iter_records(str(one_stream), strict=False))
    with pytest.raises(CorpusError, match=r"bad.arc: record at byte 0: its header has no valid length \('-1'\)"):
        list(iter_records(str(PYWB / "bad.arc"), strict=False))
    junk = tmp_path / "junk.warc.gz"
    junk.write_bytes(gzip.compress(bytes(range(256)) * 8, mtime=0))
    with pytest.raises(CorpusError, match="junk.warc.gz: record at byte 0: not a readable WARC or ARC record"):
        list(iter_records(str(junk), strict=False))


def write_warc(path: Path, pages: list[tuple[str, str, bytes, str]]) -> list[int]:
    """A WARC of (url, HTTP status line, body, content type) responses, dated day by day, each with
    the record id uuid5(url); returns their offsets."""
    offsets = []
    with open(path, "wb") as f:
        writer = WARCWriter(f, gzip=True)
        for i, (url, status, body, ctype) in enumerate(pages):
            offsets.append(f.tell())
            headers = StatusAndHeaders(status, [("Content-Type", ctype)], protocol="HTTP/1.1")
            warc = {
                "WARC-Date": f"2026-10-0{i + 1}T12:00:00Z",
                "WARC-Record-ID": f"<urn:uuid:{uuid5(NAMESPACE_URL, url)}>",
            }
            record = writer.create_warc_record(
                url, "response", BytesIO(body), http_headers=headers, warc_headers_dict=warc
            )
            writer.write_record(record)
    return offsets


def test_bad_records_are_counted_and_skipped_or_stop_a_strict_read(tmp_path):
    background, _ = lee_articles()
    page = render(SITES[0], background[0], []).encode()
    path = tmp_path / "mixed.warc.gz"
    offsets = write_warc(
        path,
        [
            ("https://a.example/1", "200 OK", page, "text/html; charset=utf-8"),
            ("https://a.example/png", "200 OK", (PYWB / "bad.arc").read_bytes()[:40] + b"\x00\x89PNG", "text/html"),
            ("https://a.example/2", "two hundred", page, "text/html"),
            ("https://a.example/3", "200 OK", b"<html><body><script>x()</script></body></html>", "text/html"),
            ("https://a.example/4", "200 OK", page.replace(b"Hundreds", b"Thousands"), "application/xhtml+xml"),
            ("https://a.example/1", "200 OK", page, "text/html"),  # the first record again: its id repeats
        ],
    )
    articles, counts = read_articles(str(path), "mixed", "en", strict=False)
    assert counts == WarcCounts(records=6, pages=6, bad_records=3, no_article=1)
    assert [a.url for a in articles] == ["https://a.example/1", "https://a.example/4"]
    assert [a.date.day for a in articles] == [1, 5]
    with pytest.raises(
        CorpusError, match=rf"mixed.warc.gz: record at byte {offsets[1]}: its payload is declared HTML but is binary"
    ):
        read_articles(str(path), "mixed", "en", strict=True)


def test_language_filter_and_charsets(tmp_path):
    background, test = lee_articles()
    pound = next(t for t in test if "£" in t)
    bulgarian = bulgarian_articles(1)[0]
    path = tmp_path / "lang.warc.gz"
    latin = render(SITES[2], pound, []).encode("iso-8859-1")
    write_warc(
        path,
        [
            ("https://a.example/en", "200 OK", latin, "text/html; charset=iso-8859-1"),
            ("https://a.example/bg", "200 OK", render(SITES[0], bulgarian, [], "bg").encode(), "text/html"),
        ],
    )
    english, counts = read_articles(str(path), "lang", "en", strict=True)
    assert counts.other_language == 1 and "£" in english[0].text
    assert " ".join(english[0].text.split()).endswith(" ".join(pound.split()))  # the headline, then the article
    (bg,), _ = read_articles(str(path), "lang", "bg", strict=True)
    assert " ".join(bg.text.split()).endswith(" ".join(bulgarian.split()))
    with pytest.raises(CorpusError, match="unknown language 'english'"):
        check_language("english")


def test_near_duplicates_are_those_of_brute_force_jaccard(news_lines):
    """The Lee corpus has exact duplicates and two versions of a story (Jaccard 0.90); the next most
    similar pair is at 0.64. First seen wins, as in a brute-force pass over exact similarities."""
    _, test = lee_articles()
    texts = news_lines + test
    dedup = Deduplicator()
    verdicts = [dedup.add(ArticleKey(str(i), f"u{i}", text_hash(t), signature(t))) for i, t in enumerate(texts)]
    kept: list[int] = []
    expected = []
    sets = [shingles(t) for t in texts]
    for i, text in enumerate(texts):
        if any(" ".join(texts[k].split()) == " ".join(text.split()) for k in kept):
            expected.append("duplicate_text")
        elif any(jaccard(sets[k], sets[i]) >= THRESHOLD for k in kept):
            expected.append("near_duplicate")
        else:
            expected.append("kept")
            kept.append(i)
    assert verdicts == expected
    assert (verdicts.count("duplicate_text"), verdicts.count("near_duplicate")) == (7, 1)
    assert dedup.add(ArticleKey("x", "u0", "new text", signature("new text"))) == "duplicate_url"
