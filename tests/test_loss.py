"""The vectorised NPM losses against a naive per-span loop written from the formula."""

import math

import pytest
import torch

from npmcore.model.loss import PreBatch, span_loss, token_loss

B, T, D, S = 4, 7, 8, 6


def make_case(seed: int, B: int = B, T: int = T, S: int = S, span_seqs: list[int] | None = None) -> dict:
    """Random float64 queries/keys, padded sequences, and 1-3 positive occurrences per span
    (each a (seq, start, end) of real tokens in another sequence; one listed twice)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, T + 1, (B,), generator=g)
    lengths[0] = T  # at least one sequence without padding
    key_mask = torch.arange(T)[None, :] < lengths[:, None]  # (B, T)
    span_seq = torch.tensor(span_seqs) if span_seqs is not None else torch.randint(0, B, (S,), generator=g)
    occurrences = []  # per span: list of (seq, start, end)
    for i in span_seq.tolist():
        others = [j for j in range(B) if j != i]
        occ = []
        for _ in range(int(torch.randint(1, 4, (1,), generator=g))):
            j = others[int(torch.randint(0, len(others), (1,), generator=g))]
            n = int(lengths[j])
            start = int(torch.randint(0, n, (1,), generator=g))
            end = int(torch.randint(start, n, (1,), generator=g))
            occ.append((j, start, end))
        occurrences.append(occ)
    occurrences[0].append(occurrences[0][0])  # duplicates count once
    flat = [(s, *o) for s, occ in enumerate(occurrences) for o in occ]
    pos_span, pos_seq, pos_start, pos_end = (torch.tensor(c) for c in zip(*flat, strict=True))
    return {
        "q_start": torch.randn(len(span_seq), D, generator=g, dtype=torch.float64, requires_grad=True),
        "q_end": torch.randn(len(span_seq), D, generator=g, dtype=torch.float64, requires_grad=True),
        "keys": torch.randn(B, T, D, generator=g, dtype=torch.float64, requires_grad=True),
        "key_mask": key_mask,
        "span_seq": span_seq,
        "pos_span": pos_span,
        "pos_seq": pos_seq,
        "pos_start": pos_start,
        "pos_end": pos_end,
        "occurrences": occurrences,
    }


def loss_args(case: dict) -> dict:
    return {k: v for k, v in case.items() if k != "occurrences"}


def naive_query(q, keys, key_mask, seq: int, positives: set[tuple[int, int]]):
    """-log( Σ_{y in positives} exp(sim(q, y)) / Σ_{y in candidates} exp(sim(q, y)) ) and whether top-1 is positive."""
    candidates = [(b, t) for b in range(keys.shape[0]) for t in range(keys.shape[1]) if b != seq and key_mask[b, t]]
    sims = {c: q @ keys[c] / math.sqrt(keys.shape[-1]) for c in candidates}
    num = sum(torch.exp(sims[y]) for y in positives)
    den = sum(torch.exp(sims[y]) for y in candidates)
    return -torch.log(num / den), max(candidates, key=lambda c: sims[c].item()) in positives


def naive_span_loss(case: dict):
    total, hits_s, hits_e = 0.0, 0, 0
    for g, occ in enumerate(case["occurrences"]):
        i = int(case["span_seq"][g])
        l_s, hit_s = naive_query(case["q_start"][g], case["keys"], case["key_mask"], i, {(j, s) for j, s, _ in occ})
        l_e, hit_e = naive_query(case["q_end"][g], case["keys"], case["key_mask"], i, {(j, e) for j, _, e in occ})
        total = total + l_s + l_e
        hits_s, hits_e = hits_s + hit_s, hits_e + hit_e
    n = len(case["occurrences"])
    return total / n, hits_s / n, hits_e / n


def grads(loss, case: dict) -> list[torch.Tensor]:
    return torch.autograd.grad(loss, [case["q_start"], case["q_end"], case["keys"]])


@pytest.mark.parametrize("seed", range(5))
def test_span_loss_matches_naive_loop_value_gradients_and_accuracy(seed):
    case = make_case(seed)
    loss, stats = span_loss(**loss_args(case))
    ref, acc_s, acc_e = naive_span_loss(case)
    torch.testing.assert_close(loss, ref, rtol=0, atol=1e-5)
    for got, want in zip(grads(loss, case), grads(ref, case), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    assert stats["start_acc"].item() == pytest.approx(acc_s)
    assert stats["end_acc"].item() == pytest.approx(acc_e)
    assert stats["spans"].item() == S


def test_accuracy_is_one_when_queries_point_at_a_positive():
    case = make_case(7)
    with torch.no_grad():  # make each query 10x its first positive's key vector
        for g, (j, s, e) in enumerate(occ[0] for occ in case["occurrences"]):
            case["q_start"][g] = 10 * case["keys"][j, s]
            case["q_end"][g] = 10 * case["keys"][j, e]
    _, stats = span_loss(**loss_args(case))
    assert stats["start_acc"].item() == 1.0 and stats["end_acc"].item() == 1.0


def test_zero_queries_give_minus_log_of_the_positive_fraction():
    case = make_case(3)
    args = loss_args(case) | {
        "q_start": torch.zeros(S, D, dtype=torch.float64),
        "q_end": torch.zeros(S, D, dtype=torch.float64),
    }
    loss, _ = span_loss(**args)
    n_real = case["key_mask"].sum(dim=1)
    expected = 0.0
    for g, occ in enumerate(case["occurrences"]):
        n_cand = int(n_real.sum() - n_real[case["span_seq"][g]])
        expected += -math.log(len({(j, s) for j, s, _ in occ}) / n_cand) - math.log(
            len({(j, e) for j, _, e in occ}) / n_cand
        )
    assert loss.item() == pytest.approx(expected / S, abs=1e-6)


def test_own_sequence_and_padding_do_not_count():
    case = make_case(11, span_seqs=[0, 0, 0, 0])  # every span in sequence 0
    args = loss_args(case)
    base, _ = span_loss(**args)
    direction = (case["q_start"].sum(0) + case["q_end"].sum(0)).detach()
    huge = 1e3 * direction / direction.norm()
    keys = case["keys"].detach().clone()
    keys[0] = huge  # own sequence of every span
    keys[~case["key_mask"]] = huge  # padding of all sequences
    assert not case["key_mask"].all(), "the case must have padding"
    loss, _ = span_loss(**(args | {"keys": keys}))
    assert loss.item() == base.item()
    keys[1, 0] = huge  # a real token of another sequence: now it matters
    changed, _ = span_loss(**(args | {"keys": keys}))
    assert abs(changed.item() - base.item()) > 1.0


def naive_token_loss(case: dict):
    total, hits = 0.0, 0
    for g, occ in enumerate(case["occurrences"]):
        seq, positives = int(case["span_seq"][g]), {(j, s) for j, s, _ in occ}
        loss, hit = naive_query(case["q_start"][g], case["keys"], case["key_mask"], seq, positives)
        total, hits = total + loss, hits + hit
    return total / len(case["occurrences"]), hits / len(case["occurrences"])


@pytest.mark.parametrize("seed", range(3))
def test_token_loss_matches_naive_loop(seed):
    case = make_case(100 + seed)
    args = {k: case[k] for k in ("keys", "key_mask", "span_seq", "pos_span", "pos_seq", "pos_start")}
    loss, stats = token_loss(case["q_start"], **args)
    ref, acc = naive_token_loss(case)
    torch.testing.assert_close(loss, ref, rtol=0, atol=1e-5)
    got = torch.autograd.grad(loss, [case["q_start"], case["keys"]])
    want = torch.autograd.grad(ref, [case["q_start"], case["keys"]])
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    assert stats["acc"].item() == pytest.approx(acc) and stats["tokens"].item() == S
    both, _ = span_loss(**(loss_args(case) | {"q_end": case["q_start"], "pos_end": case["pos_start"]}))
    torch.testing.assert_close(both, 2 * loss)  # one token = a span whose start and end coincide


def test_low_precision_inputs_are_scored_in_float32():
    case = make_case(5)
    args = loss_args(case)
    ref, _ = span_loss(**args)
    low = args | {k: args[k].detach().to(torch.bfloat16) for k in ("q_start", "q_end", "keys")}
    loss, _ = span_loss(**low)
    assert loss.dtype == torch.float32
    assert loss.item() == pytest.approx(ref.item(), rel=0.05)


def _bad_inputs() -> dict[str, tuple[dict, str]]:
    c = loss_args(make_case(0))
    own = c["pos_seq"].clone()
    own[0] = c["span_seq"][c["pos_span"][0]]
    pad_mask = c["key_mask"].clone()
    pad_mask[c["pos_seq"][0], c["pos_end"][0]] = False
    lonely = c["pos_span"] != c["pos_span"][-1]  # drop every positive of the last span
    return {
        "q_end shape": ({"q_end": c["q_end"][:-1]}, r"q_start \(6, 8\) and q_end \(5, 8\) must have the same shape"),
        "d mismatch": (
            {"q_start": c["q_start"][:, :-1], "q_end": c["q_end"][:, :-1]},
            r"d = 8 from keys, got shape \(6, 7\)",
        ),
        "keys 2-D": ({"keys": c["keys"][0]}, r"keys must be \(B, T, d\)"),
        "key_mask shape": ({"key_mask": c["key_mask"][:, :-1]}, r"key_mask has shape \(4, 6\), expected"),
        "span_seq length": ({"span_seq": c["span_seq"][:-1]}, r"span_seq has shape \(5,\), expected \(S,\) = \(6,\)"),
        "span_seq range": ({"span_seq": c["span_seq"] + B}, r"span_seq values must lie in \[0, 4\)"),
        "float index": ({"pos_seq": c["pos_seq"].double()}, "pos_seq must be a 1-D integer tensor"),
        "pos length": ({"pos_end": c["pos_end"][:-1]}, r"shape \(P,\)"),
        "pos range": ({"pos_start": c["pos_start"] + T}, r"pos_start values must lie in \[0, 7\)"),
        "own sequence": ({"pos_seq": own}, "padding or the span's own sequence"),
        "padding": ({"key_mask": pad_mask}, "padding or the span's own sequence"),
        "no positive": (
            {k: c[k][lonely] for k in ("pos_span", "pos_seq", "pos_start", "pos_end")},
            "span 5 .* has no positive",
        ),
        "no spans": ({k: c[k][:0] for k in ("q_start", "q_end", "span_seq")}, r"no queries \(S = 0\)"),
    }


@pytest.mark.parametrize("name", list(_bad_inputs()))
def test_inconsistent_inputs_raise_with_shapes(name):
    change, message = _bad_inputs()[name]
    with pytest.raises(ValueError, match=message):
        span_loss(**(loss_args(make_case(0)) | change))


def test_mixed_dtypes_raise():
    args = loss_args(make_case(0))
    with pytest.raises(TypeError, match="q_start is torch.float32 but keys are torch.float64"):
        span_loss(**(args | {"q_start": args["q_start"].float()}))


@pytest.mark.parametrize("chunk", [1, 4])
def test_chunked_scoring_gives_the_same_loss_gradients_and_accuracy(chunk):
    """Small chunks (recomputed in the backward pass) against one chunk of every query."""
    case = make_case(21)
    whole, stats = span_loss(**loss_args(case))
    chunked, chunk_stats = span_loss(**loss_args(case), chunk=chunk)
    torch.testing.assert_close(chunked, whole, rtol=0, atol=1e-12)
    for got, want in zip(grads(chunked, case), grads(whole, case), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    assert all(torch.equal(chunk_stats[k], stats[k]) for k in stats)
    single, _ = token_loss(
        case["q_start"],
        *(loss_args(case)[k] for k in ("keys", "key_mask", "span_seq", "pos_span", "pos_seq", "pos_start")),
        chunk=chunk,
    )
    reference, _ = token_loss(
        case["q_start"],
        *(loss_args(case)[k] for k in ("keys", "key_mask", "span_seq", "pos_span", "pos_seq", "pos_start")),
    )
    torch.testing.assert_close(single, reference, rtol=0, atol=1e-12)


@pytest.mark.parametrize("chunk", [2, 2048])
def test_pre_batch_negatives_match_a_naive_loop(chunk):
    """Extra keys join every query's denominator, except those of the span's own first (last) token."""
    case = make_case(7)
    g = torch.Generator().manual_seed(1)
    M = 9
    memory = PreBatch(2)
    memory.push(torch.randn(5, D, generator=g, dtype=torch.float64), torch.randint(0, 4, (5,), generator=g))
    memory.push(torch.randn(M - 5, D, generator=g, dtype=torch.float64), torch.randint(0, 4, (M - 5,), generator=g))
    negatives = memory.negatives()
    first, last = torch.randint(0, 4, (S,), generator=g), torch.randint(0, 4, (S,), generator=g)
    loss, _ = span_loss(**loss_args(case), chunk=chunk, negatives=negatives, span_tokens=(first, last))
    total = 0.0
    for s, occ in enumerate(case["occurrences"]):
        i = int(case["span_seq"][s])
        for q, token, at in ((case["q_start"][s], first[s], 1), (case["q_end"][s], last[s], 2)):
            positives = {(o[0], o[at]) for o in occ}
            candidates = [(b, t) for b in range(B) for t in range(T) if b != i and case["key_mask"][b, t]]
            sims = {c: q @ case["keys"][c] / math.sqrt(D) for c in candidates}
            extra = [q @ k / math.sqrt(D) for k, tok in zip(negatives.keys, negatives.tokens) if tok != token]
            den = sum(torch.exp(sims[c]) for c in candidates) + sum(torch.exp(x) for x in extra)
            total = total - torch.log(sum(torch.exp(sims[y]) for y in positives) / den)
    ref = total / S
    assert torch.allclose(loss, ref)
    assert all(torch.allclose(a, b) for a, b in zip(grads(loss, case), grads(ref, case)))
    assert loss > span_loss(**loss_args(case))[0]  # more negatives, larger loss
    empty = PreBatch(0)
    empty.push(negatives.keys, negatives.tokens)
    assert empty.negatives() is None
    with pytest.raises(ValueError, match="span_tokens"):
        span_loss(**loss_args(case), negatives=negatives)
