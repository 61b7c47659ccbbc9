"""Web crawls (CC-News): the articles of the HTML pages in WARC and ARC files.

A file is streamed in constant memory with ``warcio``, record by record. A *page* is a
``response`` record with HTTP status 200 and an HTML content type; every other record
(requests, ``warcinfo``, ``metadata``, ``revisit``, images, scripts, redirects, 404s) is
counted and passed over. A page's main content is extracted with ``trafilatura``
(``favor_precision``, no comments or tables: on the news pages of ``tests/news_warc.py`` it kept
every article word and none of the boilerplate, where resiliparse kept almost a quarter of the
boilerplate phrases; docs/cc-news.md), its ``<title>`` becomes the title, and a language
detector (``py3langid``) keeps the pages in the wanted language.

Two kinds of bad input. A file whose records cannot be delimited (a cut or corrupt
compressed stream, a record shorter than its ``Content-Length``, a broken WARC header, a
gzip that is not one member per record) stops with a :class:`CorpusError` naming the file
and the record's byte offset: nothing after it could be trusted. A single record that can be
delimited but not read (an HTTP status line that does not parse, a payload declared HTML that
is binary or cannot be decoded, a missing record id, URI or date, a record id seen before in the
file) is a *bad record*: counted and skipped, or, with ``strict``, the same error.
"""

import functools
import logging
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import version

import fsspec
import py3langid
from warcio.archiveiterator import ArchiveIterator
from warcio.limitreader import LimitReader
from warcio.recordloader import ArcWarcRecord

from npmcore.corpus.readers import CorpusError, Document

log = logging.getLogger(__name__)

HTML_TYPES = ("text/html", "application/xhtml+xml")
# trafilatura is imported where pages are read (a second of every ingest's start, only crawls need it)
EXTRACTOR = f"trafilatura {version('trafilatura')} (favor_precision, no comments, no tables)"
_CHARSET = re.compile(r"charset\s*=\s*[\"']?([\w.:-]+)", re.I)


class BadRecord(ValueError):
    """A record that can be delimited but not read as a page."""


@dataclass(frozen=True)
class Page:
    """An HTML page of a crawl: a ``response`` record with status 200."""

    offset: int  # byte offset of its record in the file (of its gzip member in a .warc.gz)
    record_id: str  # WARC-Record-ID without <>, or for an ARC record its offset
    url: str
    date: datetime  # WARC-Date (ARC: archive date), UTC
    html: str


@dataclass(frozen=True, kw_only=True)
class Article(Document):
    """The article of a page; ``doc_id`` is its record id."""

    url: str
    date: datetime  # UTC


@dataclass(frozen=True)
class WarcCounts:
    """What one file held."""

    records: int = 0  # WARC/ARC records
    pages: int = 0  # HTTP 200 responses with an HTML content type
    bad_records: int = 0  # pages (or response records) that could not be read: skipped
    no_article: int = 0  # pages the extractor found no main text in
    other_language: int = 0  # articles in another language than the one asked for


@functools.cache
def languages() -> frozenset[str]:
    """The ISO 639-1 codes the language detector knows."""
    return frozenset(lang for lang, _ in py3langid.rank(""))


def check_language(lang: str) -> str:
    """``lang`` if the detector knows it, else a :class:`CorpusError`."""
    if lang not in languages():
        raise CorpusError(f"unknown language {lang!r}: expected an ISO 639-1 code the detector knows (en, de, fr, …)")
    return lang


def language(text: str) -> str:
    """ISO 639-1 code of the language ``text`` is written in."""
    return py3langid.classify(text)[0]


def extract(html: str) -> tuple[str, str] | None:
    """(title, main text) of an HTML page; None when it holds no main text. The title is the
    page's ``<title>``, whitespace collapsed ("" without one)."""
    import trafilatura

    tree = trafilatura.load_html(html)
    if tree is None:
        return None
    title = " ".join((tree.findtext(".//title") or "").split())
    text = trafilatura.extract(tree, favor_precision=True, include_comments=False, include_tables=False)
    return (title, text.strip()) if text and text.strip() else None


def _date(value: str | None) -> datetime:
    """A WARC-Date (ISO 8601) or an ARC archive date (14 digits, some writers add more), in UTC."""
    if not value:
        raise BadRecord("it has no date")
    try:
        if value[:14].isdigit():
            return datetime.strptime(value[:14], "%Y%m%d%H%M%S").replace(tzinfo=UTC)
        date = datetime.fromisoformat(value)
    except ValueError:
        raise BadRecord(f"its date {value!r} does not parse") from None
    return date.replace(tzinfo=UTC) if date.tzinfo is None else date.astimezone(UTC)


def _status(record: ArcWarcRecord) -> int:
    statusline = record.http_headers.statusline if record.http_headers is not None else None
    if not statusline:
        raise BadRecord("it has no HTTP status line")
    code = statusline.split(" ", 1)[0]
    if not code.isdigit() or len(code) != 3:
        raise BadRecord(f"its HTTP status line {statusline!r} does not parse")
    return int(code)


def _content_type(record: ArcWarcRecord) -> str:
    """The HTTP Content-Type (an ARC record without one: its header's)."""
    return record.http_headers.get_header("Content-Type") or record.rec_headers.get_header("content-type") or ""


def _html(record: ArcWarcRecord, content_type: str) -> str:
    """The decoded HTML of a page (its HTTP charset, else trafilatura's detection)."""
    try:
        body = record.content_stream().read()
    except OSError:  # reading the file failed: not the record's fault
        raise
    except Exception as e:  # a content or transfer encoding that does not decode (zlib, brotli, chunks)
        raise BadRecord(f"its body does not decode ({type(e).__name__}: {e})") from e
    if b"\x00" in body[:4096]:
        raise BadRecord("its payload is declared HTML but is binary")
    charset = _CHARSET.search(content_type)
    if charset:
        try:
            return body.decode(charset.group(1), errors="replace")
        except LookupError:
            pass
    from trafilatura.utils import decode_file

    return decode_file(body)


