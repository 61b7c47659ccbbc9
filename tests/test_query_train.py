"""Query-side training on the shared news index: reading sets against a brute-force reference, the loss
against a per-query loop, exact resume, and the query encoder served with the passage encoder it names."""

import json
import shutil

import numpy as np
import pytest
import torch

from npmcore.adapt.query_train import QueryTrainConfig, batch_indices, export_query_encoder, query_loss, train_query
from npmcore.adapt.reading import QueryExample, cloze_examples, read_examples, reading_set
from npmcore.answer.inference import NPM, InferenceConfig
from npmcore.answer.phrases import content_spans
from npmcore.encoder import base_encoder_path, cached_encoder, encoder_fingerprint
from npmcore.evaluation.metrics import exact_match
from npmcore.index.bm25_index import build_bm25_index
from npmcore.model.query_encoder import QUERY_ENCODER

L_MAX = 10


@pytest.fixture(scope="module")
def npm(news_store) -> NPM:
    return NPM(news_store.index, precision="f32")


def test_cloze_examples_mask_one_name_date_or_number_of_a_corpus_sentence(news_store):
    examples = cloze_examples(news_store.corpus, 45, seed=1)
    assert len(examples) == 45 and examples == cloze_examples(news_store.corpus, 45, seed=1)
    assert examples != cloze_examples(news_store.corpus, 45, seed=2)
    for example in examples:
        assert example.query.count("[MASK]") == 1 and example.source is not None
        (answer,) = example.answers
        assert answer not in example.query  # the phrase occurs once in its sentence
    kinds = {"date": 0, "number": 0, "name": 0}
    for example in examples:
        answer = example.answers[0]
        kinds["date" if answer.isdigit() and len(answer) == 4 else "number" if answer[0].isdigit() else "name"] += 1
    assert min(kinds.values()) >= 10  # the kinds in about equal shares
    with pytest.raises(ValueError, match="maskable sentences of the kinds asked for, 1000 wanted"):
        cloze_examples(news_store.corpus, 1000, seed=1)


def test_a_reading_set_holds_every_whole_word_occurrence_of_an_answer_and_nothing_of_its_own_document(npm, news_store):
    found = 0
    for example in cloze_examples(news_store.corpus, 45, seed=0):
        reading = reading_set(npm, example, passages=5)
        searched = npm.retrieval.bm25_blocks(example.query, 15)
        own = [b for b in searched if npm.evidence.block_id(b).rsplit("#", 1)[0] == example.source.split("#")[0]]
        if reading is None:
            continue
        found += 1
        assert not set(reading.blocks) & set(own) and len(reading.blocks) <= 5
        assert list(reading.blocks) == [b for b in searched if b not in own][: len(reading.blocks)]
        # brute force: every span of whole words in a passage whose text is a gold answer and that NPM could
        # answer (a content word first and last)
        spans = []
        for block in reading.blocks:
            passage, lo = npm.evidence.passage(block), int(npm.corpus.offsets[block])
            n = len(passage.token_chars)
            for first in range(n):
                for last in range(first, min(n, first + 3 * L_MAX)):
                    if passage.starts_word[first] and passage.ends_word[last]:
                        surface = passage.text[passage.token_chars[first][0] : passage.token_chars[last][1]]
                        if exact_match(surface, example.answers):
                            spans.append((lo + first, lo + last))
        spans = content_spans(npm.corpus, np.array(spans, dtype=np.int64).reshape(-1, 2))
        assert set(reading.ids[reading.starts]) == set(spans[:, 0]) and set(reading.ids[reading.ends]) == set(
            spans[:, 1]
        )
        offsets = npm.corpus.offsets
        assert np.array_equal(
            reading.ids, np.concatenate([np.arange(offsets[b], offsets[b + 1]) for b in reading.blocks])
        )
    assert found >= 5


