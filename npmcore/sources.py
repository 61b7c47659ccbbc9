"""Sources: what a corpus snapshot holds, one entry per wiki or collection, each with its own checksum.

A corpus may hold several sources: English Wikipedia of September 2020 beside Simple English Wikipedia of
December 2021, a month of news beside them. A source is named by its wiki (the host of its pages' URLs,
``simple.wikipedia.org``), or, for inputs of no wiki (news, jsonl, lines, WARC files), by its file's name.
The corpus manifest lists each (:class:`Source`): its dump date, the files it was ingested from, a checksum
over them, the block shards that hold it and its counts. An ingest that extends a corpus
(:func:`npmcore.corpus.ingest.ingest`) replaces the sources of the names it brings and carries the others over
shard for shard, so a backfill of one wiki never touches another's pages.
"""

import hashlib
from collections.abc import Iterable
from dataclasses import asdict, dataclass

COUNTS = ("docs", "empty_docs", "blocks", "tokens")


@dataclass(frozen=True)
class Source:
    name: str  # the wiki ("simple.wikipedia.org"), else the name of its file ("lee_background")
    wiki: str | None  # the host of its pages' URLs; None for inputs of no wiki
    dump_date: str | None  # ISO date of the dump or crawl, as given to the ingest
    sha256: str  # over the sha256 of its input files, in order: the same files, the same checksum
    inputs: tuple[str, ...]  # the files' URLs
    shards: tuple[str, ...]  # the block shards that hold its documents
    docs: int
    empty_docs: int
    blocks: int
    tokens: int

    def to_dict(self) -> dict:
        return {**asdict(self), "inputs": list(self.inputs), "shards": list(self.shards)}

    @classmethod
    def from_dict(cls, data: dict) -> "Source":
        return cls(**{**data, "inputs": tuple(data["inputs"]), "shards": tuple(data["shards"])})


@dataclass(frozen=True)
class Citation:
    """Where a passage comes from."""

    source: str  # the corpus source: its wiki ("simple.wikipedia.org"), else its file's name
    wiki: str | None  # None for documents of no wiki (news, jsonl, lines)
    dump_date: str | None  # ISO date of the source's dump, as its ingest was given it
    title: str  # the article's
    url: str | None  # the article's address (a wiki page's, a crawled article's); None where there is none


def source_of(entry: dict) -> str:
    """The name of the source an input file belongs to (a manifest's input entry)."""
    return entry.get("wiki") or entry["source"]


def checksum(entries: Iterable[dict]) -> str:
    """A source's checksum: sha256 over its input files' sha256, in order."""
    return hashlib.sha256("\n".join(e["sha256"] for e in entries).encode()).hexdigest()


def describe(entries: list[dict], shards: Iterable[tuple[str, str, dict[str, int]]]) -> list[Source]:
    """The sources of freshly ingested input files (``entries``: the manifest's input entries) from their
    shards' (source name, path, counts), in the order their files came."""
    found: dict[str, list[tuple[str, dict[str, int]]]] = {}
    for name, path, counts in shards:
        found.setdefault(name, []).append((path, counts))
    sources = []
    for name in dict.fromkeys(source_of(e) for e in entries):
        mine = [e for e in entries if source_of(e) == name]
        held = sorted(found.get(name, []))
        sources.append(
            Source(
                name=name,
                wiki=mine[0].get("wiki"),
                dump_date=mine[0].get("dump_date"),
                sha256=checksum(mine),
                inputs=tuple(e["url"] for e in mine),
                shards=tuple(path for path, _ in held),
                **{k: sum(c[k] for _, c in held) for k in COUNTS},
            )
        )
    return sources


def totals(sources: Iterable[Source]) -> dict[str, int]:
    """The corpus counts of its sources."""
    sources = list(sources)
    return {k: sum(getattr(s, k) for s in sources) for k in COUNTS}