def _page(record: ArcWarcRecord, offset: int) -> Page | None:
    """The page a record holds: None for a record that is not an HTML 200 response."""
    if record.rec_type != "response" or record.http_headers is None:  # not HTTP (a DNS lookup, say)
        return None
    status = _status(record)
    content_type = _content_type(record)
    if status != 200 or content_type.split(";")[0].strip().lower() not in HTML_TYPES:
        return None
    headers = record.rec_headers
    if record.format == "arc":
        record_id, url, date = str(offset), headers.get_header("uri"), _date(headers.get_header("archive-date"))
    else:
        record_id = (headers.get_header("WARC-Record-ID") or "").strip("<>")
        url, date = headers.get_header("WARC-Target-URI"), _date(headers.get_header("WARC-Date"))
    if not record_id or not url:
        raise BadRecord("it has no record id or no target URI")
    return Page(offset, record_id, url, date, _html(record, content_type))


def _drain(record: ArcWarcRecord, url: str, offset: int) -> None:
    """Read what is left of a record and check that it was all there."""
    declared = record.rec_headers.get_header("length" if record.format == "arc" else "Content-Length") or ""
    if not declared.strip().isdigit() or not isinstance(record.raw_stream, LimitReader):
        raise CorpusError(f"{url}: record at byte {offset}: its header has no valid length ({declared!r})")
    while record.raw_stream.read(1 << 16):
        pass
    if record.raw_stream.limit:
        raise CorpusError(
            f"{url}: record at byte {offset} is truncated ({record.raw_stream.limit} of its "
            f"{record.length} bytes missing: the file was cut or its compressed stream is corrupt)"
        )


def _check_end(f, url: str, last: int, end: int) -> None:
    """The file must end with its last record (at byte ``last``; warcio read up to ``end``). A file
    cut inside a gzip member's trailer, or inside the header of the record after, reads without an
    error from warcio."""
    f.seek(last)
    tail = f.read()
    if tail.startswith(b"\x1f\x8b"):
        member = zlib.decompressobj(wbits=31)
        member.decompress(tail)
        if member.eof and not member.unused_data:
            return
        cut = last if not member.eof else last + len(tail) - len(member.unused_data)
    elif not tail[end - last :].strip():
        return
    else:
        cut = end
    raise CorpusError(f"{url}: record at byte {cut} is truncated (the file ends inside it)")


def iter_records(url: str, strict: bool) -> Iterator[Page | BadRecord | None]:
    """One item per record of a WARC or ARC file (``.gz`` or not), in order, streamed: its
    :class:`Page`, None for a record that is not a page, or a :class:`BadRecord` (with
    ``strict``, a bad record raises a :class:`CorpusError` instead)."""
    with fsspec.open(url, "rb") as f:  # raw bytes: warcio decompresses gzip members itself
        stream = ArchiveIterator(f)
        records = iter(stream)
        offset = count = 0
        seen: set[str] = set()  # record ids of the pages: a document's id within its file
        while (record := _next(records, stream, url, offset)) is not None:
            offset = stream.offset
            count += 1
            try:
                page = _page(record, offset)
                if page is not None and page.record_id in seen:
                    raise BadRecord(f"its record id {page.record_id} is an earlier record's")
            except BadRecord as e:
                if strict:
                    raise CorpusError(f"{url}: record at byte {offset}: {e}") from None
                log.warning("%s: record at byte %d skipped: %s", url, offset, e)
                page = e
            if isinstance(page, Page):
                seen.add(page.record_id)
            _drain(record, url, offset)
            yield page
        if not count:
            raise CorpusError(f"{url}: no WARC or ARC record in it")
        _check_end(f, url, offset, stream.offset)


def _next(records: Iterator[ArcWarcRecord], stream: ArchiveIterator, url: str, offset: int) -> ArcWarcRecord | None:
    """The next record (None at the end), or a :class:`CorpusError` naming where the file broke."""
    try:
        record = next(records, None)
    except OSError:  # reading the file failed (a transient error on a remote store, say): not the file's fault
        raise
    except Exception as e:  # warcio's own errors, and what a header it cannot parse makes it raise
        reason = " ".join(str(e).split()) or type(e).__name__
        if "non-chunked gzip" in reason:
            raise CorpusError(
                f"{url}: not one gzip member per record as a .warc.gz must be (`warcio recompress IN OUT` fixes it)"
            ) from e
        raise CorpusError(f"{url}: record at byte {stream.offset}: not a readable WARC or ARC record ({reason})") from e
    if stream.err_count:  # counted while the blank lines after the previous record were read
        raise CorpusError(f"{url}: record at byte {offset}: its Content-Length does not match its block")
    return record


def read_articles(url: str, source: str, lang: str, strict: bool) -> tuple[list[Article], WarcCounts]:
    """The articles in language ``lang`` of a WARC or ARC file, in record order, and its counts."""
    articles: list[Article] = []
    records = pages = bad = no_article = other_language = 0
    for item in iter_records(url, strict):
        records += 1
        if item is None:
            continue
        pages += 1
        if isinstance(item, BadRecord):
            bad += 1
            continue
        found = extract(item.html)
        if found is None:
            no_article += 1
        elif language(found[1]) != lang:
            other_language += 1
        else:
            articles.append(Article(item.record_id, found[0], found[1], source, url=item.url, date=item.date))
    return articles, WarcCounts(records, pages, bad, no_article, other_language)
