"""Corpus readers: MediaWiki XML dumps, WikiExtractor output, jsonl and one-doc-per-line; format detection.

Readers turn raw inputs into :class:`Document` objects. Dumps are streamed with
``mwxml`` in constant memory and their wikitext is turned into plain text with
``mwparserfromhell``; the line-based formats are read in delimiter-aligned byte ranges
so one large file can be split across workers. Web crawls (format ``warc``) are read by
:mod:`npmcore.warc`.
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


class CorpusError(ValueError):
    """An input cannot be read as the corpus format it was given as."""


@dataclass(frozen=True)
class Document:
    doc_id: str  # unique within its source
    title: str  # "" when the source has none
    text: str  # plain text, paragraphs separated by newlines
    source: str  # the dump or collection it came from


@dataclass(frozen=True)
class WikiPage:
    """A main-namespace, non-redirect page as it comes out of a dump (wikitext)."""

    page_id: int
    title: str
    wikitext: str


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
    if name.endswith((".jsonl", ".jsonl.gz", ".jsonl.bz2")):
        return "jsonl"
    try:
        with fsspec.open(url, "rb", compression="infer") as f:
            start = f.read(4096)
    except COMPRESSION_ERRORS as e:
        raise CorpusError(f"{url}: truncated or corrupt compressed stream ({e})") from e
    head = start.lstrip()
    if head.startswith((b"WARC/", b"filedesc://")):
        return "warc"
    if head.startswith((b"<mediawiki", b"<?xml")):
        return "mediawiki"
    if head.startswith(b"<doc "):
        return "wikiextractor"
    if head.startswith(b"{"):
        return "jsonl"
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
            for page in dump:
                if page.namespace != 0 or page.redirect:
                    continue
                text = "".join(revision.text or "" for revision in page)  # pages-articles: one revision
                yield WikiPage(page.id, page.title, text), prefixes, raw.tell()
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
            yield Document(str(page.page_id), page.title, wikitext_to_text(code, prefixes), source)


# --- line-based formats (read in delimiter-aligned byte ranges) --------------------------


def read_wikiextractor(chunk: str, source: str) -> Iterator[Document]:
    """Documents of WikiExtractor output: ``<doc id url title>`` title line, text, ``</doc>``."""
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
        yield Document(doc_id, title, body.strip(), source)
        pos = end + len(_WIKIEXTRACTOR_CLOSE)
    if chunk[pos:].strip():
        raise CorpusError(f"{source}: text outside <doc> … </doc> near {chunk[pos : pos + 60]!r}")


def read_jsonl(chunk: str, source: str, offset: int) -> Iterator[Document]:
    """Documents of jsonl lines ``{"id", "title"?, "text"}``."""
    pos = offset
    for line in chunk.splitlines(keepends=True):
        if line.strip():
            try:
                row = json.loads(line)
                doc = Document(str(row["id"]), str(row.get("title") or ""), str(row["text"]), source)
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise CorpusError(
                    f'{source}: line at byte {pos} is not a {{"id", "title", "text"}} object ({e!r})'
                ) from e
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
