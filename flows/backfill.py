"""Flow ``backfill_dump``: a new Wikipedia dump, another wiki's, or a month of CC-News WARC files, becomes a
new corpus snapshot and index, incrementally.

The new corpus *extends* the previous index's: it keeps the sources (:mod:`npmcore.sources`) the dump does
not replace and adds the dump's. A dump of a wiki the corpus holds replaces that wiki's pages (of an XML
dump, its unchanged pages are copied, not parsed again; WikiExtractor output is read whole); a dump of
another wiki (Simple English Wikipedia beside English) is added beside them, and neither touches the other's
pages. A month of WARC files adds the month's articles that are not duplicates of the corpus's (same URL,
same or nearly the same text). Either way the new blocks are matched by content hash against the datastore of the
previous index (same encoder, and same precision: a backfill in another one is refused, its vectors
are never mixed): unchanged blocks copy their vectors, only new and changed blocks are embedded,
blocks of deleted or edited articles are simply not carried over, and the previous index's trained
FAISS index is filled again instead of trained. The previous snapshots are
immutable and stay queryable, so a question can be answered against the old and the new corpus.
A previous index of BM25 alone (``--previous``; the newest-index default looks only at indexes
of the encoder's vectors) is followed by one of BM25 alone: nothing is embedded.
"""

import time
from datetime import date
from typing import Annotated

import mlflow
from prefect import flow
from pydantic import BaseModel, BeforeValidator, Field

from flows.index import IndexParams, index_corpus
from flows.ingest import ingest_corpus
from flows.params import ClusterParams, DumpDate, IngestParams, PrecisionSetting, StoreURL, default_store
from npmcore.cluster import dask_cluster
from npmcore.corpus.inputs import expand_inputs
from npmcore.corpus.readers import CorpusError, Format, detect_format
from npmcore.encoder import cached_encoder, encoder_fingerprint
from npmcore.model.query_encoder import embedding_encoder
from npmcore.serve.serving import read_serving, set_serving
from npmcore.snapshots import INDEX, IndexSnapshot, open_corpus, open_datastore, open_index
from npmcore.storage import list_snapshots
from npmcore.tracking import log_snapshot_input, resolve_encoder, tracking
from npmcore.tracking_store import tracking_uri
from tasks import link_runs


class BackfillParams(BaseModel):
    dump: Annotated[list[str], BeforeValidator(lambda v: [v] if isinstance(v, str) else v)] = Field(
        description="The new dump: a pages-articles XML(.bz2), WikiExtractor output of one (its files or folder, "
        "<doc> or --json), a dump of another wiki to add beside the corpus's, or a month of CC-News WARC files "
        "(paths, URLs or globs, s3://… included)."
    )
    dump_date: DumpDate = Field(
        description="Date of the dump (YYYY-MM-DD), or the month of the WARC files (YYYY-MM), logged with the run."
    )
    store: StoreURL = Field(default_factory=default_store, description="Store root URL (env NPM_STORE).")
    model: str | None = Field(
        None, description="Encoder (path, cached name or models:/npm-encoder@champion); empty = the default encoder."
    )
    previous: str | None = Field(
        None,
        description="Index of the previous dump, or whose corpus WARC files extend; empty = the newest index in the "
        "store made with this encoder.",
    )
    pages_per_partition: int = Field(200, ge=1, description="Dump pages per Dask partition (and datastore shard).")
    precision: PrecisionSetting = "auto"
    lang: str = Field("en", description="WARC files: the language articles are kept in (ISO 639-1 code).")
    strict: bool = Field(False, description="WARC files: a bad record stops the backfill instead of being skipped.")
    cluster: ClusterParams = Field(default_factory=ClusterParams)
    experiment: str = Field("npm-backfill", description="MLflow experiment.")
    serve: bool = Field(
        True,
        description="Move the store's serving pointer to the new index when it served the index this backfill "
        "followed (or the store has none); a pointer set to another index is kept.",
    )


def dump_format(files: list[str]) -> Format:
    """``mediawiki``, ``wikiextractor`` or ``warc``: what the files of a backfill are (one kind only)."""
    formats = {detect_format(f) for f in files}
    if formats not in ({"mediawiki"}, {"wikiextractor"}, {"warc"}):
        raise CorpusError(
            "a backfill takes MediaWiki dump files, WikiExtractor output of a dump or WARC files, not "
            f"{' and '.join(sorted(formats))} files"
        )
    return formats.pop()


class BackfillResult(BaseModel):
    corpus: str  # the new dump's corpus snapshot
    index: str  # and its index
    previous: str | None  # the index whose vectors and trained FAISS index were reused; None: a full build
    blocks: int
    reused_blocks: int  # blocks whose vectors were copied, not embedded again
    vectors: bool = True  # False: the new index holds BM25 alone (nothing embedded)
    counts: dict[str, int]  # the new corpus snapshot's counts (WARC files: what was read, dropped and added)
    serving: str | None = None  # the index the store serves after the backfill (its serving pointer)
    sources: dict[str, str] = {}  # each source of the new corpus: "added", "replaced" or "kept" (as it was)


def source_changes(corpus: str, base: str | None) -> dict[str, str]:
    """What a backfill did to each source of its new corpus (:mod:`npmcore.sources`) against the corpus it
    followed: added, replaced (the same wiki, other files) or kept (the same files)."""
    before = {s.name: s.sha256 for s in open_corpus(base).sources} if base else {}
    return {
        s.name: "kept" if before.get(s.name) == s.sha256 else "replaced" if s.name in before else "added"
        for s in open_corpus(corpus).sources
    }


