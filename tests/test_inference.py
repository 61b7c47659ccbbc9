"""Datastore, index and NPM inference on a small real corpus, against brute-force references."""

import math
from collections import defaultdict

import faiss
import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from conftest import kill_once
from flows.cli import app
from npmcore.datastore import build_datastore, iter_shards
from npmcore.encoder import encode, load_encoder
from npmcore.index import add_all, add_shard, finalize, merge_ivf, search, train_index
from npmcore.indexer import IndexConfig, build_index, training_sample
from npmcore.inference import NPM, InferenceConfig, QueryError, label_token_ids
from npmcore.ingest import IngestConfig, ingest, read_blocks
from npmcore.phrases import candidate_spans
from npmcore.storage import SnapshotError, open_snapshot
from npmcore.vocab import FUNCTION_WORDS

ARTICLES = 60  # Lee news articles in the test corpus (about 15k tokens)
QUERIES = [  # real sentences of those articles with one word masked
    "The Prime Minister, John [MASK], has revealed he will go to Indonesia for a summit meeting.",
    "The Federal Government says it is considering [MASK] from the Australian Council of Trade Unions.",
    "Firefighters are battling a bushfire near [MASK].",
    "Police say the man was [MASK] after the incident.",
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, news_lines) -> str:
    path = tmp_path_factory.mktemp("raw") / "news.txt"
    path.write_text("\n".join(news_lines[:ARTICLES]) + "\n")
    # small partitions: several shards, so merging and resuming have something to do
    return ingest([str(path)], str(tmp_path_factory.mktemp("store")), IngestConfig(partition_bytes=25_000))


@pytest.fixture(scope="module")
def datastore(corpus) -> str:
    return build_datastore(corpus, corpus.rsplit("/corpus/", 1)[0])


@pytest.fixture(scope="module")
def flat(datastore) -> NPM:
    return NPM(build_index(datastore, IndexConfig(factory="Flat")))


# --- brute force: the paper's formulas, with loops ----------------------------------------


def corpus_blocks(corpus_url: str, tokenizer) -> list[list[int]]:
    """Content token ids of every block (the special tokens around each block dropped)."""
    rows = [ids for t in read_blocks(corpus_url, ["token_ids"]) for ids in t.column("token_ids").to_pylist()]
    return [ids[1:-1] for ids in rows]  # MiniLM: [CLS] … [SEP]


def is_stopword(tokenizer, word: list[int]) -> bool:
    """A word (its token ids) is a function word or punctuation, read from its decoded text."""
    text = tokenizer.decode(word).strip().lower()
    return text in FUNCTION_WORDS or not any(c.isalnum() for c in text)


def brute_force(blocks, vectors, block_numbers, q_start, q_end, tables, k, l_max, tau, tokenizer):
    """Phrase -> normalised score, by enumerating spans around the exact top-k tokens of
    ``block_numbers`` whose first and last words are content words."""
    where = [(b, p) for b in block_numbers for p in range(len(blocks[b]))]
    V = np.concatenate([vectors[b] for b in block_numbers]).astype(np.float64)
    d = V.shape[1]
    s_sim, e_sim = V @ q_start / math.sqrt(d), V @ q_end / math.sqrt(d)
    starts, ends = np.argsort(-s_sim)[:k], np.argsort(-e_sim)[:k]
    index_of = {bp: i for i, bp in enumerate(where)}

    def word_start(b, p):
        toks = blocks[b]
        return p == 0 or tables.word_start[toks[p]] or tables.boundary[toks[p - 1]]

    def whole(b, first, last):
        toks = blocks[b]
        if any(tables.special[toks[i]] for i in range(first, last + 1)):
            return False
        return word_start(b, first) and (last + 1 == len(toks) or word_start(b, last + 1))

    def content(b, first, last):
        toks = blocks[b]
        starts = [p for p in range(first, last + 1) if word_start(b, p)] + [last + 1]
        return not is_stopword(tokenizer, toks[first : starts[1]]) and not is_stopword(tokenizer, toks[starts[-2] : last + 1])

    positions = set()
    for i in starts:
        b, p = where[i]
        for j in range(l_max):
            if p + j < len(blocks[b]) and whole(b, p, p + j) and content(b, p, p + j):
                positions.add((b, p, p + j))
    for i in ends:
        b, p = where[i]
        for j in range(l_max):
            if p - j >= 0 and whole(b, p - j, p) and content(b, p - j, p):
                positions.add((b, p - j, p))
    scores = defaultdict(float)
    for b, first, last in positions:
        phrase = tuple(blocks[b][first : last + 1])
        scores[phrase] += math.exp(s_sim[index_of[(b, first)]] / tau) + math.exp(e_sim[index_of[(b, last)]] / tau)
    total = sum(scores.values())
    return sorted(((p, s / total) for p, s in scores.items()), key=lambda item: -item[1])


