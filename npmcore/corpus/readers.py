"""Corpus readers: MediaWiki XML dumps, WikiExtractor output, jsonl and one-doc-per-line; format detection.

Readers turn raw inputs into :class:`Document` objects. Dumps are streamed with
``mwxml`` in constant memory and their wikitext is turned into plain text with
``mwparserfromhell``; the line-based formats are read in delimiter-aligned byte ranges
so one large file can be split across workers. Web crawls (format ``warc``) are read by
:mod:`npmcore.corpus.warc`.

A page of a wiki knows its wiki, the host of its URL (``en.wikipedia.org``, ``simple.wikipedia.org``):
page ids are per wiki, so its id in a corpus is ``{wiki}:{page id}`` (:attr:`Document.key`).
"""

import codecs
import html
import importlib.util
import json
import lzma
import re
import xml.etree.ElementTree
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import quote, urlsplit

import fsspec
import mwparserfromhell
import mwxml
from fsspec.compression import compr
from fsspec.utils import infer_compression
from mwparserfromhell.nodes import Tag, Wikilink

Format = Literal["mediawiki", "wikiextractor", "jsonl", "lines", "warc"]
FORMATS: tuple[Format, ...] = ("mediawiki", "wikiextractor", "jsonl", "lines", "warc")
WARC_NAMES = (".warc", ".warc.gz", ".arc", ".arc.gz")  # crawls (Common Crawl's CC-News: .warc.gz)
# What a cut or corrupt gzip, bz2 or xz stream raises while it is read (bz2: OSError "Invalid data stream")
COMPRESSION_ERRORS = (EOFError, OSError, zlib.error, lzma.LZMAError)
_COMPRESSED_MAGIC = {b"\x1f\x8b": ".gz", b"BZh": ".bz2", b"\xfd7zXZ": ".xz"}

# Templates that mark a disambiguation page (plus any template ending in "disambiguation").
_DISAMBIGUATION_TEMPLATES = {
    "disambiguation",
    "disambig",
    "dab",
    "disamb",
    "hndis",
    "geodis",
    "numberdis",
    "surname",
    "given name",
    "set index article",
    "sia",
}
_WIKIEXTRACTOR_OPEN = re.compile(r'<doc id="([^"]*)" url="([^"]*)" title="([^"]*)">\n')
_WIKIEXTRACTOR_CLOSE = "</doc>\n"
# WikiExtractor --json: one {"id", "revid", "url", "title", "text"} a line, its keys in that order ("revid" since 3.0)
_WIKIEXTRACTOR_JSON = re.compile(rb'\{"id": "[^"]*", (?:"revid": "[^"]*", )?"url": "')
_WIKIEXTRACTOR_KEYS = ("id", "url", "title", "text")


class CorpusError(ValueError):
    """An input cannot be read as the corpus format it was given as."""


@dataclass(frozen=True)
class Document:
    doc_id: str  # unique within its source (a wiki's page id)
    title: str  # "" when the source has none
    text: str  # plain text, paragraphs separated by newlines
    source: str  # the dump or collection it came from
    wiki: str = ""  # a wiki's page: its host ("simple.wikipedia.org"); "" for other documents

    @property
    def key(self) -> str:
        """The document's id in a corpus: ``{wiki}:{doc_id}`` for a wiki's page (Simple English page 12 is not
        English page 12), else ``doc_id``."""
        return f"{self.wiki}:{self.doc_id}" if self.wiki else self.doc_id


def wiki_of(url: str) -> str:
    """The wiki of a page's or a dump's URL: its host (``https://simple.wikipedia.org/wiki?curid=12`` ->
    ``simple.wikipedia.org``); "" when the URL names none."""
    return (urlsplit(url).hostname or "") if "://" in url else ""


def page_url(wiki: str, title: str) -> str:
    """The address of a wiki's article (``https://simple.wikipedia.org/wiki/Alan_Turing``)."""
    return f"https://{wiki}/wiki/{quote(title.replace(' ', '_'), safe='/:(),')}"


@dataclass(frozen=True)
class WikiPage:
    """A main-namespace, non-redirect page as it comes out of a dump (wikitext)."""

    page_id: int
    title: str
    wikitext: str
    wiki: str = ""  # its dump's wiki (the host of the site's base URL)


