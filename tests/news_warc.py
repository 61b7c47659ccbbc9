"""CC-News-like months of WARC files, made from real news text that ships with gensim.

The Lee news corpus (``lee_background.cor``: 300 Australian news articles; ``lee.cor``: 50
more) is rendered as the article pages of three news sites, each with its own layout and
boilerplate (navigation, cookie banner, related stories, newsletter box, comments, footer),
and written with ``warcio``'s writer as a crawl writes them: a ``warcinfo`` record, then a
``request`` and a ``response`` record per page, with a crawl's noise among them (images,
scripts, a redirect, a 404 page, a ``revisit``, a ``metadata`` record). Planted on top: the same
URL crawled again, an article syndicated under another site's URL, an updated version of an
article (a near-duplicate) and pages in Bulgarian (the one article of gensim's bgwiki sample,
cut into pages). The Lee corpus has duplicates of its own: 7 articles appear twice, and two
versions of one story share 90% of their 5-word shingles.

Every file is deterministic (record ids are uuid5 of URL and date), so snapshot ids are too.
:class:`Planted` records what each page holds, for the tests' brute-force reference.

    python tests/news_warc.py OUT_DIR [--files 4]       # writes both months
"""

import argparse
import html
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from io import BytesIO
from pathlib import Path

import blingfire
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from npmcore.corpus.readers import default_corpus, iter_wiki_pages, wiki_documents

MONTHS = (datetime(2026, 10, 1, tzinfo=UTC), datetime(2026, 11, 1, tzinfo=UTC))
BG_DUMP = "bgwiki-latest-pages-articles-shortened.xml.bz2"
PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000") + b"\x1f\x15\xc4\x89" * 4


@dataclass(frozen=True)
class Site:
    host: str
    name: str
    charset: str  # the encoding its pages are served in
    layout: str  # "article" | "story-body" | "legacy"


SITES = (
    Site("www.example-herald.com", "The Example Herald", "utf-8", "article"),
    Site("news.example.org", "Example Daily", "utf-8", "story-body"),
    Site("www.example-wire.net", "Example Wire", "iso-8859-1", "legacy"),
)

# Boilerplate every page of a site carries; bench/warc.py measures how much of it an extractor keeps.
BOILERPLATE = (
    "We use cookies to improve your experience. By continuing to browse you agree to our cookie policy.",
    "Sign up for our morning briefing and get the day's top stories in your inbox.",
    "Comments are closed for this story.",
    "Share this article on Facebook, Twitter or by email.",
    "All rights reserved. Reproduction without permission is prohibited.",
    "Contact us | Advertise with us | Privacy policy | Terms of use",
    "Most read this week",
    "Related stories",
)


@dataclass(frozen=True)
class Planted:
    """A record of a written month, in file and record order."""

    url: str
    kind: str  # "article", "recrawl", "syndicated", "updated", "foreign", or the noise ("image", "redirect", …)
    text: str | None = None  # the article text the page holds (None: no article)
    title: str | None = None  # its <title>


@dataclass(frozen=True)
class NewsMonth:
    files: list[Path]
    planted: list[Planted]

    @property
    def articles(self) -> list[Planted]:
        return [p for p in self.planted if p.text is not None]


def lee_articles() -> tuple[list[str], list[str]]:
    """The 300 articles of lee_background.cor (UTF-8) and the 50 of lee.cor (Latin-1)."""
    folder = Path(default_corpus()[1]).parent
    background = (folder / "lee_background.cor").read_text(encoding="utf-8").splitlines()
    test = (folder / "lee.cor").read_text(encoding="latin-1").splitlines()
    return [t.strip() for t in background if t.strip()], [t.strip() for t in test if t.strip()]


def bulgarian_articles(n: int) -> list[str]:
    """``n`` pages of Bulgarian prose: the paragraphs of the one article in gensim's bgwiki sample."""
    dump = str(Path(default_corpus()[1]).parent / BG_DUMP)
    pages, prefixes, _ = zip(*iter_wiki_pages(dump), strict=True)
    (doc,) = wiki_documents(pages, prefixes[0], "bgwiki")
    paragraphs = [p for p in doc.text.split("\n") if len(p) >= 100]
    return [" ".join(paragraphs[i::n]) for i in range(n)]


def headline(text: str) -> str:
    words = blingfire.text_to_sentences(text).split("\n")[0].split()
    return " ".join(words[:10]).rstrip(",.;:")


def paragraphs(text: str) -> list[str]:
    sentences = blingfire.text_to_sentences(text).split("\n")
    return [" ".join(sentences[i : i + 3]) for i in range(0, len(sentences), 3)]


def page_title(site: Site, text: str) -> str:
    return f"{headline(text)} | {site.name}"