def assert_same_answers(answers, reference, n=5):
    assert [a.token_ids for a in answers[:n]] == [p for p, _ in reference[:n]]
    np.testing.assert_allclose([a.score for a in answers[:n]], [s for _, s in reference[:n]], atol=1e-4)


# --- tests ------------------------------------------------------------------------------


def test_datastore_holds_every_content_token(corpus, datastore, tokenizer):
    blocks = corpus_blocks(corpus, tokenizer)
    shards = list(iter_shards(datastore))
    assert len(shards) == open_snapshot(corpus).counts["shards"] >= 3
    tokens = np.concatenate([a["tokens"] for _, a in shards])
    assert tokens.tolist() == [t for b in blocks for t in b]
    assert sum(len(a["offsets"]) - 1 for _, a in shards) == len(blocks)
    _, model = load_encoder()
    first = encode(model, tokenizer, [[tokenizer.cls_token_id, *blocks[0], tokenizer.sep_token_id]])[0][1:-1]
    np.testing.assert_allclose(shards[0][1]["vectors"][: len(blocks[0])], first, atol=2e-2, rtol=1e-2)  # float16


def test_flat_pipeline_equals_brute_force(flat, corpus, datastore, tokenizer):
    blocks = corpus_blocks(corpus, tokenizer)
    vectors = np.split(np.concatenate([a["vectors"] for _, a in iter_shards(datastore)]), np.cumsum([len(b) for b in blocks])[:-1])
    config = InferenceConfig(k=200, l_max=10, tau=1.0, restrict=False, answers=5)
    q = flat.encode_queries(QUERIES, 2)
    for query, answers, (q_start, q_end) in zip(QUERIES, flat.predict(QUERIES, config), q, strict=True):
        reference = brute_force(blocks, vectors, range(len(blocks)), q_start, q_end, flat.corpus.tables, 200, 10, 1.0, tokenizer)
        assert_same_answers(answers, reference)


def test_restricted_mode_scores_exactly_the_tokens_of_the_top_bm25_passages(flat, corpus, tokenizer):
    blocks = corpus_blocks(corpus, tokenizer)
    _, model = load_encoder()
    config = InferenceConfig(restrict=True, passages=3, tau=2.0)
    q = flat.encode_queries(QUERIES, 2)
    for query, answers, (q_start, q_end) in zip(QUERIES, flat.predict(QUERIES, config), q, strict=True):
        top = flat.bm25_blocks(query, 3)
        assert len(top) == 3
        hidden = encode(model, tokenizer, [[tokenizer.cls_token_id, *blocks[b], tokenizer.sep_token_id] for b in top])
        vectors = {b: h[1:-1] for b, h in zip(top, hidden, strict=True)}
        everything = sum(len(blocks[b]) for b in top)
        reference = brute_force(blocks, vectors, top, q_start, q_end, flat.corpus.tables, everything, 10, 2.0, tokenizer)
        assert_same_answers(answers, reference)
        assert {e.block for a in answers for e in a.evidence} <= set(top)


