"""The Wikipedia dumps of the paper's table: two dated dumps of the same English Wikipedia articles
(``shared/data/enwiki_dated``) and Simple English Wikipedia (``shared/data/simplewiki``).

May 2015 (``2015-05``) and September 2020 (``2020-09``), WikiExtractor output, shipped as one
archive: the temporal facts, the entity translation facts and the paper's table are made from
them. :func:`dated_dump` unpacks a dump once into the cache and returns its folder;
:func:`simple_wikipedia` does the same for Simple English Wikipedia of December 2021 (WikiExtractor's
``--json`` output), the datastore the paper's table adds beside the 2020 dump.
"""

import shutil
import tarfile
import tempfile
from pathlib import Path

from npmcore.evaluation.tasks import DEFAULT_DATA_DIR
from npmcore.storage import cache_dir

ARCHIVE = DEFAULT_DATA_DIR / "enwiki_dated" / "enwiki_dated.tar.xz"
DUMPS = ("2015-05", "2020-09")
SIMPLE_ARCHIVE = DEFAULT_DATA_DIR / "simplewiki" / "simplewiki-2021-12.tar.xz"
SIMPLE = "simplewiki-2021-12"  # its folder in the archive, and its name as a datastore
DUMP_DATES = {"2015-05": "2015-05-15", "2020-09": "2020-09-01", SIMPLE: "2021-12-01"}  # as the paper's table gives them


def dated_dump(name: str, archive: Path = ARCHIVE, cache: Path | None = None) -> Path:
    """The folder of dump ``name`` (``2015-05`` or ``2020-09``: ``AA/wiki_00`` …), unpacked from ``archive``
    once into ``{cache}/enwiki_dated/{name}`` (default :func:`npmcore.storage.cache_dir`; written under a
    temporary name, then renamed: a folder there is whole)."""
    if name not in DUMPS:
        raise ValueError(f"unknown dump {name!r}; the dated dumps are {', '.join(DUMPS)}")
    return _unpacked(archive, name, (cache or cache_dir()) / "enwiki_dated" / name)


def simple_wikipedia(archive: Path = SIMPLE_ARCHIVE, cache: Path | None = None) -> Path:
    """The folder of Simple English Wikipedia of December 2021 (``AA/wiki_00`` … ``AB/wiki_76``), unpacked from
    ``archive`` once into ``{cache}/simplewiki/simplewiki-2021-12``, as :func:`dated_dump`."""
    return _unpacked(archive, SIMPLE, (cache or cache_dir()) / "simplewiki" / SIMPLE)


def _unpacked(archive: Path, member: str, target: Path) -> Path:
    """The folder ``member`` of ``archive`` unpacked at ``target`` (once: under a temporary name, then renamed)."""
    if target.is_dir():
        return target
    if not archive.is_file():
        raise FileNotFoundError(f"{archive} is missing (see shared/data/README.md: {archive.parent.name})")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".tmp-") as tmp, tarfile.open(archive, "r:xz") as tar:
        members = [m for m in tar if m.isfile() and m.name.startswith(f"{member}/")]
        tar.extractall(tmp, members=members, filter="data")
        if not target.is_dir():  # else unpacked meanwhile by another process
            shutil.move(Path(tmp) / member, target)
    return target


def dump_files(folder: Path) -> list[Path]:
    """The WikiExtractor files of an unpacked dump (``*/wiki_*``), in order; none is an error."""
    paths = sorted(Path(folder).glob("*/wiki_*"))
    if not paths:
        raise FileNotFoundError(f"{folder}: no WikiExtractor files (*/wiki_*)")
    return paths


def dump_file_text(member: str, archive: Path = ARCHIVE, cache: Path | None = None) -> str:
    """The text of one file of the dumps (``2015-05/AA/wiki_00``): from the unpacked copy in the cache
    when there is one, else streamed out of ``archive`` (the archive interleaves the dumps: a first
    file of each is read in about a second)."""
    unpacked = (cache or cache_dir()) / "enwiki_dated" / member
    if unpacked.is_file():
        return unpacked.read_text(encoding="utf-8")
    if not archive.is_file():
        raise FileNotFoundError(f"{archive} is missing (see shared/data/README.md: enwiki_dated)")
    with tarfile.open(archive, "r:xz") as tar:
        for info in tar:
            if info.name == member and info.isfile():
                return tar.extractfile(info).read().decode("utf-8")
    raise FileNotFoundError(f"{archive} holds no file {member}")
