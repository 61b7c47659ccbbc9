"""The files an ingest reads: its inputs (paths, URLs, folders or globs) expanded and checked, and their size.

Light to import (fsspec only): a command checks its inputs before any server, cluster or encoder starts."""

from collections.abc import Iterable

import fsspec

from npmcore.corpus.readers import CorpusError


def expand_inputs(inputs: Iterable[str]) -> list[str]:
    """Files named by ``inputs`` (paths, URLs, folders or globs), each checked to exist and be non-empty."""
    files = []
    for url in inputs:
        fs, path = fsspec.core.url_to_fs(url)
        matches = (
            [p for p in fs.expand_path(path, recursive=True) if fs.isfile(p)] if fs.exists(path) or "*" in path else []
        )
        if not matches:
            raise CorpusError(f"{url}: no such file or folder")
        for p in sorted(matches):
            if p.rsplit("/", 1)[-1].startswith("."):
                continue
            full = fs.unstrip_protocol(p) if "://" in url else p
            if fs.size(p) == 0:
                raise CorpusError(f"{full}: empty file")
            files.append(full)
    return files


def input_bytes(inputs: Iterable[str]) -> int:
    """The bytes of the files named by ``inputs`` (as :func:`expand_inputs`): what an ingest of them reads through."""
    return sum(fsspec.core.url_to_fs(url)[0].size(url) for url in expand_inputs(inputs))