def test_the_loss_is_npms_over_each_querys_own_candidates():
    g = torch.Generator().manual_seed(0)
    B, N, d, tau = 3, 7, 5, 0.5
    q_start, q_end, candidates = (
        torch.randn(B, d, generator=g),
        torch.randn(B, d, generator=g),
        torch.randn(B, N, d, generator=g),
    )
    valid = torch.tensor([[True] * 7, [True] * 4 + [False] * 3, [True] * 6 + [False]])
    starts = torch.zeros(B, N, dtype=torch.bool)
    ends = torch.zeros(B, N, dtype=torch.bool)
    starts[0, [1, 4]] = starts[1, 0] = starts[2, 5] = True
    ends[0, 2] = ends[1, [1, 3]] = ends[2, 5] = True
    loss, stats = query_loss(q_start, q_end, candidates, valid, starts, ends, tau)
    expected, top1 = 0.0, []
    for b in range(B):
        n = int(valid[b].sum())
        for q, positive in ((q_start[b], starts[b]), (q_end[b], ends[b])):
            scores = [float(candidates[b, i] @ q) / (d**0.5 * tau) for i in range(n)]
            total = sum(np.exp(scores))
            expected -= np.log(sum(np.exp(s) for i, s in enumerate(scores) if positive[i]) / total)
        top1.append(bool(starts[b, int(np.argmax([float(candidates[b, i] @ q_start[b]) for i in range(n)]))]))
    assert float(loss) == pytest.approx(expected / B, rel=1e-5)
    assert float(stats["start_acc"]) == pytest.approx(np.mean(top1))


def test_each_epoch_visits_every_example_once_in_a_seeded_order():
    steps = [batch_indices(10, 4, seed=3, step=s) for s in range(5)]  # 20 slots: two epochs
    slots = [i for step in steps for i in step]
    assert sorted(slots[:10]) == list(range(10)) == sorted(slots[10:])
    assert slots[:10] != slots[10:] and steps == [batch_indices(10, 4, seed=3, step=s) for s in range(5)]


def test_a_query_log_is_read_with_one_line_naming_a_bad_row(tmp_path):
    good = tmp_path / "log.jsonl"
    good.write_text('{"query": "Paris is the capital of [MASK].", "answers": ["France"]}\n\n')
    assert read_examples(good) == [QueryExample("Paris is the capital of [MASK].", ("France",))]
    for row, error in (
        ('{"query": "no mask", "answers": ["x"]}', r"exactly one \[MASK\]"),
        ('{"query": "[MASK] here", "answers": []}', "non-empty list of strings"),
        ("not json", "not a"),
    ):
        bad = tmp_path / "bad.jsonl"
        bad.write_text(good.read_text() + row + "\n")
        with pytest.raises(ValueError, match=rf"bad.jsonl:3: .*{error}"):
            read_examples(bad)


@pytest.fixture(scope="module")
def trained(news_store, tmp_path_factory):
    """A few steps of query-side training, the same run stopped at step 2 and resumed, and its export."""
    folder = tmp_path_factory.mktemp("query-train")
    config = QueryTrainConfig(
        index=news_store.index, count=45, passages=4, steps=4, batch_size=4, warmup_steps=1, checkpoint_every=2
    )
    logged = []
    _, straight, _ = train_query(config, str(folder / "straight"), on_step=logged.append)
    train_query(config, str(folder / "resumed"), stop_after=2)
    _, resumed, _ = train_query(config, str(folder / "resumed"))
    return config, straight, resumed, logged, export_query_encoder(str(folder / "straight"), folder / "query-encoder")