def source_name(url: str) -> str:
    """Source id of an input: its file name without compression/format suffixes."""
    name = url.rstrip("/").rsplit("/", 1)[-1]
    for suffix in (".bz2", ".gz", ".xz", ".xml", ".jsonl", ".json", ".txt", ".cor", ".warc", ".arc"):
        name = name.removesuffix(suffix)
    return name


def detect_format(url: str) -> Format:
    """Guess an input's format from its name, else from its first bytes (decompressed). Data that
    is not UTF-8 text (binary, or compressed under a name without its suffix) is refused, never
    read as lines."""
    name = url.rsplit("/", 1)[-1].lower()
    if name.endswith(WARC_NAMES):
        return "warc"
    if ".xml" in name:
        return "mediawiki"
    start = _head(url)
    head = start.lstrip()
    if head.startswith(b"{"):  # WikiExtractor --json by its keys, whatever the name, else any jsonl
        return "wikiextractor" if _WIKIEXTRACTOR_JSON.match(head) else "jsonl"
    if name.endswith((".jsonl", ".jsonl.gz", ".jsonl.bz2")):
        return "jsonl"
    if head.startswith((b"WARC/", b"filedesc://")):
        return "warc"
    if head.startswith((b"<mediawiki", b"<?xml")):
        return "mediawiki"
    if head.startswith(b"<doc "):
        return "wikiextractor"
    suffix = next((s for magic, s in _COMPRESSED_MAGIC.items() if head.startswith(magic)), None)
    if suffix:
        raise CorpusError(f"{url}: {suffix} compressed data under a name that does not end in {suffix}")
    try:
        if b"\x00" in start:
            raise UnicodeDecodeError("utf-8", start, start.index(b"\x00"), start.index(b"\x00") + 1, "NUL byte")
        codecs.getincrementaldecoder("utf-8")().decode(start, final=False)  # a character cut at 4096 bytes is fine
    except UnicodeDecodeError as e:
        raise CorpusError(
            f"{url}: binary data or text that is not UTF-8 (byte {e.start}); formats: {', '.join(FORMATS)}"
        ) from None
    return "lines"


def _head(url: str) -> bytes:
    """The first 4 KiB of an input, decompressed."""
    try:
        with fsspec.open(url, "rb", compression="infer") as f:
            return f.read(4096)
    except COMPRESSION_ERRORS as e:
        raise CorpusError(f"{url}: truncated or corrupt compressed stream ({e})") from e


def record_delimiter(url: str, fmt: Format) -> bytes:
    """What ends one record of a line-based input, where its byte ranges are cut: WikiExtractor's ``</doc>``
    line, or a line (its ``--json`` form, jsonl, lines)."""
    if fmt == "wikiextractor" and not _head(url).lstrip().startswith(b"{"):
        return _WIKIEXTRACTOR_CLOSE.encode()
    return b"\n"


_SITE_BASE = re.compile(rb"<base>([^<]*)</base>")
_PAGE_URL = re.compile(rb'<doc id="[^"]*" url="([^"]*)"|"url": "([^"]*)"')


def input_wiki(url: str, fmt: Format) -> str:
    """The wiki of an input's pages, read off its first bytes: a MediaWiki dump's site base, the URL of
    WikiExtractor's first page; "" for inputs of no wiki (and for WikiExtractor pages whose URLs name none)."""
    if fmt not in ("mediawiki", "wikiextractor"):
        return ""
    found = (_SITE_BASE if fmt == "mediawiki" else _PAGE_URL).search(_head(url))
    return wiki_of(html.unescape(next(g for g in found.groups() if g is not None).decode())) if found else ""


def line_number(url: str, byte: int) -> int:
    """The line (from 1) of an input that holds its ``byte`` (decompressed): for errors, so it reads the file."""
    with fsspec.open(url, "rb", compression="infer") as f:
        return f.read(byte).count(b"\n") + 1


# --- MediaWiki XML dumps ---------------------------------------------------------------