def test_npm_single_sums_the_exact_top_k_by_token(flat, tokenizer):
    config = InferenceConfig(k=200, tau=0.5, restrict=False, answers=5)
    queries = QUERIES
    q = flat.encode_queries(queries, 1)[:, 0] * flat.scale
    V = np.asarray(flat.index.reconstruct_n(0, flat.index.ntotal), dtype=np.float64)
    tokens = np.asarray(flat.corpus.tokens)
    for answers, qv in zip(flat.predict_tokens(queries, config), q, strict=True):
        sims = V @ qv
        top = np.argsort(-sims)[:200]
        scores = defaultdict(float)
        for i in top:
            if not is_stopword(tokenizer, [int(tokens[i])]):
                scores[int(tokens[i])] += math.exp(sims[i] / 0.5)
        total = sum(scores.values())
        reference = sorted(((t, v / total) for t, v in scores.items()), key=lambda item: -item[1])[:5]
        assert [a.token_ids[0] for a in answers] == [t for t, _ in reference]
        np.testing.assert_allclose([a.score for a in answers], [v for _, v in reference], atol=1e-4)
        assert all(tokens[e.first] == a.token_ids[0] for a in answers for e in a.evidence)


def test_spans_are_whole_words_inside_one_block(flat):
    corpus = flat.corpus
    rng = np.random.default_rng(0)
    anchors = rng.choice(len(corpus.tokens), 500, replace=False)
    spans = candidate_spans(corpus, anchors, anchors[::-1].copy(), l_max=4)
    pieces = flat.tokenizer.convert_ids_to_tokens(np.asarray(corpus.tokens).tolist())
    assert len(spans) > 300
    for first, last in spans.tolist():
        assert 0 <= last - first < 4
        assert corpus.block_of(np.array([first]))[0] == corpus.block_of(np.array([last]))[0]
        assert not pieces[first].startswith("##")
        assert last + 1 == len(pieces) or last + 1 in corpus.offsets or not pieces[last + 1].startswith("##")
        assert first in anchors or last in anchors
    # a word piece never starts a span, and the word it belongs to is a candidate only whole
    piece = next(i for i in range(1, len(pieces)) if pieces[i].startswith("##") and i not in corpus.offsets)
    assert all(first != piece for first, _ in candidate_spans(corpus, np.array([piece]), np.array([-1]), 10).tolist())


def test_evidence_points_at_the_answer_in_the_passage(flat):
    answers = flat.predict(QUERIES[:1], InferenceConfig(restrict=True))[0]
    for answer in answers:
        best = flat.evidence_dict(answer.evidence[0])
        assert best["text"][best["start"] : best["end"]] == answer.text  # the answer is the passage's own text
        for evidence in answer.evidence:
            ev = flat.evidence_dict(evidence)
            spelled = flat.tokenizer(ev["text"][ev["start"] : ev["end"]], add_special_tokens=False)["input_ids"]
            assert tuple(spelled) == answer.token_ids


def test_answers_keep_hyphens_and_case_as_the_passage_writes_them(flat):
    """Decoding word pieces again would give "australian - based"; the passage says "Australian-based"."""
    from npmcore.inference import Evidence

    tokens, offsets = np.asarray(flat.corpus.tokens), flat.corpus.offsets
    hyphen = flat.tokenizer.convert_tokens_to_ids("-")
    inside = [i for i in np.flatnonzero(tokens == hyphen) if flat.corpus.block_of(np.array([i - 1, i + 1])).tolist() == [flat.corpus.block_of(np.array([i]))[0]] * 2]
    assert len(inside) > 5
    for i in inside[:5]:
        block = int(flat.corpus.block_of(np.array([i]))[0])
        text = flat.surface(Evidence(block, int(i) - 1, int(i) + 1, 1.0))
        decoded = flat.tokenizer.decode(tokens[i - 1 : i + 2].tolist())
        assert "-" in text and " ".join(text.lower().replace("-", " - ").split()) == decoded, (text, decoded)
        assert text in flat.passage(block).text


def test_merged_ivf_index_equals_a_single_shot_build(datastore, tmp_path):
    sample = training_sample(datastore, 5000)
    trained = train_index("IVF16,PQ16", sample)
    shards = list(iter_shards(datastore))
    paths = []
    for i, (first, arrays) in enumerate(shards):
        paths.append(str(tmp_path / f"{i}.faiss"))
        faiss.write_index(add_shard(trained, arrays["vectors"], first), paths[-1])
    single = finalize(add_all(faiss.clone_index(trained), [(f, a["vectors"]) for f, a in shards]))
    in_memory = finalize(merge_ivf(trained, paths))
    on_disk = finalize(merge_ivf(trained, paths, str(tmp_path / "lists.ivfdata")))
    queries = np.asarray(shards[0][1]["vectors"][:50], dtype=np.float32)
    for index in (single, in_memory, on_disk):
        faiss.extract_index_ivf(index).nprobe = 4
    D, I = search(single, queries, 20)
    for merged in (in_memory, on_disk):
        D2, I2 = search(merged, queries, 20)
        np.testing.assert_array_equal(I, I2)
        np.testing.assert_array_equal(D, D2)
        ids = np.arange(0, merged.ntotal, 97)
        np.testing.assert_array_equal(single.reconstruct_batch(ids), merged.reconstruct_batch(ids))