def render(site: Site, text: str, related: list[str], lang: str = "en") -> str:
    """A news site's article page holding ``text``, with the site's layout and boilerplate."""
    e = html.escape
    title = page_title(site, text)
    body = paragraphs(text)
    nav = "".join(f'<li><a href="/{s.lower()}/">{s}</a></li>' for s in ("World", "Business", "Sport", "Opinion"))
    links = "".join(f'<li><a href="/story/{i}">{e(headline(r))}</a></li>' for i, r in enumerate(related))
    cookie, newsletter, comments, share, rights, contact, most_read, related_h = BOILERPLATE
    head = (
        f'<!DOCTYPE html>\n<html lang="{lang}"><head><meta charset="{site.charset}">'
        f"<title>{e(title)}</title><style>body{{font-family:serif}} .ad{{height:250px}}</style>"
        '<script type="application/ld+json">{"@type": "NewsArticle"}</script></head>\n'
    )
    banner = f'<div class="cookie-banner"><p>{cookie}</p><button>Accept</button></div>'
    footer = f"<footer><p>&copy; 2026 {e(site.name)}. {rights}</p><p>{contact}</p></footer>"
    sidebar = f"<aside><h3>{most_read}</h3><ul>{links}</ul><p>{newsletter}</p></aside>"
    if site.layout == "article":
        story = "".join(f"<p>{e(p)}</p>" for p in body)
        main = (
            f"<main><article><h1>{e(headline(text))}</h1>"
            f'<p class="byline">By Staff Reporter</p>{story}</article>'
            f'<div class="share">{share}</div><section class="related"><h2>{related_h}</h2><ul>{links}</ul>'
            f'</section><div id="comments"><p>{comments}</p></div></main>'
        )
    elif site.layout == "story-body":
        story = '<div class="ad">Advertisement</div>'.join(f"<p>{e(p)}</p>" for p in body)
        main = (
            f'<div class="container"><div class="story-body"><h1 class="headline">{e(headline(text))}</h1>'
            f'{story}</div>{sidebar}<div class="social">{share}</div>'
            f'<div class="comments">{comments}</div></div>'
        )
    else:
        story = "<br><br>\n".join(e(p) for p in body)
        main = (
            f'<table width="100%"><tr><td class="nav"><ul>{nav}</ul></td><td><div id="content">'
            f'<h2>{e(headline(text))}</h2><div class="text">{story}</div></div></td>'
            f"<td>{sidebar}</td></tr></table><p>{comments}</p>"
        )
    return f"{head}<body><header><nav><ul>{nav}</ul></nav></header>{banner}{main}{footer}</body></html>\n"


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", headline(text).lower()).strip("-")[:60]


