"""FAISS indexes and index snapshots on the shared news datastore: merged IVF shards equal a
single build; compact indexes are searchable; broken files are refused."""

import shutil

import faiss
import numpy as np
import pytest
from reference import QUERIES

from npmcore.answer.inference import NPM, InferenceConfig
from npmcore.index import index_choice
from npmcore.index.datastore import build_datastore
from npmcore.index.faiss_index import (
    finalize,
    is_ivf,
    merge_ivf,
    read_index,
    rescore,
    sa_encode,
    search,
    stored_codes,
    train_index,
)
from npmcore.index.faiss_shards import trained_bytes
from npmcore.index.index_choice import BYTES_PER_TOKEN, IVF_FROM_TOKENS, choose_index, default_train_size, index_rates
from npmcore.index.indexer import IndexConfig, build_index, plan_index, training_sample
from npmcore.snapshots import DatastoreRows, iter_shards, open_index
from npmcore.storage import SnapshotError, sha256_bytes


@pytest.mark.parametrize("on_disk", [False, True])
def test_shards_encoded_on_the_workers_equal_a_single_shot_build(news_store, on_disk):
    """IVF shard indexes filled apart and merged (in memory, or into memory-mapped lists), and PQ codes
    encoded apart and appended, against the same trained index filled with every vector at once."""
    shards = list(iter_shards(news_store.datastore))
    vectors = np.concatenate([np.asarray(a["vectors"], dtype=np.float32) for _, a in shards])
    queries = vectors[::301][:50]
    factories = ["IVF16,PQ8np"] if on_disk else ["IVF16,PQ8np", "RR384,PQ8np"]  # RR: a rotation trained at once
    for factory in factories:
        url = build_index(
            news_store.datastore, IndexConfig(factory=factory, train_size=4000, on_disk=on_disk, bm25=False)
        )
        built = NPM(url).retrieval.index
        single = faiss.read_index(f"{url}/trained.faiss")  # the trained, empty index the snapshot keeps
        if is_ivf(single):
            single.add_with_ids(vectors, np.arange(len(vectors)))
            for index in (single, built):
                faiss.extract_index_ivf(index).nprobe = 4
        else:
            single.add(vectors)
        finalize(single)
        D, I = search(single, queries, 20)
        D2, I2 = search(built, queries, 20)
        np.testing.assert_array_equal(I, I2)
        np.testing.assert_array_equal(D, D2)
        ids = np.arange(0, built.ntotal, 97)
        np.testing.assert_array_equal(single.reconstruct_batch(ids), built.reconstruct_batch(ids))


def test_workers_read_the_trained_index_by_url_and_refuse_another(tmp_path):
    """The shards' tasks carry the trained index's URL and checksum, not its bytes (megabytes of IVF
    centroids in every task graph); a file that is not the one planned is refused."""
    path = tmp_path / "trained.faiss"
    path.write_bytes(faiss.serialize_index(faiss.index_factory(8, "IVF4,PQ2np")).tobytes())
    data = path.read_bytes()
    assert trained_bytes(str(path), sha256_bytes(data)) == data
    with pytest.raises(SnapshotError, match="trained.faiss: the trained index changed"):
        trained_bytes(str(path), sha256_bytes(b"another index"))


@pytest.mark.parametrize("tokens", [15_000, 30_000_000])
def test_the_default_factory_is_a_pq_within_the_byte_budget_rotated_before_an_ivf(tokens):
    choice = choose_index(384, tokens)
    index = faiss.index_factory(384, choice.factory, faiss.METRIC_INNER_PRODUCT)
    ivf = tokens > IVF_FROM_TOKENS
    assert is_ivf(index) == ivf
    assert isinstance(faiss.downcast_index(index), faiss.IndexPreTransform) == ivf  # the OPQ rotation
    assert choice.disk_bytes <= BYTES_PER_TOKEN * tokens  # codes, IVF ids and direct map, a uint16 token id
    assert choice.rerank > 1  # compressed codes find a shortlist; the datastore scores it


def test_a_memory_budget_moves_the_lists_to_disk_or_is_refused_with_the_least_one():
    tokens = 100_000_000
    in_ram = choose_index(384, tokens)
    assert in_ram.on_disk is False and in_ram.ram_bytes > 4 * 2**30
    mapped = choose_index(384, tokens, max_memory=2 * 2**30)
    assert mapped.on_disk and mapped.ram_bytes <= 2 * 2**30 and "IVF" in mapped.factory
    with pytest.raises(ValueError, match=r"max_memory 0.10 GiB is too little for 100,000,000 tokens"):
        choose_index(384, tokens, max_memory=int(0.1 * 2**30))