@pytest.mark.parametrize("factory", [None, "IVF16,PQ16"])
def test_compact_index_snapshots_are_searchable(datastore, factory):
    url = build_index(datastore, IndexConfig(factory=factory, train_size=10_000, bm25=False))
    manifest = open_snapshot(url)
    assert manifest.config["factory"] == (factory or "PQ48np")
    npm = NPM(url)
    answers = npm.predict(QUERIES[:2], InferenceConfig(restrict=False, k=256))
    assert all(len(a) == 5 for a in answers)
    if factory is None:  # per token: the PQ code and a uint16 token id, no ids (fixed codebooks aside)
        assert npm.index.sa_code_size() + npm.corpus.tokens.itemsize <= 64
    with pytest.raises(ValueError, match="invalid FAISS index-factory string 'IVF16,PQ7x'"):
        build_index(datastore, IndexConfig(factory="IVF16,PQ7x"))


def test_resume_after_a_killed_shard_equals_a_clean_build(corpus, datastore, tmp_path):
    import shutil

    store = tmp_path / "store"
    shutil.copytree(corpus, store / "corpus" / corpus.rsplit("/", 1)[1])
    copy = str(store / "corpus" / corpus.rsplit("/", 1)[1])
    script = f"from npmcore.datastore import build_datastore\nbuild_datastore({copy!r}, {str(store)!r})\n"
    kill_once(script, store, "datastore/.partial-*/shards/part-00000.json")
    marker = next(store.glob("datastore/.partial-*/shards/part-00000.json"))
    done_at = marker.stat().st_mtime_ns
    with pytest.raises(SnapshotError):
        open_snapshot(str(marker.parent.parent))
    resumed = build_datastore(copy, str(store))
    assert marker.exists() is False  # the staging folder became the snapshot
    assert (store / "datastore" / resumed.rsplit("/", 1)[1] / "shards" / "part-00000.json").stat().st_mtime_ns == done_at
    assert open_snapshot(resumed).files == open_snapshot(datastore).files  # identical to the clean build


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("No mask in this sentence.", "exactly one \\[MASK\\], found 0"),
        ("[MASK] and [MASK].", "exactly one \\[MASK\\], found 2"),
        ("word " * 600 + "[MASK].", "longer than the encoder's limit of 512"),
    ],
)
def test_bad_queries_are_refused(flat, query, message):
    with pytest.raises(QueryError, match=message):
        flat.predict([query])


def test_an_index_refuses_another_tokenizer_and_another_encoders_knn_search(flat, roberta_dir, tmp_path):
    with pytest.raises(ValueError, match="another tokenizer"):
        NPM(flat.url, encoder=str(roberta_dir))
    tokenizer, model = load_encoder()
    with torch.no_grad():
        model.embeddings.word_embeddings.weight.mul_(1.1)  # other weights, same tokenizer
    model.save_pretrained(tmp_path / "other")
    tokenizer.save_pretrained(tmp_path / "other")
    other = NPM(flat.url, encoder=str(tmp_path / "other"))
    with pytest.raises(ValueError, match="kNN search needs an index built with this encoder"):
        other.predict(QUERIES[:1], InferenceConfig(restrict=False))
    # BM25-restricted queries encode their passages again: they need no vectors of the index
    config = InferenceConfig(restrict=True, passages=3)
    mine, reference = other.restricted(QUERIES[:2], 3), flat.restricted(QUERIES[:2], 3)
    for (ids, vectors), (ref_ids, ref_vectors) in zip(mine, reference, strict=True):
        np.testing.assert_array_equal(ids, ref_ids)
        assert not np.allclose(vectors, ref_vectors, atol=1e-3)  # this encoder's vectors
    assert [a.text for a in other.predict(QUERIES[:2], config)[0]]