class _Month:
    """Records of one month, written in order into ``files`` WARC files."""

    def __init__(self, start: datetime):
        self.start = start
        self.records: list[tuple[Planted, str, bytes, str, datetime]] = []  # planted, status, body, type, date

    def date(self) -> datetime:
        return self.start + timedelta(minutes=7 * len(self.records))

    def page(self, site: Site, url: str, text: str, related: list[str], kind: str, lang: str = "en") -> None:
        body = render(site, text, related, lang).encode(site.charset, "xmlcharrefreplace")
        ctype = f"text/html; charset={site.charset}"
        self.records.append((Planted(url, kind, text, page_title(site, text)), "200 OK", body, ctype, self.date()))

    def noise(self, url: str, kind: str, status: str, body: bytes, ctype: str) -> None:
        self.records.append((Planted(url, kind), status, body, ctype, self.date()))

    def write(self, folder: Path, files: int) -> list[Path]:
        paths = []
        per_file = -(-len(self.records) // files)
        for n in range(files):
            stamp = self.records[n * per_file][4].strftime("%Y%m%d%H%M%S")
            path = folder / f"CC-NEWS-{stamp}-{n:05d}.warc.gz"
            with open(path, "wb") as f:
                write_records(f, path.name, self.records[n * per_file : (n + 1) * per_file])
            paths.append(path)
        return paths


def _record_id(url: str, date: datetime, kind: str) -> str:
    return f"<urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, f'{kind} {url} {date.isoformat()}')}>"


def write_records(f, name: str, records: list[tuple[Planted, str, bytes, str, datetime]]) -> None:
    writer = WARCWriter(f, gzip=True)
    first = records[0][4]
    info = writer.create_warcinfo_record(name, {"software": "tests/news_warc.py", "format": "WARC File Format 1.1"})
    info.rec_headers.replace_header("WARC-Record-ID", _record_id(name, first, "warcinfo"))
    info.rec_headers.replace_header("WARC-Date", first.strftime("%Y-%m-%dT%H:%M:%SZ"))
    writer.write_record(info)
    for planted, status, body, ctype, date in records:
        stamp = date.strftime("%Y-%m-%dT%H:%M:%SZ")
        host = planted.url.split("/")[2]
        path = "/" + planted.url.split("/", 3)[3]
        request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: StormCrawler\r\n\r\n".encode()
        warc = {"WARC-Date": stamp, "WARC-Record-ID": _record_id(planted.url, date, "request")}
        writer.write_record(
            writer.create_warc_record(planted.url, "request", payload=BytesIO(request), warc_headers_dict=warc)
        )
        if planted.kind == "revisit":
            warc = {"WARC-Date": stamp, "WARC-Record-ID": _record_id(planted.url, date, "revisit")}
            writer.write_record(
                writer.create_revisit_record(planted.url, "sha1:AAAA", planted.url, stamp, warc_headers_dict=warc)
            )
            continue
        headers = StatusAndHeaders(
            status,
            [("Content-Type", ctype), ("Content-Length", str(len(body))), ("Server", "nginx")],
            protocol="HTTP/1.1",
        )
        warc = {"WARC-Date": stamp, "WARC-Record-ID": _record_id(planted.url, date, "response")}
        writer.write_record(
            writer.create_warc_record(
                planted.url, "response", payload=BytesIO(body), http_headers=headers, warc_headers_dict=warc
            )
        )


def write_news_months(folder: Path, files: int = 1, articles: int = 300) -> tuple[NewsMonth, NewsMonth]:
    """October 2026 (the first ``articles`` of the 300 lee_background articles) and November 2026
    (the 50 lee.cor articles), each with its planted duplicates and noise, in ``files`` WARC files
    per month (copies of October's articles are planted only where October has them)."""
    background, test = lee_articles()
    background = background[:articles]

    def within(indices: tuple[int, ...]) -> list[int]:
        return [i for i in indices if i < len(background)]

    bulgarian = bulgarian_articles(5)
    urls: dict[int, tuple[Site, str]] = {}

    october = _Month(MONTHS[0])
    for i, text in enumerate(background):
        site = SITES[i % 3]
        urls[i] = site, f"https://{site.host}/2026/10/{slug(text)}-{i}.html"
        related = [background[(i + k) % len(background)] for k in (1, 2, 3)]
        october.page(site, urls[i][1], text, related, "article")
        if i == min(100, len(background) - 1):  # a crawl's noise
            october.noise(f"https://{site.host}/img/logo.png", "image", "200 OK", PNG, "image/png")
            october.noise(
                f"https://{site.host}/js/app.js", "script", "200 OK", b"var x = 1;\n", "application/javascript"
            )
            october.noise(f"https://{site.host}/robots.txt", "robots", "200 OK", b"User-agent: *\n", "text/plain")
            october.noise(
                f"https://{site.host}/old", "redirect", "301 Moved Permanently", b"<html>moved</html>", "text/html"
            )
            october.noise(
                f"https://{site.host}/gone",
                "not-found",
                "404 Not Found",
                b"<html><title>404</title>" + b"Page not found. " * 40 + b"</html>",
                "text/html",
            )
            october.noise(urls[3][1], "revisit", "200 OK", b"", "text/html")
    for i in within((5, 120, 250)):  # the same URL crawled again: same page
        site, url = urls[i]
        october.page(site, url, background[i], [background[i - 1]], "recrawl")
    for i in within((10, 77, 199)):  # syndicated: the same text under another site's URL
        site = SITES[(i + 1) % 3]
        october.page(
            site, f"https://{site.host}/syndicated/{slug(background[i])}.html", background[i], [], "syndicated"
        )
    updated = background[42 % len(background)] + " This story has been updated with comments from the minister."
    site = SITES[1]
    october.page(site, f"https://{site.host}/2026/10/{slug(updated)}-42-update.html", updated, [], "updated")
    for k, text in enumerate(bulgarian[:3]):
        october.page(SITES[k % 3], f"https://{SITES[k % 3].host}/bg/{k}.html", text, [], "foreign", lang="bg")

    november = _Month(MONTHS[1])
    for i, text in enumerate(test):
        site = SITES[i % 3]
        november.page(site, f"https://{site.host}/2026/11/{slug(text)}-{i}.html", text, [test[i - 1]], "article")
    for i in within((0, 150, 299)):  # October's URLs crawled again
        site, url = urls[i]
        november.page(site, url, background[i], [], "recrawl")
    for i in within((20, 160)):  # October's articles syndicated in November
        site = SITES[(i + 2) % 3]
        november.page(site, f"https://{site.host}/2026/11/syndicated-{i}.html", background[i], [], "syndicated")
    updated = background[64 % len(background)] + " Police said on Monday that the investigation was continuing."
    november.page(SITES[0], f"https://{SITES[0].host}/2026/11/{slug(updated)}-update.html", updated, [], "updated")
    for k, text in enumerate(bulgarian[3:]):
        november.page(SITES[k % 3], f"https://{SITES[k % 3].host}/bg/11-{k}.html", text, [], "foreign", lang="bg")

    (folder / "2026-10").mkdir(parents=True, exist_ok=True)
    (folder / "2026-11").mkdir(parents=True, exist_ok=True)
    return (
        NewsMonth(october.write(folder / "2026-10", files), [r[0] for r in october.records]),
        NewsMonth(november.write(folder / "2026-11", files), [r[0] for r in november.records]),
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--files", type=int, default=1, help="WARC files per month")
    args = parser.parse_args()
    for month in write_news_months(args.out, args.files):
        for path in month.files:
            print(path, path.stat().st_size)