def iter_wiki_pages(url: str) -> Iterator[tuple[WikiPage, frozenset[str], int]]:
    """Stream the main-namespace, non-redirect pages of a dump (``.xml``, ``.xml.bz2``, …).

    Yields each page with the dump's namespace prefixes (lower case), which
    :func:`wikitext_to_text` needs to drop links to files and categories, and the bytes
    of the file read so far (compressed when it is): how far through the dump it is.
    """
    compression = infer_compression(url)
    try:
        with fsspec.open(url, "rb") as raw, compr[compression](raw, mode="rb") if compression else raw as f:
            dump = mwxml.Dump.from_file(f)
            prefixes = frozenset(
                name.lower()
                for ns in dump.site_info.namespaces or []
                if ns.id != 0
                for name in (ns.name, getattr(ns, "canonical", None))
                if name
            ) | {"image", "file", "category"}
            wiki = wiki_of(dump.site_info.base or "")
            for page in dump:
                if page.namespace != 0 or page.redirect:
                    continue
                text = "".join(revision.text or "" for revision in page)  # pages-articles: one revision
                yield WikiPage(page.id, page.title, text, wiki), prefixes, raw.tell()
    except COMPRESSION_ERRORS as e:
        raise CorpusError(f"{url}: truncated or corrupt compressed stream ({e})") from e
    except (xml.etree.ElementTree.ParseError, mwxml.errors.MalformedXML, ValueError, KeyError) as e:
        raise CorpusError(f"{url}: not a MediaWiki XML dump ({type(e).__name__}: {e})") from e


def is_disambiguation(title: str, code: mwparserfromhell.wikicode.Wikicode) -> bool:
    if title.endswith("(disambiguation)"):
        return True
    for template in code.filter_templates(recursive=False):
        name = str(template.name).strip().lower()
        if name in _DISAMBIGUATION_TEMPLATES or name.endswith("disambiguation"):
            return True
    return False


def wikitext_to_text(code: mwparserfromhell.wikicode.Wikicode, namespace_prefixes: frozenset[str]) -> str:
    """Plain text of parsed wikitext (modified in place).

    ``strip_code`` already drops templates; what it would keep but is not prose is
    emptied first: references, tables, galleries, and links to files, images and
    categories (whose captions would otherwise leak as ``thumb|…``). Nodes are emptied
    rather than removed because removal searches the whole tree (quadratic on long pages).
    """
    for node in code.filter(recursive=True, forcetype=(Tag, Wikilink)):
        if isinstance(node, Tag):
            if node.wiki_markup == "{|" or str(node.tag).lower() in {"table", "ref", "gallery"}:
                node.contents = ""
        else:
            title = str(node.title)
            if ":" in title and title.split(":", 1)[0].strip().lower() in namespace_prefixes:
                node.text = ""
    text = code.strip_code(normalize=True, collapse=True)
    # Parsed with skip_style_tags (see parse_wikitext): bold/italic quote runs stay as text.
    text = text.replace("'''", "").replace("''", "")
    paragraphs = (" ".join(line.split()) for line in text.split("\n"))
    return "\n".join(p for p in paragraphs if p)


def parse_wikitext(wikitext: str) -> mwparserfromhell.wikicode.Wikicode:
    """Parse wikitext. Style tags (''italic'', '''bold''') are not parsed: unbalanced
    quotes make the parser give up on enclosing markup such as ``<ref>``, leaking it as text."""
    return mwparserfromhell.parse(wikitext, skip_style_tags=True)


def wiki_documents(pages: Iterable[WikiPage], prefixes: frozenset[str], source: str) -> Iterator[Document]:
    """Plain-text documents of dump pages; disambiguation pages are skipped."""
    for page in pages:
        code = parse_wikitext(page.wikitext)
        if not is_disambiguation(page.title, code):
            yield Document(str(page.page_id), page.title, wikitext_to_text(code, prefixes), source, page.wiki)


# --- line-based formats (read in delimiter-aligned byte ranges) --------------------------


def read_wikiextractor(chunk: str, source: str, url: str = "", offset: int = 0) -> Iterator[Document]:
    """Documents of WikiExtractor output in either of its forms, told apart by content: ``<doc id url title>``
    blocks (the title repeated as the first line) or, with ``--json``, one ``{"id", "revid", "url", "title",
    "text"}`` a line. A page's wiki is its URL's host. ``url`` and ``offset`` (the chunk's first byte in the
    file) name the file and line of a bad record."""
    start = chunk.lstrip()[:1]
    if start == "{":
        yield from _wikiextractor_json(chunk, source, url, offset)
    elif start in ("<", ""):
        yield from _wikiextractor_docs(chunk, source)
    else:
        raise CorpusError(
            f"{url or source}: not WikiExtractor output (neither <doc …> blocks nor --json lines) near "
            f"{chunk.lstrip()[:60]!r}"
        )


