"""Datastore: a vector for every content token of a corpus snapshot, embedded shard by shard.

Every block of the corpus goes through the encoder once (batches of similar length, no
gradients); the vectors of its content tokens (the special tokens the tokenizer adds
around a text are dropped) are kept in float16. One datastore shard per corpus shard,
columnar and memory-mappable, no per-token Python objects::

    {store}/datastore/{id}/manifest.json
    {store}/datastore/{id}/shards/part-00000/vectors.npy   (n, d) float16: E(c) of each content token
    {store}/datastore/{id}/shards/part-00000/tokens.npy    (n,) int32: its token id
    {store}/datastore/{id}/shards/part-00000/offsets.npy   (blocks + 1,) int64: block b is rows offsets[b]:offsets[b+1]
    {store}/datastore/{id}/shards/part-00000.json          the shard's marker: file checksums and counts

Blocks keep the corpus shard's order, so a token's block and position follow from the
offsets. The build is resumable: shards are written into ``.partial-{id}`` (kept when a
build dies), a shard is finished once its marker is written (last), and a re-run skips
finished shards. The snapshot id is a digest of the corpus id, the encoder's weights, the
precision it computed in (f32 or bf16, :mod:`npmcore.index.precision`; ``auto`` is resolved first)
and the batching, so a different encoder or precision can never be mixed into an existing datastore.

Incremental builds (a new dump of the same wiki): with ``reuse``, a datastore of another
corpus snapshot embedded by the same encoder in the same precision, a block whose content hash
(title and text) is found there copies its vectors from it; only new and changed blocks go through
the encoder. Blocks absent from the new corpus are simply not carried over.
"""

import functools
import json
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import fsspec
import numpy as np
from distributed import Client

from npmcore.cluster import map_bounded
from npmcore.forward import BATCH_TOKENS, Forward, Precision, converted_forward, encode_ids
from npmcore.machine import has_gpu_driver
from npmcore.snapshots import DATASTORE, open_corpus, open_datastore, read_shard, shard_arrays
from npmcore.storage import (
    FileEntry,
    Manifest,
    SnapshotError,
    SnapshotWriter,
    existing_snapshot,
    join,
    save_array,
    snapshot_id,
    snapshot_url,
)

if TYPE_CHECKING:  # imported where used: it imports torch, which a worker need not
    from npmcore.index.precision import Setting

log = logging.getLogger(__name__)
EMBED_CHUNK = 512  # blocks encoded at a time (sorted by length within): bounds a worker's float32 states


@dataclass(frozen=True)
class DatastorePlan:
    """Everything a worker needs to embed one shard (small and picklable)."""

    id: str
    store: str
    corpus: str  # corpus snapshot URL
    encoder: str | None  # encoder path or name; None = the default MiniLM-L6
    fingerprint: str  # of the encoder's weights
    precision: Precision  # of the encoder's products (auto resolved on the planning machine)
    dim: int
    pad_id: int  # the tokenizer's padding token
    frame: tuple[int, int]  # special tokens the tokenizer puts before and after a block's text (dropped)
    batch_tokens: int  # padded tokens per forward batch
    tokens: int  # content tokens the datastore will hold (the corpus's, less each block's special tokens)
    shards: tuple[tuple[str, FileEntry], ...]  # corpus shard path and checksum, in order
    reuse: str | None = None  # datastore (same encoder and precision) whose vectors unchanged blocks copy

    @property
    def staging(self) -> str:
        return SnapshotWriter(self.store, DATASTORE, self.id, resumable=True).staging


@dataclass(frozen=True)
class EmbeddedShard:
    name: str  # "part-00000"
    files: dict[str, FileEntry]  # relative to the snapshot
    blocks: int
    tokens: int
    reused_blocks: int = 0  # blocks whose vectors were copied from the plan's ``reuse`` datastore
    resumed: bool = False  # finished by an earlier try (a killed worker's, a failed run's): not embedded again


