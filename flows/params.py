"""Typed flow parameters (validated by Prefect; editable in the Prefect UI)."""

import os
from datetime import date
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, Field

from npmcore.storage import check_store


def default_store() -> str:
    return os.environ.get("NPM_STORE", "./npm-store")


def cloze_facts(split: Literal["test", "dev"]) -> Path:
    """The cloze facts of the embedded default corpus in ``split`` (bench/data/cloze-{split}.jsonl)."""
    return Path(__file__).resolve().parents[1] / "bench" / "data" / f"cloze-{split}.jsonl"


CLOZE_TEST = cloze_facts("test")  # the demo's


def absolute_store(url: str) -> str:
    """A store root or snapshot as given by the user, checked to answer (a store without
    credentials fails here, before any cluster starts, with a StoreError); local paths are
    made absolute so Dask workers resolve them like the driver."""
    url = url if "://" in url else str(Path(url).expanduser().resolve())
    check_store(url)
    return url


StoreURL = Annotated[str, AfterValidator(absolute_store)]  # a store root or snapshot URL, checked and made absolute
# the encoder's precision (npmcore.index.precision): auto, f32 or bf16
PrecisionSetting = Annotated[
    Literal["auto", "f32", "bf16"],
    Field(
        description="Precision of the encoder's products (embedding, and the queries an evaluation encodes): auto "
        "(bf16 on a GPU, and on a CPU with AMX "
        "or AVX512_BF16 where a probe finds it faster; else f32), f32, or bf16 (a GPU, or a CPU with those units). "
        "It is part of the datastore's id: vectors of two precisions are never mixed."
    ),
]


class ClusterParams(BaseModel):
    dask_address: str | None = Field(
        default_factory=lambda: os.environ.get("DASK_SCHEDULER_ADDRESS") or None,
        description="Address of an existing Dask scheduler (tcp://host:8786); empty starts a local cluster.",
    )
    n_workers: int | None = Field(None, ge=1, description="Local cluster size; default one worker per core.")


def month_or_day(value: object) -> object:
    """A month (YYYY-MM) stands for its first day."""
    return f"{value}-01" if isinstance(value, str) and len(value) == 7 else value


DumpDate = Annotated[date, BeforeValidator(month_or_day)]


class IngestParams(BaseModel):
    inputs: list[str] = Field(
        default_factory=list,
        description="Files, folders or globs (local paths, file:// or s3:// URLs). Empty: the embedded default "
        "corpus (the English Wikipedia dump sample and the Lee news corpus shipped with gensim).",
    )
    format: Literal["auto", "mediawiki", "wikiextractor", "jsonl", "lines", "warc"] = Field(
        "auto", description="Input format; auto detects it per input from the name and first bytes."
    )
    store: StoreURL = Field(default_factory=default_store, description="Store root URL (env NPM_STORE).")
    encoder: str | None = Field(
        None, description="Tokenizer: a local model path or cached Hugging Face name; empty = default MiniLM-L6."
    )
    max_tokens: int = Field(
        256, ge=32, le=4096, description="Maximum block length in encoder tokens, special tokens included."
    )
    pages_per_partition: int = Field(200, ge=1, description="Dump pages per Dask partition.")
    partition_mb: float = Field(
        8, ge=0.01, description="Byte range (MiB) per partition of uncompressed line-based files."
    )
    previous: str | None = Field(
        None,
        description="Corpus snapshot of an earlier dump: its unchanged pages are copied instead of parsed again "
        "(same result, faster).",
    )
    lang: str = Field("en", description="WARC inputs: the language articles are kept in (ISO 639-1 code).")
    strict: bool = Field(False, description="WARC inputs: a bad record stops the ingest instead of being skipped.")
    extends: str | None = Field(
        None,
        description="A corpus snapshot the new one extends: the blocks of its sources the inputs do not replace (a "
        "source is a wiki, or a file of no wiki), then the inputs' (of WARC inputs, the articles that are not "
        "duplicates of its articles).",
    )
    dump_date: DumpDate | None = Field(
        None, description="Date of the inputs' dump (YYYY-MM-DD, or a month: YYYY-MM), kept with their source."
    )
    cluster: ClusterParams = Field(default_factory=ClusterParams)