def test_a_corrupted_or_missing_index_file_is_an_error(datastore, tmp_path):
    import shutil

    url = build_index(datastore, IndexConfig(factory="Flat", bm25=False))
    broken = tmp_path / "index" / "broken"
    shutil.copytree(url, broken)
    with open(broken / "tokens.npy", "r+b") as f:
        f.seek(200)
        f.write(b"\x00\x01")
    with pytest.raises(SnapshotError, match="checksum mismatch in tokens.npy"):
        NPM(str(broken))
    (broken / "index.faiss").unlink()
    with pytest.raises(SnapshotError, match="index.faiss is missing"):
        NPM(str(broken))


def test_cli_index_and_query(corpus, datastore, tmp_path):
    import shutil

    runner = CliRunner()
    store = str(tmp_path / "store")  # a new store: the flow embeds every shard (a task each, on Dask) again
    shutil.copytree(corpus, f"{store}/corpus/{corpus.rsplit('/', 1)[1]}")
    corpus = f"{store}/corpus/{corpus.rsplit('/', 1)[1]}"
    built = runner.invoke(app, ["index", "--store", store, "--corpus", corpus, "--factory", "IVF16,PQ16", "--workers", "2"])
    assert built.exit_code == 0, built.output
    url = built.output.strip().splitlines()[-1]
    # the flow's datastore (embedded shard by shard on Dask workers) equals the library's
    for (_, mine), (_, theirs) in zip(iter_shards(open_snapshot(url).inputs[0]["datastore"]), iter_shards(datastore), strict=True):
        np.testing.assert_array_equal(mine["tokens"], theirs["tokens"])
        np.testing.assert_allclose(mine["vectors"], theirs["vectors"], atol=2e-2)
    result = runner.invoke(app, ["query", "--index", url, "--json", QUERIES[0]])
    assert result.exit_code == 0, result.output
    import json

    answers = json.loads(result.output.strip().splitlines()[-1])
    assert len(answers) == 5 and set(answers[0]) == {"answer", "score", "evidence"}
    assert set(answers[0]["evidence"][0]) == {"block_id", "title", "text", "start", "end"}
    bad = runner.invoke(app, ["query", "--index", url, "no mask here"])
    assert bad.exit_code == 2 and "exactly one [MASK]" in bad.output


def test_a_roberta_encoder_answers_queries_written_with_the_mask_marker(tmp_path, news_lines, roberta_dir):
    path = tmp_path / "news.txt"
    path.write_text("\n".join(news_lines[:10]) + "\n")
    store = str(tmp_path / "store")
    corpus = ingest([str(path)], store, IngestConfig(encoder=roberta_dir))
    npm = NPM(build_index(build_datastore(corpus, store, encoder=roberta_dir), IndexConfig(factory="Flat")))
    assert npm.tokenizer.mask_token == "<mask>"
    for restrict in (True, False):
        answers = npm.predict(["The Prime Minister [MASK] said."], InferenceConfig(restrict=restrict, k=64))[0]
        assert len(answers) == 5 and all(a.text for a in answers)
    with pytest.raises(QueryError, match="write the mask as \\[MASK\\], not '<mask>'"):
        npm.predict(["The Prime Minister <mask> said."])


def test_verbalizers_keep_single_tokens_only(tokenizer, roberta_tokenizer):
    ids, dropped = label_token_ids(tokenizer, ["great", "terrible", "unputdownable", "good"])
    assert dropped == ["unputdownable"]
    assert sorted(tokenizer.convert_ids_to_tokens(ids.tolist())) == ["good", "great", "terrible"]
    ids, _ = label_token_ids(roberta_tokenizer, ["the"])
    assert {"Ġthe", "the"} >= set(roberta_tokenizer.convert_ids_to_tokens(ids.tolist())) and "Ġthe" in roberta_tokenizer.convert_ids_to_tokens(ids.tolist())