def plan_datastore(
    corpus: str,
    store: str,
    encoder: str | None = None,
    batch_tokens: int = BATCH_TOKENS,
    reuse: str | None = None,
    precision: "Setting" = "auto",
) -> DatastorePlan:
    """Check the corpus and the encoder, resolve the precision (:func:`~npmcore.index.precision.resolve_precision`)
    and fix the datastore's id (loads the encoder once). ``reuse``: a datastore embedded by the same encoder
    in the same precision whose vectors unchanged blocks copy."""
    from npmcore.encoder import cached_encoder, encoder_fingerprint, special_frame  # torch: not the workers'
    from npmcore.index.precision import resolve_precision

    manifest = open_corpus(corpus).manifest
    if batch_tokens < 512:
        raise ValueError(f"batch_tokens must be >= 512, got {batch_tokens}")
    tokenizer, model = cached_encoder(encoder)
    fingerprint = encoder_fingerprint(model)
    frame = special_frame(tokenizer)
    resolved = resolve_precision(precision, model, tokenizer)
    config = {
        "corpus": manifest.id,
        "encoder": fingerprint,
        "precision": resolved,
        "batch_tokens": batch_tokens,
        "dtype": "float16",
    }
    if reuse is not None:
        previous = open_datastore(reuse)  # each worker verifies the shards it copies from (_reused_vectors)
        if previous.encoder_fingerprint != fingerprint:
            raise ValueError(
                f"datastore {reuse} was embedded by encoder weights {previous.encoder_fingerprint}, "
                f"not {fingerprint}: its vectors cannot be reused"
            )
        if previous.precision != resolved:
            raise ValueError(
                f"datastore {reuse} was embedded in {previous.precision}, not {resolved}: its vectors cannot be "
                f"reused (embed in {previous.precision}, or build without the previous index to embed every block)"
            )
        config["reuse"] = previous.manifest.id
    return DatastorePlan(
        id=snapshot_id(DATASTORE, [{"corpus": manifest.id}], config),
        store=store,
        corpus=corpus,
        encoder=encoder,
        fingerprint=fingerprint,
        precision=resolved,
        dim=model.config.hidden_size,
        pad_id=tokenizer.pad_token_id,
        frame=frame,
        batch_tokens=batch_tokens,
        tokens=manifest.counts["tokens"] - sum(frame) * manifest.counts["blocks"],
        shards=tuple(sorted(manifest.files.items())),
        reuse=reuse,
    )


def embedding_precision(encoder: str | None, precision: "Setting") -> Precision:
    """The precision ``encoder`` embeds in here under the setting ``precision`` (``auto`` resolved)."""
    from npmcore.encoder import cached_encoder
    from npmcore.index.precision import resolve_precision

    tokenizer, model = cached_encoder(encoder)
    return resolve_precision(precision, model, tokenizer)


def embedding_seconds(corpus: str, encoder: str | None, threads: int, precision: Precision) -> float:
    """The plan's estimate of embedding ``corpus`` on ``threads`` worker threads: its tokens at the rate
    of the encoder's forward in ``precision`` on one thread of this machine (the precision probe's,
    :func:`~npmcore.index.precision.forward_rates`, measured once and cached)."""
    from npmcore.encoder import cached_encoder
    from npmcore.index.precision import forward_rates

    tokenizer, model = cached_encoder(encoder)
    return open_corpus(corpus).manifest.counts["tokens"] / (forward_rates(model, tokenizer)[precision] * threads)


def shard_name(corpus_path: str) -> str:
    """``blocks/part-00003.parquet`` -> ``part-00003``."""
    return corpus_path.rsplit("/", 1)[-1].removesuffix(".parquet")


