"""Evidence scoring (npmcore.answer.ranking) on the shared news index, against brute-force references."""

import json
import math
from dataclasses import replace

import numpy as np
import pytest
from reference import QUERIES, corpus_blocks, evidence_features

from npmcore.answer.inference import NPM, InferenceConfig
from npmcore.answer.ranking import (
    FEATURE_NAMES,
    NEAR,
    PHRASE_FEATURES,
    POSITION_FEATURES,
    RUN,
    WINDOW,
    Labelled,
    Ranker,
    fit_ranker,
    query_context,
    rank_phrases,
)
from npmcore.evaluation.diagnostics import right_answers
from npmcore.evaluation.verbatim import draw_facts
from npmcore.rarity import OTHER, token_kinds
from npmcore.snapshots import iter_shards, read_blocks
from npmcore.vocab import vocab_tables


@pytest.fixture(scope="module")
def flat(news_store) -> NPM:
    return NPM(news_store.index, precision="f32")  # the news index's own precision, on every machine


@pytest.fixture(scope="module")
def blocks(news_store) -> list[list[int]]:
    return corpus_blocks(news_store.corpus)


@pytest.fixture(scope="module")
def vectors(news_store) -> np.ndarray:
    """The datastore's vectors of every token, in global order."""
    return np.concatenate([a["vectors"] for _, a in iter_shards(news_store.datastore)]).astype(np.float64)


@pytest.mark.parametrize("restrict", [True, False])
def test_position_features_equal_a_walk_over_each_passage(flat, blocks, vectors, restrict):
    config = InferenceConfig(restrict=restrict, k=200, tau=2.0)
    q = flat.encode_queries(QUERIES, 2).astype(np.float64) * flat.scale
    numeric = token_kinds(flat.tokenizer) != OTHER
    cut = 0
    for query, found, (q_start, q_end) in zip(QUERIES, flat.candidates(QUERIES, config), q, strict=True):
        spans = found.phrases.spans
        assert len(spans) > 50 and found.positions.shape == (len(spans), len(POSITION_FEATURES))
        ids = flat.query_ids(query, 2)
        for row in range(0, len(spans), 7):  # every 7th position: a few hundred per query
            first, last = (int(x) for x in spans[row])
            *context, cuts = evidence_features(
                blocks, flat.corpus.offsets, (first, last), ids, flat.tokenizer.mask_token_id,
                flat.corpus.tables, flat.idf, RUN, WINDOW, NEAR, numeric,
            )  # fmt: skip
            expected = [*context, vectors[first] @ q_start / 2.0, vectors[last] @ q_end / 2.0, cuts]
            np.testing.assert_allclose(found.positions[row], expected, rtol=1e-4, atol=1e-4)
            cut += cuts
    assert cut > 0  # some positions of the news cut a number or a date


def test_phrase_features_count_positions_and_read_idf(flat):
    (found,) = flat.candidates(QUERIES[:1], InferenceConfig())
    p = found.phrases
    for row in range(0, len(p.scores), 5):
        ids = p.token_ids[row][p.token_ids[row] >= 0]
        positions = int((p.phrase_of_span == row).sum())
        expected = [math.log(p.scores[row]), math.log(positions), len(ids), float(np.mean(flat.idf[ids]))]
        np.testing.assert_allclose(found.features[row], expected, rtol=1e-9)
    df = np.zeros(len(flat.idf))
    for b in range(len(flat.corpus.offsets) - 1):
        df[np.unique(flat.corpus.block_tokens(b))] += 1
    blocks = len(flat.corpus.offsets) - 1
    np.testing.assert_allclose(flat.idf, np.log((blocks + 1) / (df + 1)))


def test_evidence_scoring_ranks_by_phrase_features_and_the_best_position(flat):
    rng = np.random.default_rng(0)
    ranker = Ranker(rng.normal(size=len(PHRASE_FEATURES)), rng.normal(size=len(POSITION_FEATURES)), {})
    for found in flat.candidates(QUERIES, InferenceConfig()):
        ranked = rank_phrases(found, ranker)
        p = found.phrases
        scores = {}
        for row in range(len(p.scores)):
            own = [found.positions[i] @ ranker.position for i in np.flatnonzero(p.phrase_of_span == row)]
            scores[tuple(p.token_ids[row])] = found.features[row] @ ranker.phrase + max(own)
        order = sorted(scores, key=lambda k: -scores[k])
        assert [tuple(ids) for ids in ranked.token_ids[:10]] == order[:10]
        best = np.array([scores[tuple(ids)] for ids in ranked.token_ids])
        np.testing.assert_allclose(ranked.scores, np.exp(best - best.max()) / np.exp(best - best.max()).sum())
        np.testing.assert_allclose(ranked.parts.sum(axis=1), best)  # the parts add up to the score
        assert ranked.parts.shape == (len(best), len(FEATURE_NAMES))
        # each position still spells its phrase, now in the new order
        for i in range(0, len(p.spans), 11):
            assert tuple(ranked.token_ids[ranked.phrase_of_span[i]]) == tuple(p.token_ids[p.phrase_of_span[i]])
        np.testing.assert_allclose(ranked.span_scores.sum(), 1.0)