def test_closed_set_scores_sum_the_retrieved_label_words(flat):
    words = [label_token_ids(flat.tokenizer, ["australia"])[0], label_token_ids(flat.tokenizer, ["police"])[0]]
    config = InferenceConfig(k=300, tau=5.0)
    scores = flat.classify(QUERIES, words, config=config)
    q = flat.encode_queries(QUERIES, 2).sum(axis=1) * flat.scale
    V = np.asarray(flat.index.reconstruct_n(0, flat.index.ntotal))
    for row, qv in zip(scores, q, strict=True):
        sims = V @ qv
        top = np.argsort(-sims)[:300]
        tokens = np.asarray(flat.corpus.tokens)[top]
        for y, ids in enumerate(words):
            hit = sims[top][np.isin(tokens, ids)] / 5.0
            expected = np.log(np.exp(hit).sum()) if len(hit) else -np.inf
            assert row[y] == pytest.approx(expected, abs=1e-4)


def test_a_corrupted_datastore_shard_is_refused(datastore, tmp_path):
    import shutil

    broken = tmp_path / "datastore" / "broken"
    shutil.copytree(datastore, broken)
    with open(broken / "shards" / "part-00001" / "vectors.npy", "r+b") as f:
        f.seek(1000)
        f.write(b"\x00\x01\x02")
    with pytest.raises(SnapshotError, match="checksum mismatch in shards/part-00001/vectors.npy"):
        build_index(str(broken), IndexConfig(factory="Flat"))