def embed_shard(plan: DatastorePlan, index: int) -> EmbeddedShard:
    """Embed corpus shard ``index`` into the staging area (skipped when already done); runs on a worker."""
    path, entry = plan.shards[index]
    name = shard_name(path)
    marker = join(plan.staging, "shards", f"{name}.json")
    fs, _ = fsspec.core.url_to_fs(marker)
    if fs.exists(marker):
        with fsspec.open(marker, "r") as f:
            done = json.load(f)
        log.info("datastore shard %s already embedded; skipped", name)
        return EmbeddedShard(
            name,
            {k: FileEntry(**v) for k, v in done["files"].items()},
            done["blocks"],
            done["tokens"],
            done["reused_blocks"],
            resumed=True,
        )
    forward = shard_forward(plan)
    table = read_shard(plan.corpus, path, entry, ["token_ids", "content_hash"])
    sequences = table.column("token_ids").to_pylist()
    before, after = plan.frame
    known = reusable_blocks(plan.reuse) if plan.reuse else {}
    found = [known.get(h) for h in table.column("content_hash").to_pylist()]
    fresh = [i for i, where in enumerate(found) if where is None]
    lengths = np.array([len(s) - before - after for s in sequences], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    # float16 rows filled as they come: memory holds the shard's vectors once, plus one chunk's float32 states
    vectors = np.empty((int(offsets[-1]), plan.dim), dtype=np.float16)
    for i, where in enumerate(found):
        if where is not None:
            vectors[offsets[i] : offsets[i + 1]] = _copied(plan.reuse, *where)
    for lo in range(0, len(fresh), EMBED_CHUNK):
        chunk = fresh[lo : lo + EMBED_CHUNK]
        for i, hidden in zip(chunk, encode_ids([sequences[i] for i in chunk], plan.pad_id, forward, plan.batch_tokens)):
            vectors[offsets[i] : offsets[i + 1]] = hidden[before : len(hidden) - after]
    arrays = {
        "vectors": vectors,
        "tokens": np.fromiter(
            (t for s in sequences for t in s[before : len(s) - after]), dtype=np.int32, count=int(offsets[-1])
        ),
        "offsets": offsets,
    }
    files = {}
    for key, array in arrays.items():
        relpath = f"shards/{name}/{key}.npy"
        files[relpath] = save_array(join(plan.staging, relpath), array)
    result = EmbeddedShard(name, files, len(sequences), int(lengths.sum()), len(sequences) - len(fresh))
    with fsspec.open(f"{marker}.tmp", "w") as f:  # last, and renamed: the shard counts as done only now
        json.dump(
            {
                "files": {k: asdict(v) for k, v in files.items()},
                **{k: v for k, v in asdict(result).items() if k not in ("name", "files", "resumed")},
            },
            f,
        )
    fs.mv(f"{marker}.tmp", marker)
    return result


@functools.lru_cache(maxsize=2)
def reusable_blocks(datastore: str) -> dict[str, tuple[str, int, int]]:
    """Content hash -> (shard name, first row, end row) of every block of a datastore (once per worker)."""
    snapshot = open_datastore(datastore)
    found = {}
    for (path, entry), name in zip(
        open_corpus(snapshot.corpus).shards, snapshot.manifest.config["shards"], strict=True
    ):
        hashes = read_shard(snapshot.corpus, path, entry, ["content_hash"]).column("content_hash").to_pylist()
        offsets = shard_arrays(datastore, name, snapshot.manifest.files)["offsets"]
        found.update((h, (name, int(offsets[i]), int(offsets[i + 1]))) for i, h in enumerate(hashes))
    return found


def _copied(datastore: str, name: str, lo: int, hi: int) -> np.ndarray:
    return np.asarray(_reused_vectors(datastore, name)[lo:hi])


@functools.lru_cache(maxsize=4)
def _reused_vectors(datastore: str, name: str) -> np.ndarray:
    """One shard's vectors of the reused datastore, opened (or, remote, read) and verified once, not per block."""
    return shard_arrays(datastore, name, open_datastore(datastore).manifest.files, verify=True)["vectors"]


def shard_forward(plan: DatastorePlan) -> Forward:
    """The encoder's forward that embeds a shard. On a Dask worker of a machine without a GPU driver whose cache
    holds the encoder converted to OpenVINO (a local cluster's, once the planner's precision probe or an earlier
    build converted it), that converted encoder on the worker's threads: torch and transformers are not
    imported, nor the weights loaded. Else the encoder loaded (:func:`~npmcore.encoder.fast_forward`: on the GPU
    where there is one, else converted here), with as many threads as the worker has (not every core)."""
    from distributed import get_worker

    try:
        threads = get_worker().state.nthreads
    except ValueError:  # not on a worker: this process's threads, its encoder probably loaded already
        threads = None
    if threads and not has_gpu_driver() and (forward := converted_forward(plan.fingerprint, threads, plan.precision)):
        return forward
    import torch

    from npmcore.encoder import cached_encoder, fast_forward

    if threads is not None:
        torch.set_num_threads(threads)
    return fast_forward(cached_encoder(plan.encoder)[1], plan.precision)


def commit_datastore(plan: DatastorePlan, results: list[EmbeddedShard]) -> str:
    """Write the manifest of a datastore whose shards are all embedded; returns its URL."""
    by_name = {r.name: r for r in results}
    missing = [shard_name(p) for p, _ in plan.shards if shard_name(p) not in by_name]
    if missing:
        raise SnapshotError(f"datastore {plan.id}: shards {missing[:5]} were not embedded")
    with SnapshotWriter(plan.store, DATASTORE, plan.id, resumable=True) as writer:
        for r in results:
            for relpath, entry in r.files.items():
                writer.add(relpath, entry)
        ordered = [by_name[shard_name(p)] for p, _ in plan.shards]
        manifest = Manifest(
            kind=DATASTORE,
            id=plan.id,
            inputs=[
                {"corpus": plan.corpus, "corpus_id": open_corpus(plan.corpus).manifest.id},
                *([{"reused": plan.reuse}] if plan.reuse else []),
            ],
            config={
                "encoder": plan.encoder or "default",
                "encoder_fingerprint": plan.fingerprint,
                "precision": plan.precision,
                "dim": plan.dim,
                "batch_tokens": plan.batch_tokens,
                "dtype": "float16",
                "shards": [r.name for r in ordered],
                "shard_tokens": [r.tokens for r in ordered],
                "shard_blocks": [r.blocks for r in ordered],
            },
            counts={
                "blocks": sum(r.blocks for r in results),
                "tokens": sum(r.tokens for r in results),
                "shards": len(results),
                "reused_blocks": sum(r.reused_blocks for r in results),
            },
            files=dict(writer.files),
        )
        return writer.commit(manifest)


def existing_datastore(plan: DatastorePlan) -> str | None:
    """URL of the finished, verified datastore of ``plan``, if there is one."""
    url = snapshot_url(plan.store, DATASTORE, plan.id)
    return url if existing_snapshot(url) else None


def build_datastore(
    corpus: str,
    store: str,
    encoder: str | None = None,
    client: Client | None = None,
    batch_tokens: int = BATCH_TOKENS,
    on_shard: Callable[[EmbeddedShard], None] | None = None,
    reuse: str | None = None,
    precision: "Setting" = "auto",
) -> str:
    """Embed every block of ``corpus`` (on the Dask cluster of ``client``, or here) in ``precision``;
    returns the datastore URL. A finished datastore is reused; an unfinished one is resumed. ``reuse``:
    a datastore of the same encoder and precision whose vectors unchanged blocks copy (incremental builds)."""
    plan = plan_datastore(corpus, store, encoder, batch_tokens, reuse, precision)
    if url := existing_datastore(plan):
        log.info("datastore %s already exists; nothing to do", url)
        return url
    results = []
    # the shards with the most to embed first, so that short ones fill the workers' gaps at the end: the largest
    # (by bytes) of a new datastore (the demo's embedding: 51 s, last first 54 s); the last of an incremental one,
    # whose new documents come last (a dump's newest pages, a month's WARC articles after the corpus it extends)
    order = (
        range(len(plan.shards) - 1, -1, -1)
        if plan.reuse
        else sorted(range(len(plan.shards)), key=lambda i: -plan.shards[i][1].bytes)
    )
    for result in map_bounded(functools.partial(embed_shard, plan), order, client):
        results.append(result)
        if on_shard is not None:
            on_shard(result)
    resumed = sum(r.resumed for r in results)
    if resumed:
        log.info(
            "datastore %s: %d shards embedded, %d finished by an earlier try", plan.id, len(results) - resumed, resumed
        )
    return commit_datastore(plan, results)