def test_exact_indexes_are_not_re_ranked_and_bad_factories_are_refused():
    assert choose_index(384, 1000, factory="Flat").rerank == 1
    with pytest.raises(ValueError, match="invalid FAISS index-factory string 'IVF16,PQ7x'"):
        choose_index(384, 1000, factory="IVF16,PQ7x")
    with pytest.raises(ValueError, match="on_disk needs an IVF index"):
        choose_index(384, 1000, factory="OPQ8,PQ8np", on_disk=True)


def test_rescoring_a_shortlist_equals_brute_force_over_it(news_store):
    rows = DatastoreRows(news_store.datastore)
    rng = np.random.default_rng(0)
    queries = rng.standard_normal((5, 384)).astype(np.float32)
    shortlist = rng.choice(rows.first[-1], size=(5, 40), replace=False)
    shortlist[1, 30:] = -1  # fewer found than k
    D, I = rescore(queries, shortlist, rows.gather, 35)
    for q, found, d, ids in zip(queries, shortlist, D, I, strict=True):
        found = found[found >= 0]
        exact = np.array([rows.rows(int(i), int(i) + 1)[0] @ q for i in found])  # one row at a time: the reference
        order = np.argsort(-exact, kind="stable")[:35]
        np.testing.assert_array_equal(ids[: len(order)], found[order])
        np.testing.assert_allclose(d[: len(order)], exact[order], rtol=1e-5, atol=1e-4)
        assert (ids[len(order) :] == -1).all()


@pytest.mark.parametrize(
    ("tokens", "train_size"),
    [(15_000, 20_000), (683_959, 21_373), (2_000_000, 62_500), (13_098_336, 100_000)],  # the demo's: 683,959
)
def test_the_default_training_sample_is_sized_to_the_corpus(tokens, train_size):
    assert default_train_size(tokens) == train_size


def test_an_ivf_gets_enough_training_vectors_per_list():
    assert default_train_size(2_000_000, nlist=4096) == 4096 * 30


def test_an_index_plan_records_its_training_size_in_its_id(news_store):
    sized, given = plan_index(news_store.datastore), plan_index(news_store.datastore, IndexConfig(train_size=20_000))
    assert sized.choice.train_size == 20_000 and sized.id == given.id  # the news datastore is small: the least sample
    assert plan_index(news_store.datastore, IndexConfig(train_size=30_000)).id != sized.id


def test_the_training_sample_is_read_row_by_row_and_drawn_evenly(news_store):
    sample = training_sample(news_store.datastore, 500)
    everything = np.concatenate(
        [np.asarray(a["vectors"], dtype=np.float32) for _, a in iter_shards(news_store.datastore)]
    )
    pick = np.sort(np.random.default_rng(0).choice(len(everything), size=500, replace=False))
    np.testing.assert_array_equal(sample, everything[pick])


