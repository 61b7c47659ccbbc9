"""The encoder's precision per machine: auto's rule from the CPU's flags and the probe's rates (checked
without bf16 hardware: the flags, the probe and its compiles are pretended), the probe cached per machine and
encoder, bf16 refused where OpenVINO would compute f32, and bf16 vectors against f32's where the CPU has the units
(the CPU the tests run as: ``NPM_TEST_CPU``, tests/cpu.py)."""

import json

import numpy as np
import pytest
from cpu import AMX, AVX2, pretend_flags, test_cpu_flags

from npmcore.encoder import EncoderError, _openvino_model, encode, encoder_fingerprint, fast_forward, load_encoder
from npmcore.index import precision
from npmcore.index.precision import (
    PROBE_BLOCK_TOKENS,
    PROBE_BLOCKS,
    choose_precision,
    cpu_name,
    forward_rates,
    has_bf16_units,
    probe_blocks,
    resolve_precision,
)

pytestmark = pytest.mark.cpu
UNITS = has_bf16_units(test_cpu_flags())
NO_UNITS = f"this CPU ({cpu_name()}) has neither AMX nor AVX512_BF16: OpenVINO computes a bf16 hint in f32"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path / "npmcore" / "precision"


@pytest.fixture
def probed(monkeypatch) -> tuple[list[str], dict[str, float]]:
    """The probe replaced, its compiles too (a pretended CPU with bf16 units compiles nothing real: the host may
    have none): it answers the rates put in the dict, and lists the precisions it was asked for."""
    calls, rates, compiled = [], {}, []

    def probe(model, tokenizer, asked):
        assert asked in compiled, f"{asked} probed before it was compiled"
        calls.append(asked)
        return rates[asked]

    monkeypatch.setattr(precision, "fast_forward", lambda model, asked, threads: compiled.append(asked))
    monkeypatch.setattr(precision, "probe", probe)
    return calls, rates


def test_auto_takes_bf16_only_with_the_units_and_a_faster_probe():
    assert choose_precision(AMX, {"f32": 1000.0, "bf16": 2500.0}) == "bf16"
    assert choose_precision(frozenset({"avx512_bf16"}), {"f32": 1000.0, "bf16": 1200.0}) == "bf16"
    assert choose_precision(AMX, {"f32": 1000.0, "bf16": 900.0}) == "f32"  # the units, but slower here
    assert choose_precision(AVX2, {"f32": 1000.0, "bf16": 2500.0}) == "f32"  # no units: the hint runs f32
    assert choose_precision(AMX, {"f32": 1000.0}) == "f32"


def test_auto_resolves_by_the_flags_and_the_probe(roberta_dir, cache, probed, monkeypatch):
    tokenizer, model = load_encoder(roberta_dir)
    calls, rates = probed
    pretend_flags(monkeypatch, AVX2)
    assert resolve_precision("auto", model, tokenizer) == "f32"
    assert calls == []  # no units: nothing to probe
    assert resolve_precision("f32", model, tokenizer) == "f32"
    with pytest.raises(ValueError, match="precision bf16 needs a CPU with AMX or AVX512_BF16"):
        resolve_precision("bf16", model, tokenizer)
    with pytest.raises(ValueError, match="precision must be one of auto, f32, bf16, got 'fp16'"):
        resolve_precision("fp16", model, tokenizer)
    pretend_flags(monkeypatch, AMX)
    rates.update(f32=1000.0, bf16=2500.0)
    assert resolve_precision("auto", model, tokenizer) == "bf16"
    assert calls == ["f32", "bf16"]
    assert (resolve_precision("bf16", model, tokenizer), resolve_precision("f32", model, tokenizer)) == ("bf16", "f32")
    pretend_flags(monkeypatch, AMX | {"amx_int8"})  # another machine: probed for itself
    rates.update(bf16=900.0)
    assert resolve_precision("auto", model, tokenizer) == "f32"
    assert calls == ["f32", "bf16", "f32", "bf16"]