def test_evaluation_of_a_cloze_task_end_to_end(flat, tmp_path):
    import json

    from npmcore.evaluation.run import evaluate
    from npmcore.evaluation.tasks import load_task

    config = InferenceConfig(restrict=True)
    predicted = [a[0].text for a in flat.predict(QUERIES, config)]
    path = tmp_path / "cloze.jsonl"
    # gold = the model's own answer for the first two queries, an absent phrase for the others
    golds = [[predicted[0]], [predicted[1].upper() + "!"], ["no such answer"], ["nothing like it"]]
    path.write_text("".join(json.dumps({"query": q, "answers": g}) + "\n" for q, g in zip(QUERIES, golds, strict=True)))
    result = evaluate(load_task("cloze", path=str(path)), flat, "npm", config)
    assert (result.n, result.metric) == (4, "exact_match")
    assert [r.correct for r in result.records] == [True, True, False, False] and result.score == 0.5
    assert [r.prediction for r in result.records] == predicted
    runner = CliRunner()
    store = tmp_path / "store"
    out = runner.invoke(app, ["eval", "--task", "cloze", "--data", str(path), "--index", flat.url, "--store", str(store), "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"task": "cloze", "n": 4, "metric": "exact_match", "score": 0.5}
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{store}/mlflow.db")
    (run,) = client.search_runs([client.get_experiment_by_name("npm-eval").experiment_id])
    assert run.data.metrics["exact_match"] == 0.5 and run.data.params["index"] == flat.url
    assert run.data.params["encoder_fingerprint"] == flat.manifest.config["encoder_fingerprint"]
    assert [a.path for a in client.list_artifacts(run.info.run_id)] == ["predictions.jsonl"]
    single = runner.invoke(app, ["eval", "--task", "cloze", "--data", str(path), "--index", flat.url, "--store", str(store), "--system", "npm-single"])
    assert single.exit_code == 0, single.output
    runs = client.search_runs([run.info.experiment_id], order_by=["attributes.start_time ASC"])
    table = runner.invoke(app, ["compare", *(r.info.run_id for r in runs), "--store", str(store)])
    assert table.exit_code == 0, table.output
    row = next(line for line in table.output.splitlines() if "cloze/npm exact_match" in line)
    assert "0.5000" in row and "–" in row  # the NPM run has it, the NPM single run does not
    bad = runner.invoke(app, ["compare", "models:/npm-encoder/9", "default", "--store", str(store)])
    assert bad.exit_code == 2 and "no evaluation run" in bad.output


def test_closed_set_evaluation_counts_correct_labels(flat):
    from npmcore.evaluation.run import evaluate
    from npmcore.evaluation.tasks import Example, Task

    examples = tuple(Example(q, (), label, f"q{i}", q) for i, (q, label) in enumerate(zip(QUERIES, [0, 1, 0, 1], strict=True)))
    task = Task("toy", "closed", examples, ("australia", "police"), (("australia", "australian"), ("police", "unputdownable")), {}, None)
    result = evaluate(task, flat, "npm", InferenceConfig(k=300, tau=5.0))
    scores = flat.classify(list(QUERIES), [label_token_ids(flat.tokenizer, list(w))[0] for w in task.label_words], config=InferenceConfig(k=300, tau=5.0))
    # no label word retrieved (every score -inf): an abstention, counted as wrong
    expected = [bool(np.isfinite(row).any()) and int(np.argmax(row)) == ex.label for row, ex in zip(scores, examples, strict=True)]
    assert [r.correct for r in result.records] == expected and result.score == np.mean(expected)
    assert result.notes["label_words_dropped"] == 1


def test_closed_set_calibration_subtracts_the_domain_premise_scores(flat):
    from npmcore.evaluation.run import evaluate
    from npmcore.evaluation.tasks import Example, Task

    words = (("government", "minister"), ("police", "officers"))
    examples = tuple(Example(q, (), i % 2, f"q{i}", q) for i, q in enumerate(QUERIES))
    domain = "The news was about [MASK]."
    task = Task("toy", "closed", examples, ("politics", "crime"), words, {}, None, domain=domain)
    config = InferenceConfig(k=flat.index.ntotal, tau=5.0)  # every token: each label word is retrieved
    ids = [label_token_ids(flat.tokenizer, list(w))[0] for w in words]
    prior = flat.classify([domain], ids, config=config)[0]
    assert np.isfinite(prior).all()  # the premise retrieves a word of each label
    raw = flat.classify(list(QUERIES), ids, config=config)
    calibrated = evaluate(task, flat, "npm", config)
    uncalibrated = evaluate(task, flat, "npm", config, calibrate=False)
    for scores, result in ((raw - prior, calibrated), (raw, uncalibrated)):
        assert [r.prediction for r in result.records] == [task.labels[int(np.argmax(row))] for row in scores]
        assert [r.score for r in result.records] == pytest.approx([float(row.max()) for row in scores])


def test_a_shard_without_blocks_is_embedded_and_indexed(tmp_path):
    import json

    docs = [
        {"id": "a", "title": "Thessaloniki", "text": "Thessaloniki is the second-largest city in Greece."},
        {"id": "b", "title": "Empty", "text": "   "},
        {"id": "c", "title": "Athens", "text": "Athens is the capital of Greece."},
    ]
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    store = str(tmp_path / "store")
    corpus = ingest([str(path)], store, IngestConfig(partition_bytes=70))
    assert open_snapshot(corpus).counts["blocks"] == 2
    datastore = build_datastore(corpus, store)
    sizes = [len(a["vectors"]) for _, a in iter_shards(datastore)]
    assert 0 in sizes and sum(size > 0 for size in sizes) == 2
    npm = NPM(build_index(datastore, IndexConfig(factory="Flat")))
    answers = npm.predict(["Athens is the capital of [MASK]."], InferenceConfig(restrict=False, k=8))[0]
    assert answers and {e.block for a in answers for e in a.evidence} <= {0, 1}


def test_evaluate_flow_runs_systems_temperatures_and_exact_search(flat, tmp_path):
    from mlflow import MlflowClient

    runner = CliRunner()
    store = tmp_path / "store"
    args = ["eval", "--task", "trex", "--limit", "6", "--index", flat.url, "--store", str(store), "--exact",
            "--system", "npm", "--system", "npm-no-bm25", "--tau", "1", "--tau", "2"]
    out = runner.invoke(app, args)
    assert out.exit_code == 0, out.output
    client = MlflowClient(tracking_uri=f"sqlite:///{store}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("npm-eval").experiment_id])
    seen = sorted((r.data.params["system"], r.data.params["tau"], r.data.params["factory"]) for r in runs)
    assert seen == [("npm", "1.0", "Flat"), ("npm", "2.0", "Flat"), ("npm-no-bm25", "1.0", "Flat"), ("npm-no-bm25", "1.0", "Flat"),
                    ("npm-no-bm25", "2.0", "Flat"), ("npm-no-bm25", "2.0", "Flat")]
    assert len({r.data.params["index"] for r in runs}) == 2  # the given index and the exact one built from its datastore
    for run in runs:
        assert "macro_exact_match" in run.data.metrics and any(m.startswith("exact_match_len_") for m in run.data.metrics)
        assert {a.path for a in client.list_artifacts(run.info.run_id)} == {"predictions.jsonl", "accuracy_by_answer_length.png"}
    bad = runner.invoke(app, ["eval", "--suite", "slow", "--index", flat.url])
    assert bad.exit_code == 2 and "unknown suite 'slow'" in bad.output


@pytest.mark.slow
def test_learning_curve_logs_checkpoint_scores_into_the_training_run(corpus, tmp_path):
    import json

    from mlflow import MlflowClient

    from flows.learning_curve import logged_curve
    from flows.prefect_api import prefect_api
    from flows.train import TrainParams, train

    store = tmp_path / "store"
    with prefect_api():
        train(TrainParams(store=str(store), corpus=corpus, steps=2, batch_size=4, warmup_steps=1, checkpoint_every=1))
    client = MlflowClient(tracking_uri=f"sqlite:///{store}/mlflow.db")
    (run,) = client.search_runs([client.get_experiment_by_name("npm-train").experiment_id])
    path = tmp_path / "cloze.jsonl"
    path.write_text("".join(json.dumps({"query": q, "answers": ["Howard"]}) + "\n" for q in QUERIES))
    out = CliRunner().invoke(app, ["learning-curve", run.info.run_id, "--store", str(store), "--task", "cloze", "--data", str(path),
                                   "--corpus", corpus, "--step", "0", "--step", "2"])
    assert out.exit_code == 0, out.output
    history = client.get_metric_history(run.info.run_id, "eval.cloze")
    assert sorted(m.step for m in history) == [0, 2]
    evals = client.search_runs([client.get_experiment_by_name("npm-eval").experiment_id])
    assert sorted(r.data.params["model"].rsplit("/", 1)[-1] for r in evals) == ["step-0000000", "step-0000002"]
    by_step = {r.data.params["model"].rsplit("-", 1)[-1]: r.data.metrics["exact_match"] for r in evals}
    assert {m.step: m.value for m in history} == {int(s): v for s, v in by_step.items()}
    assert all(r.data.params["corpus_id"] == open_snapshot(corpus).id for r in evals)
    assert "learning_curve.png" in {a.path for a in client.list_artifacts(run.info.run_id)}
    out = CliRunner().invoke(app, ["learning-curve", run.info.run_id, "--store", str(store), "--task", "cloze", "--data", str(path),
                                   "--corpus", corpus, "--step", "1"])
    assert out.exit_code == 0, out.output
    assert sorted(logged_curve(client, run.info.run_id)) == [0, 1, 2]  # the plot shows both invocations' steps


@pytest.mark.slow
def test_corpus_size_sweep_logs_the_score_against_reference_corpus_tokens(tmp_path):
    from mlflow import MlflowClient

    store = tmp_path / "store"
    out = CliRunner().invoke(app, ["eval", "--task", "trex", "--limit", "10", "--wiki-files", "0", "--wiki-files", "1",
                                   "--store", str(store), "--json"])
    assert out.exit_code == 0, out.output
    client = MlflowClient(tracking_uri=f"sqlite:///{store}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("npm-eval").experiment_id])
    by_name = {r.info.run_name: r for r in runs}
    tasks = [r for r in runs if r.info.run_name == "trex/npm/tau=1"]
    sizes = sorted(int(r.data.params["corpus_tokens"]) for r in tasks)
    assert len(sizes) == 2 and sizes[0] < sizes[1]  # evidence only, then evidence + one enwiki file
    curve = client.get_metric_history(by_name["trex/corpus-size"].info.run_id, "macro_exact_match.npm.tau1")
    assert sorted((m.step, m.value) for m in curve) == sorted((int(r.data.params["corpus_tokens"]), r.data.metrics["macro_exact_match"]) for r in tasks)
    assert "score_by_corpus_size.png" in {a.path for a in client.list_artifacts(by_name["trex/corpus-size"].info.run_id)}
