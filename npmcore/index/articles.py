"""The openings of a corpus's articles, by what their titles spell: a SQLite table in every index snapshot.

What a candidate answer is ("The Tigris is a river …", :mod:`npmcore.answer.kinds`) is read from its own article's
opening. An index holds them as ``articles.sqlite``, written when it is built (:func:`write_articles`: one pass over
the corpus's titles and texts, one shard in memory at a time) and looked up per candidate when a query asks for a
kind (:class:`Articles`: an indexed lookup, nothing held in memory): a query never reads the corpus for them, at any
size. An index built before it held the table gets one, once, in the local cache
(:attr:`npmcore.answer.inference.NPM.articles`).

Each article is its first block: its title, its :data:`OPENING_CHARS` first characters with what it puts in brackets
left out, and whether those give a life's years in brackets and speak of him or her (a person's). Imports the
snapshots and the vocabulary's :func:`~npmcore.vocab.spelled` at the top.
"""

import os
import re
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path

from npmcore.snapshots import read_blocks
from npmcore.vocab import spelled

ARTICLES = "articles.sqlite"  # an index snapshot's table of article openings
OPENING_CHARS = 400  # of an article's first block, its brackets aside: its opening sentences say what it is
LIFE_YEARS = re.compile(r"\([^)]*\b\d{3,4}\b[^)]*\)")  # "(6 August 1881 – 11 March 1955)", "(born 1961)"
PRONOUNS = re.compile(r"\b(?:he|she|his|her|him)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Article:
    title: str
    opening: str  # the first OPENING_CHARS characters of its text, what it puts in brackets aside
    life: bool  # its opening gives a life's years in brackets and speaks of him or her: a person's


def name_of(title: str) -> str:
    """What an article's title spells without a parenthesised qualifier ("Mercury (planet)": "mercury")."""
    return spelled(re.sub(r"\s*\([^)]*\)\s*$", "", title))


def article_of(title: str, text: str) -> Article:
    """An article as the table holds it, from its title and its first block's text."""
    raw = text[: 4 * OPENING_CHARS]
    opening = re.sub(r"\s*\([^()]*\)", "", raw)[:OPENING_CHARS]
    return Article(title, opening, bool(LIFE_YEARS.search(raw[:OPENING_CHARS])) and bool(PRONOUNS.search(raw)))


def write_articles(corpus: str, path: Path) -> int:
    """Write the table of a corpus's articles (each article's first block: its blocks are consecutive) to ``path``,
    under a temporary name renamed once complete; returns how many articles it holds."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")  # processes writing one cache each their own
    partial.unlink(missing_ok=True)
    count, previous = 0, None
    with sqlite3.connect(partial) as db:
        db.execute("CREATE TABLE articles (name TEXT NOT NULL, title TEXT NOT NULL, opening TEXT, life INTEGER)")
        for table in read_blocks(corpus, ["title", "text"]):
            rows = []
            for title, text in zip(table.column("title").to_pylist(), table.column("text").to_pylist(), strict=True):
                if title != previous and title:
                    article = article_of(title, text)
                    rows.append((name_of(title), article.title, article.opening, int(article.life)))
                previous = title
            db.executemany("INSERT INTO articles VALUES (?, ?, ?, ?)", rows)
            count += len(rows)
        db.execute("CREATE INDEX by_name ON articles (name)")
    db.close()
    os.replace(partial, path)
    return count


class Articles:
    """A table of article openings (:func:`write_articles`), read-only, shared by a process's threads."""

    def __init__(self, path: Path):
        if not path.is_file():
            raise FileNotFoundError(f"no table of article openings at {path}")
        self.path = path
        self._db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False)
        self._lock = threading.Lock()

    def named(self, *names: str) -> list[Article]:
        """The articles whose titles spell one of ``names`` (:func:`name_of`), in the corpus's order."""
        marks = ", ".join("?" * len(names))
        with self._lock:
            found = self._db.execute(
                f"SELECT title, opening, life FROM articles WHERE name IN ({marks}) ORDER BY rowid", names
            ).fetchall()
        return [Article(title, opening, bool(life)) for title, opening, life in found]

    def close(self) -> None:
        self._db.close()