def _wikiextractor_docs(chunk: str, source: str) -> Iterator[Document]:
    pos = 0
    while (m := _WIKIEXTRACTOR_OPEN.search(chunk, pos)) is not None:
        end = chunk.find(_WIKIEXTRACTOR_CLOSE, m.end())
        if end < 0:
            raise CorpusError(f'{source}: <doc id="{m.group(1)}"> has no closing </doc>')
        doc_id, title = html.unescape(m.group(1)), html.unescape(m.group(3))
        body = chunk[m.end() : end]
        first, _, rest = body.partition("\n")
        if first.strip() == title.strip():  # WikiExtractor repeats the title as the first line
            body = rest
        yield Document(doc_id, title, body.strip(), source, wiki_of(html.unescape(m.group(2))))
        pos = end + len(_WIKIEXTRACTOR_CLOSE)
    if chunk[pos:].strip():
        raise CorpusError(f"{source}: text outside <doc> … </doc> near {chunk[pos : pos + 60]!r}")


def _wikiextractor_json(chunk: str, source: str, url: str, offset: int) -> Iterator[Document]:
    pos = offset
    for line in chunk.splitlines(keepends=True):
        if line.strip():
            try:
                row = json.loads(line)
                doc_id, page, title, text = (row[k] for k in _WIKIEXTRACTOR_KEYS)
                if not all(isinstance(v, str) for v in (doc_id, page, title, text)):
                    raise TypeError("id, url, title and text must be strings")
                wiki = wiki_of(page)
                if not wiki:
                    raise ValueError(f"url {page[:80]!r} names no wiki")
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
                where = f"{url}, line {line_number(url, pos)}" if url else f"{source}, byte {pos}"
                raise CorpusError(
                    f'{where}: not a WikiExtractor --json record {{"id", "url", "title", "text"}} ({e!r})'
                ) from None
            yield Document(doc_id, title, text.strip(), source, wiki)
        pos += len(line.encode())


def read_jsonl(chunk: str, source: str, offset: int, url: str = "") -> Iterator[Document]:
    """Documents of jsonl lines ``{"id", "title"?, "text"}`` (``offset``: the chunk's first byte in the file
    ``url``, which names the line of a bad record)."""
    pos = offset
    for line in chunk.splitlines(keepends=True):
        if line.strip():
            try:
                row = json.loads(line)
                doc = Document(str(row["id"]), str(row.get("title") or ""), str(row["text"]), source)
            except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
                where = f"{url}, line {line_number(url, pos)}" if url else f"{source}, byte {pos}"
                raise CorpusError(f'{where}: not a {{"id", "title", "text"}} object ({e!r})') from None
            yield doc
        pos += len(line.encode())


def read_lines(chunk: str, source: str, offset: int) -> Iterator[Document]:
    """One document per line; the id is the line's byte offset in its file (stable under splitting)."""
    pos = offset
    for line in chunk.splitlines(keepends=True):
        if line.strip():
            yield Document(f"{pos}", "", line.strip(), source)
        pos += len(line.encode())


# --- the embedded default corpus ---------------------------------------------------------

_GENSIM_DATA = ("test", "test_data")
DEFAULT_DUMP = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
DEFAULT_NEWS = "lee_background.cor"


def default_corpus() -> list[str]:
    """The embedded default: a real English Wikipedia dump sample (106 pages) and 300 news
    articles, both shipped inside the ``gensim`` wheel (found without importing gensim)."""
    spec = importlib.util.find_spec("gensim")
    if spec is None or not spec.submodule_search_locations:
        raise CorpusError("the default corpus ships with the 'gensim' package, which is not installed")
    data = Path(spec.submodule_search_locations[0], *_GENSIM_DATA)
    return [str(data / DEFAULT_DUMP), str(data / DEFAULT_NEWS)]