def test_the_probe_is_cached_per_machine_and_encoder(roberta_dir, cache, probed, monkeypatch):
    tokenizer, model = load_encoder(roberta_dir)
    calls, rates = probed
    pretend_flags(monkeypatch, AMX)
    rates.update(f32=1000.0, bf16=2500.0)
    assert forward_rates(model, tokenizer) == {"f32": 1000.0, "bf16": 2500.0}
    rates.update(f32=1.0, bf16=1.0)
    assert forward_rates(model, tokenizer) == {"f32": 1000.0, "bf16": 2500.0}  # the cache's: not probed again
    assert forward_rates(load_encoder(roberta_dir)[1], tokenizer)["bf16"] == 2500.0  # the same weights, loaded again
    assert calls == ["f32", "bf16"]
    (entry,) = cache.iterdir()  # written under a temporary name, renamed: nothing else left
    assert entry.name.endswith(f"-{encoder_fingerprint(model)}.json")
    assert json.loads(entry.read_text())["rates"] == {"f32": 1000.0, "bf16": 2500.0}
    default_tokenizer, default_model = load_encoder()
    assert forward_rates(default_model, default_tokenizer) == {"f32": 1.0, "bf16": 1.0}  # another encoder: probed
    assert len(calls) == 4 and len(list(cache.iterdir())) == 2


def test_the_probe_times_real_blocks_on_this_machine(roberta_dir, cache):
    tokenizer, model = load_encoder(roberta_dir)
    blocks = probe_blocks(tokenizer)
    assert len(blocks) == PROBE_BLOCKS and max(map(len, blocks)) <= PROBE_BLOCK_TOKENS
    assert sum(map(len, blocks)) > PROBE_BLOCKS * PROBE_BLOCK_TOKENS // 2  # mostly whole blocks of news articles
    rates = forward_rates(model, tokenizer)
    assert set(rates) == ({"f32", "bf16"} if UNITS else {"f32"}) and all(r > 0 for r in rates.values())


@pytest.mark.skipif(UNITS, reason="this CPU has bf16 units: OpenVINO computes in bf16 there")
def test_openvino_takes_a_bf16_hint_without_the_units_and_computes_f32_so_bf16_is_refused(roberta_dir, news_lines):
    """What OpenVINO does on a CPU without AMX or AVX512_BF16: it compiles a bf16 hint without a word, reports
    f32 as the compiled model's precision, and its vectors are f32's bit for bit."""
    import openvino as ov

    tokenizer, model = load_encoder(roberta_dir)
    sequences = [tokenizer(line)["input_ids"][:64] for line in news_lines[:8]]
    vectors = {}
    for hint in ("f32", "bf16"):
        compiled = ov.Core().compile_model(
            _openvino_model(model), "CPU", {"INFERENCE_PRECISION_HINT": hint, "INFERENCE_NUM_THREADS": 1}
        )
        assert compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name() == "f32"
        output = compiled.output("last_hidden_state")
        forward = lambda ids, mask: compiled({"input_ids": ids, "attention_mask": mask})[output]  # noqa: E731
        vectors[hint] = np.concatenate(encode(model, tokenizer, sequences, 2048, forward))
    np.testing.assert_array_equal(vectors["bf16"], vectors["f32"])
    with pytest.raises(EncoderError, match="OpenVINO compiles the encoder in f32, not bf16, on this CPU"):
        fast_forward(model, "bf16")


@pytest.mark.skipif(not UNITS, reason=NO_UNITS)
def test_bf16_vectors_are_f32s_within_bf16_rounding(news_lines):
    """Real text in batches of mixed lengths: the bf16 forward's vectors point where the f32 forward's do,
    and the nearest tokens of a bf16 datastore to bf16 queries are mostly the f32 ones'."""
    tokenizer, model = load_encoder()
    sequences = [tokenizer(" ".join(news_lines[i : i + 1 + i % 3]))["input_ids"][:256] for i in range(24)]
    f32 = np.concatenate(encode(model, tokenizer, sequences, 2048, fast_forward(model, "f32")))
    bf16 = np.concatenate(encode(model, tokenizer, sequences, 2048, fast_forward(model, "bf16")))
    assert not np.array_equal(f32, bf16)  # computed in bf16 indeed
    cosine = (f32 * bf16).sum(1) / (np.linalg.norm(f32, axis=1) * np.linalg.norm(bf16, axis=1))
    assert cosine.mean() >= 0.999
    rows = np.arange(0, len(f32), len(f32) // 64)[:64]
    exact = np.argsort(-(f32[rows] @ f32.T), axis=1)[:, :10]
    found = np.argsort(-(bf16[rows] @ bf16.T), axis=1)[:, :10]
    assert np.mean([len(set(a) & set(b)) / 10 for a, b in zip(exact, found, strict=True)]) >= 0.8