@pytest.mark.parametrize("factory", ["RR384,PQ8np", pytest.param(None, marks=pytest.mark.slow)])
def test_a_compact_index_snapshot_searches_its_own_decoded_vectors_exactly(news_store, factory):
    """A compact index (a random rotation and PQ codes; None: the default factory, PQ codes alone)
    against brute force over the vectors its codes decode to (IVF indexes: the merged-shards
    test above and the CLI test)."""
    url = build_index(news_store.datastore, IndexConfig(factory=factory, train_size=3_000, bm25=False))
    npm = NPM(url)
    answers = npm.predict(QUERIES[:2], InferenceConfig(restrict=False, k=256))
    assert all(len(a) == 5 for a in answers)
    assert (
        npm.retrieval.index.sa_code_size() + npm.corpus.tokens.itemsize <= 64
    )  # a PQ code and a uint16 token id, no ids
    assert open_index(url).manifest.config["rerank"] > 1
    queries = npm.encode_queries(QUERIES, 2).reshape(-1, npm.retrieval.index.d)
    decoded = npm.retrieval.index.reconstruct_n(
        0, npm.retrieval.index.ntotal
    )  # rotated back: inner products are unchanged
    scores, ids = search(npm.retrieval.index, queries, 50)
    exact = queries @ decoded.T
    np.testing.assert_allclose(scores, np.take_along_axis(exact, ids, 1), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(scores, -np.sort(-exact, axis=1)[:, :50], rtol=1e-4, atol=1e-4)


def test_a_corrupted_or_missing_index_file_is_an_error(news_store, tmp_path):
    broken = tmp_path / "index" / "broken"
    shutil.copytree(news_store.index, broken)
    with open(broken / "tokens.npy", "r+b") as f:
        f.seek(200)
        f.write(b"\x00\x01")
    with pytest.raises(SnapshotError, match="checksum mismatch in tokens.npy"):
        NPM(str(broken))
    (broken / "index.faiss").unlink()
    with pytest.raises(SnapshotError, match="index.faiss is missing"):
        NPM(str(broken))


@pytest.mark.parametrize("factory", ["OPQ32,PQ32np", "OPQ32,IVF16,PQ32np"])
def test_codes_found_by_blas_are_faiss_codes_up_to_ties(news_store, factory):
    """sa_encode against the index's own encoder on the shared datastore's vectors: the same list and
    the same centroids, or, where a centroid differs, one exactly as near (brute force, float64)."""
    vectors = np.concatenate([np.asarray(a["vectors"], dtype=np.float32) for _, a in iter_shards(news_store.datastore)])
    index = faiss.index_factory(vectors.shape[1], factory, faiss.METRIC_INNER_PRODUCT)
    rotation = faiss.downcast_VectorTransform(index.chain.at(0))
    rotation.niter = rotation.niter_pq_0 = 2  # a rotation, if a poor one: training it well takes a minute
    index.train(vectors[::4])
    ours, theirs = sa_encode(index, vectors), index.sa_encode(vectors)
    assert ours.shape == theirs.shape and (ours == theirs).all(axis=1).mean() > 0.999
    inner = faiss.downcast_index(index.index)
    pq, skip = inner.pq, index.sa_code_size() - inner.pq.code_size  # skip: the IVF list number's bytes
    np.testing.assert_array_equal(ours[:, :skip], theirs[:, :skip])
    rows = np.flatnonzero((ours != theirs).any(axis=1))
    x = index.chain.at(0).apply(vectors[rows]).astype(np.float64)
    if skip:  # IVF-PQ encodes the residual from the list's centroid
        lists = theirs[rows, :skip].astype(np.int64) @ (256 ** np.arange(skip))
        x -= inner.quantizer.reconstruct_batch(lists)
    centroids = faiss.vector_to_array(pq.centroids).reshape(pq.M, pq.ksub, pq.dsub).astype(np.float64)
    for m in range(pq.M):
        sub = x[:, m * pq.dsub : (m + 1) * pq.dsub]
        distances = ((sub[:, None] - centroids[m][None]) ** 2).sum(-1)
        picked = distances[np.arange(len(rows)), ours[rows, skip + m]]
        # BLAS finds |x|^2 - 2 x.c + |c|^2 in float32: rounding of the order of eps (|x|^2 + |c|^2)
        rounding = 1e-5 * ((sub**2).sum(-1) + (centroids[m] ** 2).sum(-1).max())
        assert (picked - distances.min(axis=1) <= rounding).all()


def test_stored_codes_are_the_codes_faiss_encodes_in_memory_and_on_disk(news_store, tmp_path):
    """An index's codes found by id (flat: by position; IVF: through the direct map, in memory or in
    memory-mapped lists) against FAISS's own sa_encode of the same vectors."""
    vectors = np.asarray(next(iter_shards(news_store.datastore))[1]["vectors"], dtype=np.float32)[:3000]
    ids = np.random.default_rng(0).permutation(len(vectors))[:500]
    for factory in ("PQ8np", "IVF300,PQ8np"):  # 300 lists: a two-byte list number
        index = faiss.index_factory(vectors.shape[1], factory, faiss.METRIC_INNER_PRODUCT)
        index.train(vectors)
        empty = faiss.clone_index(index)
        index.add(vectors)
        finalize(index)
        np.testing.assert_array_equal(stored_codes(index, ids), index.sa_encode(vectors[ids]))
    faiss.write_index(index, str(tmp_path / "shard.faiss"))
    on_disk = merge_ivf(empty, [str(tmp_path / "shard.faiss")], str(tmp_path / "index.ivfdata"))
    np.testing.assert_array_equal(stored_codes(finalize(on_disk), ids), index.sa_encode(vectors[ids]))
    with pytest.raises(ValueError, match="direct map"):
        faiss.extract_index_ivf(index).set_direct_map_type(faiss.DirectMap.NoMap)
        stored_codes(index, ids)


@pytest.mark.parametrize("factory,on_disk", [("PQ8np", False), ("IVF16,PQ8np", False), ("IVF16,PQ8np", True)])
def test_an_index_over_copied_vectors_copies_their_codes_instead_of_encoding_them(
    news_store, tmp_path, monkeypatch, factory, on_disk
):
    """An incremental build (the previous index's trained index, a datastore that copied its vectors)
    takes the previous index's codes of copied blocks; here every block is copied: nothing is encoded."""
    config = IndexConfig(factory=factory, train_size=3_000, on_disk=on_disk, bm25=False)
    first = build_index(news_store.datastore, config)
    copied = build_datastore(news_store.corpus, str(tmp_path), reuse=news_store.datastore, precision="f32")
    never = lambda *_: pytest.fail("a copied vector was encoded again")  # noqa: E731
    monkeypatch.setattr("npmcore.index.faiss_shards.sa_encode", never)
    second = build_index(copied, IndexConfig(bm25=False), trained=first)
    first_index, second_index = (read_index(f"{url}/index.faiss") for url in (first, second))
    everything = np.arange(first_index.ntotal)
    np.testing.assert_array_equal(stored_codes(first_index, everything), stored_codes(second_index, everything))


def test_an_opq_rotation_trains_the_rounds_asked_and_none_is_refused():
    sample = np.random.default_rng(0).standard_normal((2_000, 32)).astype(np.float32)
    index = train_index("OPQ8,PQ8x4np", sample, opq_iterations=3)
    assert faiss.downcast_VectorTransform(index.chain.at(0)).niter == 3
    with pytest.raises(ValueError, match="opq_iterations must be >= 1, got 0"):
        train_index("OPQ8,PQ8x4np", sample, opq_iterations=0)


def test_the_plan_costs_the_build_at_this_machines_rates_measured_once(tmp_path, monkeypatch):
    """The index-rate probe times the factory here (its IVF's k-means and assignment apart), once per machine,
    factory and dimension: a second plan reads the cache; the plan's seconds are the sample's and the corpus's at
    those rates."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    for name, value in (("PROBE_TRAIN", 2_000), ("PROBE_ENCODE", 4_096), ("PROBE_LISTS", 16)):  # a small probe
        monkeypatch.setattr(index_choice, name, value)
    calls = []
    measure = index_choice.train_index

    def counted(factory, sample, *args):
        calls.append((factory, len(sample)))
        return measure(factory, sample, *args)

    monkeypatch.setattr(index_choice, "train_index", counted)
    exhaustive = choose_index(64, 50_000, factory="OPQ8,PQ8x4np")
    rates = index_rates("OPQ8,PQ8x4np", 64)
    assert calls == [("OPQ8,PQ8x4np", index_choice.PROBE_TRAIN)]
    assert set(rates) == {"train_s_per_vector", "encode_tokens_per_s"}
    assert all(v > 0 for v in rates.values())
    assert exhaustive.train_s == pytest.approx(exhaustive.train_size * rates["train_s_per_vector"])
    assert exhaustive.encode_s == pytest.approx(50_000 / rates["encode_tokens_per_s"])
    ivf = choose_index(64, 50_000, factory="OPQ8,IVF32,PQ8x4np")
    ivf_rates = index_rates("OPQ8,IVF32,PQ8x4np", 64)  # the same shape without the IVF, and the k-means timed
    assert calls[-1] == ("OPQ8,PQ8x4np", index_choice.PROBE_TRAIN)
    assert set(ivf_rates) == {*rates, "kmeans_s_per_point_list", "assign_s_per_point_list"}
    n = ivf.train_size
    kmeans = n * 32 * ivf_rates["kmeans_s_per_point_list"]
    assert ivf.train_s == pytest.approx(n * ivf_rates["train_s_per_vector"] + kmeans)
    # every vector's codes, and its assignment to one of the 32 lists
    assign = 50_000 * 32 * ivf_rates["assign_s_per_point_list"]
    assert ivf.encode_s == pytest.approx(50_000 / ivf_rates["encode_tokens_per_s"] + assign)
    assert choose_index(64, 50_000, factory="Flat").train_s == 0.0
    probed = len(calls)
    assert index_rates("OPQ8,PQ8x4np", 64) == rates and len(calls) == probed  # cached: not measured again
    assert len(list((tmp_path / "npmcore" / "index-rates").iterdir())) == 2  # OPQ8,PQ8x4np alone and with its IVF