def newest_index(store: str, fingerprint: str, excluding_corpus: str) -> IndexSnapshot | None:
    """The index a backfill follows by default: of those of ``store`` made with encoder weights ``fingerprint``
    over another corpus, the served one, else the newest."""
    found = [IndexSnapshot(url, m) for url, m in list_snapshots(store, INDEX)]
    found = [i for i in found if i.encoder_fingerprint == fingerprint and i.corpus_id != excluding_corpus]
    pointer = read_serving(store)
    served = [i for i in found if pointer is not None and i.url == pointer.index]
    return (served or found)[-1] if found else None


def serve_backfill(store: str, index: str, previous: str | None, dump_date: date) -> str:
    """Move the serving pointer to a backfill's index when it served the index the backfill followed
    (or there is none yet); returns the decision."""
    pointer = read_serving(store)
    if pointer is not None and pointer.index == index:
        return "already served"
    if pointer is not None and pointer.index != previous:
        return f"kept {pointer.index}: the backfill followed {previous}, which it does not serve"
    set_serving(store, index, f"backfill of {dump_date.isoformat()}" + (f", after {previous}" if previous else ""))
    return f"serving {index}"


@flow(name="backfill_dump")
def backfill_dump(params: BackfillParams) -> BackfillResult:
    """Ingest a new dump (or extend the corpus with a month of WARC files) and index it incrementally."""
    files = expand_inputs(params.dump)
    kind = dump_format(files)
    uri = tracking_uri(params.store)  # an unreachable MLflow server fails now, not after the indexing
    start = time.perf_counter()
    with dask_cluster(params.cluster.dask_address, params.cluster.n_workers, params.store) as address:
        cluster = ClusterParams(dask_address=address)  # both stages on one cluster: its workers stay warm
        encoder = embedding_encoder(resolve_encoder(params.model, params.store))  # a query encoder's passage encoder
        fingerprint = encoder_fingerprint(cached_encoder(encoder)[1])
        # the corpus of the newest index: a dump copies its unchanged pages, WARC files extend it
        earlier = (
            open_index(params.previous)
            if params.previous
            else newest_index(params.store, fingerprint, excluding_corpus="")
        )
        base = earlier.corpus if earlier else None
        ingest_params = IngestParams(
            inputs=files,
            format=kind,
            store=params.store,
            cluster=cluster,
            pages_per_partition=params.pages_per_partition,
            lang=params.lang,
            strict=params.strict,
            previous=base if kind == "mediawiki" else None,
            extends=base,
            dump_date=params.dump_date,
        )
        corpus = ingest_corpus(ingest_params)
        if earlier is not None and corpus == earlier.corpus:  # files the corpus already holds: nothing new
            previous = index = earlier.url
        else:
            found = newest_index(params.store, fingerprint, open_corpus(corpus).manifest.id)
            previous = params.previous or (found.url if found else None)
            # an index of BM25 alone is followed by one: nothing to embed
            vectors = open_index(previous).vectors if previous else True
            index_params = IndexParams(
                store=params.store,
                corpus=corpus,
                model=encoder,
                vectors=vectors,
                precision=params.precision,
                cluster=cluster,
            )
            index = index_corpus(index_params, previous)
    built = open_index(index)
    datastore = open_datastore(built.datastore).manifest if built.vectors else None
    with tracking(uri, params.experiment), mlflow.start_run(run_name=f"backfill {params.dump_date}"):
        link_runs(uri)
        if params.serve:
            mlflow.set_tag("serving", serve_backfill(params.store, index, previous, params.dump_date))
        log_snapshot_input("corpus", corpus, "produced")
        log_snapshot_input("index", index, "produced")
        counts = open_corpus(corpus).manifest.counts
        changes = source_changes(corpus, base)
        mlflow.log_text("".join(f"{f}\n" for f in files), "dump_files.txt")
        mlflow.log_params(
            {
                "dump": files[0] if len(files) == 1 else f"{files[0]} and {len(files) - 1} more (dump_files.txt)",
                "dump_date": params.dump_date.isoformat(),
                "corpus": corpus,
                "corpus_id": open_corpus(corpus).manifest.id,
                "index": index,
                "previous_index": previous,
                "encoder": params.model or "default",
                "encoder_fingerprint": fingerprint,
                "vectors": built.vectors,
                "precision": built.precision,
                "sources": "; ".join(f"{name} {change}" for name, change in changes.items()),
            }
        )
        blocks = built.manifest.counts["blocks"]
        reused = datastore.counts["reused_blocks"] if datastore else 0  # BM25 alone: nothing embedded
        mlflow.log_metrics(
            {
                "blocks": blocks,
                "reused_blocks": reused,
                "reembedded_fraction": (blocks - reused) / max(blocks, 1),
                "seconds": time.perf_counter() - start,
                **{f"corpus.{k}": v for k, v in counts.items()},
            }
        )
    return BackfillResult(
        corpus=corpus,
        index=index,
        previous=previous,
        blocks=blocks,
        reused_blocks=reused,
        counts=counts,
        vectors=built.vectors,
        serving=None if (pointer := read_serving(params.store)) is None else pointer.index,
        sources=changes,
    )