def test_query_side_training_learns_and_resumes_exactly(trained):
    _, straight, resumed, logged, _ = trained
    assert [s.step for s in logged] == [1, 2, 3, 4] and all(np.isfinite(s.loss) for s in logged)
    assert all(0 <= s.start_acc <= 1 and s.candidates > 0 for s in logged)
    for (name, a), b in zip(straight.state_dict().items(), resumed.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_the_query_encoder_encodes_queries_and_its_passage_encoder_the_passages(trained, news_store, npm):
    _, straight, _, _, folder = trained
    side = json.loads((folder / QUERY_ENCODER).read_text())
    assert side["encoder"] == "default" and side["fingerprint"] == npm.fingerprint
    assert side["trained"]["index"] == news_store.index and side["trained"]["step"] == 4
    paired = NPM(news_store.index, encoder=str(folder), precision="f32")
    assert paired.fingerprint != npm.fingerprint
    for name, tensor in paired.model.state_dict().items():  # the trained weights, in fp16
        assert torch.equal(tensor, straight.base_model.state_dict()[name].half().float()), name
    assert paired.retrieval.knn_refused is None  # the index's vectors are its passage encoder's: kNN search works
    blocks = [0, 3, 7]
    for mine, theirs in zip(paired.retrieval.block_vectors(blocks), npm.retrieval.block_vectors(blocks), strict=True):
        assert np.array_equal(mine, theirs)  # passages from the index's own datastore
    query = "Australian firefighters battled bushfires near [MASK]."
    assert not np.allclose(paired.encode_queries([query], 2), npm.encode_queries([query], 2), atol=1e-4)
    assert paired.predict([query], InferenceConfig(passages=3))[0]


def test_a_query_encoder_is_refused_with_an_index_of_another_encoders_vectors(trained, news_store, tmp_path):
    """A query encoder made for the base MiniLM against the news index (the shipped encoder's vectors): refused in
    one line; against an index of BM25 alone its passages are encoded by the base MiniLM it names."""
    *_, folder = trained
    base = str(base_encoder_path())
    other = tmp_path / "for-the-base-encoder"
    shutil.copytree(folder, other)
    side = json.loads((other / QUERY_ENCODER).read_text())
    (other / QUERY_ENCODER).write_text(json.dumps({**side, "encoder": base, "fingerprint": fingerprint_of(base)}))
    with pytest.raises(ValueError) as refused:
        NPM(news_store.index, encoder=str(other))
    assert "\n" not in str(refused.value) and f"holds vectors of weights {fingerprint_of(None)}" in str(refused.value)
    store = tmp_path / "store"
    shutil.copytree(news_store.store, store, ignore=shutil.ignore_patterns("mlflow.db", "mlartifacts", "runs"))
    bm25_only = build_bm25_index(f"{store}/corpus/{news_store.corpus.rsplit('/', 1)[1]}")
    paired, plain = NPM(bm25_only, encoder=str(other), precision="f32"), NPM(bm25_only, encoder=base, precision="f32")
    for mine, theirs in zip(paired.retrieval.block_vectors([1, 2]), plain.retrieval.block_vectors([1, 2]), strict=True):
        assert np.array_equal(mine, theirs)
    (other / QUERY_ENCODER).write_text(json.dumps({**side, "encoder": base, "fingerprint": "0" * 16}))
    with pytest.raises(ValueError, match="trained for passage encoder .* with weights 0000000000000000, but"):
        NPM(bm25_only, encoder=str(other))


def fingerprint_of(source: str | None) -> str:
    return encoder_fingerprint(cached_encoder(source)[1])


def test_the_adapted_query_log_trains_on_half_of_kamels_relations_and_holds_out_the_other(tmp_path):
    from npmcore.evaluation.adapted import kamel_facts, kamel_halves, relation_of, write_query_log

    trained, held = kamel_halves()
    assert trained and held and not trained & held and len(trained) + len(held) == 234
    log = write_query_log(kamel_facts(trained, "dev")[:50], tmp_path / "log.jsonl")
    read = read_examples(log)
    assert len(read) == 50 and all(e.source is None and e.query.endswith("Answer: [MASK].") for e in read)
    assert {relation_of(e) for e in kamel_facts(held, "test")} == held


def test_npmcore_train_side_query_registers_a_query_encoder_that_query_uses(news_store, tmp_path):
    """The users' path: `npmcore train --side query` against an index, registered as npm-query-encoder with its
    passage side; `npmcore query --model models:/npm-query-encoder/1` answers with it."""
    from typer.testing import CliRunner

    from flows.cli import app

    store = tmp_path / "store"
    shutil.copytree(news_store.store, store, ignore=shutil.ignore_patterns("mlflow.db", "mlartifacts", "runs"))
    index = f"{store}/index/{news_store.index.rsplit('/', 1)[1]}"
    args = ["train", "--side", "query", "--store", str(store), "--index", index, "--count", "45", "--passages", "3"]
    trained = CliRunner().invoke(app, [*args, "--steps", "2", "--batch-size", "4", "--warmup-steps", "1"])
    assert trained.exit_code == 0, trained.output
    assert trained.stdout.strip().splitlines()[-1] == "models:/npm-query-encoder/1"
    refused = CliRunner().invoke(app, [*args, "--preset", "cpu-quality"])
    assert refused.exit_code == 2 and "--preset: for --side both only" in refused.output
    query = "Australian firefighters battled bushfires near [MASK]."
    answered = CliRunner().invoke(app, ["query", query, "--index", index, "--model", "models:/npm-query-encoder/1"])
    assert answered.exit_code == 0, answered.output