def test_answers_carry_their_score_parts_only_under_evidence_scoring(flat):
    evidence = flat.predict(QUERIES[:1], InferenceConfig())[0]
    npm = flat.predict(QUERIES[:1], InferenceConfig(scoring="npm"))[0]
    assert all(set(a.parts) == set(FEATURE_NAMES) for a in evidence)
    assert all(a.parts is None for a in npm)
    # the best evidence of an answer is its best-scoring position
    for a in evidence:
        assert a.evidence[0].score == max(e.score for e in a.evidence)
    with pytest.raises(ValueError, match="scoring must be one of evidence, npm"):
        next(flat.phrases(QUERIES[:1], replace(InferenceConfig(), scoring="bm25")))


def test_query_context_reads_both_sides_of_the_mask_nearest_first(tokenizer):
    tables = vocab_tables(tokenizer)
    ids = tokenizer("Albert Einstein was born in [MASK][MASK], Germany.")["input_ids"]
    context = query_context(ids, tokenizer.mask_token_id, tables.special, tables.stop)
    left = tokenizer.convert_ids_to_tokens([t for t in context.left if t >= 0])
    right = tokenizer.convert_ids_to_tokens([t for t in context.right if t >= 0])
    assert left == ["in", "born", "was", "einstein", "albert"] and right == [",", "germany", "."]
    assert sorted(tokenizer.convert_ids_to_tokens(context.words)) == ["albert", "born", "einstein", "germany"]
    with pytest.raises(ValueError, match="no mask token"):
        query_context(tokenizer("no mask")["input_ids"], tokenizer.mask_token_id, tables.special, tables.stop)


@pytest.mark.parametrize("which", ["tokenizer", "roberta_tokenizer"])
def test_sentence_ends_are_the_pieces_of_full_stops_and_marks(request, which):
    tok = request.getfixturevalue(which)
    tables = vocab_tables(tok)
    ids = tok("Yes. Really?! It ends... (e.g. here) 3.5", add_special_tokens=False)["input_ids"]
    ends = [tok.decode([t]).strip() for t in ids if tables.sentence_end[t]]
    assert ends and all(e and not e.strip(".!?") for e in ends)
    assert not any(tables.sentence_end[t] for t in tok("(e, 3", add_special_tokens=False)["input_ids"])


def test_a_ranker_round_trips_through_json_and_names_what_it_lacks(tmp_path):
    ranker = Ranker(np.arange(len(PHRASE_FEATURES), dtype=float), np.ones(len(POSITION_FEATURES)), {"sets": 2})
    path = tmp_path / "ranker.json"
    path.write_text(ranker.to_json())
    loaded = Ranker.load(path)
    assert np.array_equal(loaded.phrase, ranker.phrase) and np.array_equal(loaded.position, ranker.position)
    assert loaded.provenance == {"sets": 2}
    broken = json.loads(ranker.to_json())
    del broken["position"]["left_share"]
    path.write_text(json.dumps(broken))
    with pytest.raises(ValueError, match=r"ranker.json: not a ranker of features .* \(missing 'left_share'\)"):
        Ranker.load(path)
    path.write_text('{"phrase": ')  # cut short
    with pytest.raises(ValueError, match=r"ranker.json: not a ranker, not JSON"):
        Ranker.load(path)
    with pytest.raises(ValueError, match=f"needs 4 phrase and {len(POSITION_FEATURES)} position weights"):
        Ranker(np.ones(2), np.ones(len(POSITION_FEATURES)), {})


@pytest.fixture(scope="module")
def news_facts(news_store):
    """Sentences of the news index's own passages, one name, year, number or word masked."""
    rows = [
        row
        for t in read_blocks(news_store.corpus, ["block_id", "title", "text"])
        for row in zip(*(t.column(c).to_pylist() for c in ("block_id", "title", "text")), strict=True)
    ]
    return draw_facts(rows, per_kind=6, seed=0, prefix="news")


def labelled(npm: NPM, facts) -> list[Labelled]:
    out = []
    for fact, found in zip(facts, npm.candidates([f.query for f in facts], InferenceConfig()), strict=True):
        texts = (npm.tokenizer.decode(ids[ids >= 0].tolist()) for ids in found.phrases.token_ids)
        out.append(Labelled(found, right_answers(texts, fact.answers)))
    return out


def test_fitted_weights_rank_the_right_answers_of_verbatim_facts_first(flat, news_facts):
    examples = labelled(flat, news_facts)
    assert sum(e.gold.any() for e in examples) >= 0.9 * len(examples)
    ranker = fit_ranker(examples, steps=200)
    assert ranker.provenance["queries"] == sum(e.gold.any() for e in examples)
    assert np.array_equal(fit_ranker(examples, steps=200).phrase, ranker.phrase)  # deterministic

    def top1(ranker: Ranker | None) -> float:
        return float(np.mean([e.right_first(ranker) for e in examples]))

    assert top1(ranker) > top1(None)  # NPM's own order
    with pytest.raises(ValueError, match="no example has a right answer"):
        fit_ranker([replace(e, gold=np.zeros_like(e.gold)) for e in examples])
