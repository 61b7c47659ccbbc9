"""Encoder loading, offline: the default MiniLM and a tiny local RoBERTa, no mocks.

The RoBERTa encoder is built here from scratch (byte-level BPE trained on the embedded
news corpus, randomly initialised weights), so nothing is ever downloaded.
"""

import hashlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import (
    PreTrainedTokenizerFast,
)

from npmcore.corpus.blocks import encoder_input, split_document
from npmcore.corpus.readers import Document
from npmcore.encoder import (
    EncoderError,
    base_encoder_path,
    default_encoder_path,
    encode,
    encoder_fingerprint,
    fast_forward,
    forward_flops,
    load_encoder,
    load_tokenizer,
    tokenizer_fingerprint,
    torch_forward,
)
from npmcore.forward import converted_forward, encode_ids

SPECIAL_TOKENS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
SENTENCE = "The bushfire near Hill Top forced hundreds of people from their homes."


def _squash(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def no_mask_dir(tmp_path_factory, bpe_tokenizer) -> str:
    """The same BPE tokenizer saved without any mask token."""
    path = tmp_path_factory.mktemp("no-mask")
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe_tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>"
    )
    assert tokenizer.mask_token is None
    tokenizer.save_pretrained(path)
    return str(path)


def _hidden_width(tokenizer, model, text: str) -> tuple[int, ...]:
    with torch.inference_mode():
        out = model(**tokenizer(text, return_tensors="pt"))
    return tuple(out.last_hidden_state.shape)


# --- 1. the default encoder -------------------------------------------------------------


def test_default_encoder_path_is_a_local_model_dir():
    path = default_encoder_path()
    assert path.is_dir()
    assert (path / "config.json").is_file()


def test_default_encoder_loads_offline():
    tokenizer, model = load_encoder()
    assert tokenizer.is_fast
    assert tokenizer.mask_token == "[MASK]"
    assert not model.training  # eval mode
    n_tokens = len(tokenizer(SENTENCE)["input_ids"])
    assert _hidden_width(tokenizer, model, SENTENCE) == (1, n_tokens, 384)


def test_load_tokenizer_is_cached():
    assert load_tokenizer() is load_tokenizer()
    assert load_tokenizer(None) is load_tokenizer(None)
    assert load_encoder()[0] is load_encoder()[0]


def test_load_tokenizer_cache_is_keyed_by_source():
    assert load_tokenizer() is load_tokenizer(None)
    assert load_tokenizer(None) is load_tokenizer(str(default_encoder_path()))


# --- 2. a RoBERTa-style encoder given as a local path -----------------------------------


def test_roberta_encoder_from_local_path(roberta_dir):
    tokenizer, model = load_encoder(roberta_dir)
    assert tokenizer.is_fast
    assert tokenizer.mask_token == "<mask>"
    assert tokenizer.mask_token_id == SPECIAL_TOKENS.index("<mask>")
    ids = tokenizer(SENTENCE)["input_ids"]
    assert ids[0] == tokenizer.convert_tokens_to_ids("<s>")
    assert ids[-1] == tokenizer.convert_tokens_to_ids("</s>")
    assert tokenizer.unk_token_id not in ids  # byte-level: no unknowns
    assert _hidden_width(tokenizer, model, SENTENCE) == (1, len(ids), 32)
    assert load_tokenizer(roberta_dir) is tokenizer


def _check_blocks(doc: Document, tokenizer, max_tokens: int):
    blocks = split_document(doc, tokenizer, max_tokens)
    bos = tokenizer.convert_tokens_to_ids("<s>")
    eos = tokenizer.convert_tokens_to_ids("</s>")
    assert len(blocks) > 1
    for i, block in enumerate(blocks):
        assert block.block_index == i
        assert block.block_id == f"{doc.key}#{i}"
        assert block.text and block.text == block.text.strip()
        assert block.text in doc.text  # a contiguous slice
        assert len(block.token_ids) <= max_tokens
        assert block.token_ids[0] == bos
        assert block.token_ids[-1] == eos
        assert block.token_ids == tokenizer(encoder_input(doc.title, block.text))["input_ids"]
    assert _squash(" ".join(b.text for b in blocks)) == _squash(doc.text)
    return blocks


def test_split_document_with_roberta_tokenizer(roberta_dir, news_lines):
    tokenizer = load_tokenizer(roberta_dir)
    doc = Document("news-0", "Bushfire news", "\n".join(news_lines[:6]), "lee_background")
    assert len(tokenizer(doc.text)["input_ids"]) > 10 * 64
    blocks = _check_blocks(doc, tokenizer, 64)
    # Sentences are kept whole where they fit: most blocks end at a sentence end.
    assert sum(b.text[-1] in ".?!\"'" for b in blocks) >= len(blocks) // 2


def test_split_document_with_roberta_tokenizer_cuts_long_sentences(roberta_dir, news_lines):
    tokenizer = load_tokenizer(roberta_dir)
    # One huge "sentence": no sentence boundaries, so blocks must be cut inside it.
    text = " ".join(news_lines[:3]).replace(".", ",").replace("?", ",").replace("!", ",")
    doc = Document("news-long", "", text, "lee_background")
    _check_blocks(doc, tokenizer, 64)


def test_split_document_after_a_truncating_call(roberta_dir, news_lines):
    """A truncating call leaves truncation on the shared (cached) backend tokenizer;
    split_document must still see the whole text."""
    tokenizer = load_tokenizer(roberta_dir)
    try:
        tokenizer(news_lines[0], truncation=True, max_length=8)
        doc = Document("news-1", "Bushfire news", "\n".join(news_lines[:4]), "lee_background")
        _check_blocks(doc, tokenizer, 64)
    finally:
        tokenizer.backend_tokenizer.no_truncation()


# --- 3. errors name the problem ---------------------------------------------------------


def test_missing_path_names_the_path(tmp_path):
    missing = str(tmp_path / "no-such-encoder")
    with pytest.raises(EncoderError) as info:
        load_tokenizer(missing)
    assert missing in str(info.value)
    with pytest.raises(EncoderError) as info:
        load_encoder(missing)
    assert missing in str(info.value)


def test_tokenizer_without_mask_token_is_rejected(no_mask_dir):
    with pytest.raises(EncoderError, match="mask"):
        load_tokenizer(no_mask_dir)


# --- 4. tokenizer fingerprints ----------------------------------------------------------


def test_fingerprints_differ_between_tokenizers(roberta_dir):
    default_fp = tokenizer_fingerprint(load_tokenizer())
    roberta_fp = tokenizer_fingerprint(load_tokenizer(roberta_dir))
    assert default_fp != roberta_fp
    assert len(default_fp) == len(roberta_fp) == 16


@pytest.mark.parametrize("which", ["default", "roberta"])
def test_fingerprint_ignores_truncation(which, roberta_dir):
    tokenizer = load_tokenizer(None if which == "default" else roberta_dir)
    before = tokenizer_fingerprint(tokenizer)
    try:
        tokenizer(SENTENCE, truncation=True, max_length=8)
        assert tokenizer.backend_tokenizer.truncation is not None  # the call did change state
        assert tokenizer_fingerprint(tokenizer) == before
        tokenizer([SENTENCE, "Short."], padding=True)
        assert tokenizer_fingerprint(tokenizer) == before
    finally:
        tokenizer.backend_tokenizer.no_truncation()
        tokenizer.backend_tokenizer.no_padding()
    assert tokenizer_fingerprint(tokenizer) == before


def weights_digest(model) -> str:
    """:func:`encoder_fingerprint` computed afresh, never from its cache."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        if not name.startswith("pooler."):
            digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
            digest.update(tensor.detach().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]


def test_an_encoders_fingerprint_follows_every_change_of_its_weights():
    _, model = load_encoder()
    shipped = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    first = encoder_fingerprint(model)
    assert first == weights_digest(model) == encoder_fingerprint(model)
    with torch.no_grad():  # one weight changed in place
        model.encoder.layer[5].output.dense.bias[7] += 1.0
    assert encoder_fingerprint(model) == weights_digest(model) != first
    optimiser = torch.optim.SGD(model.parameters(), lr=0.1)  # a training step
    model(input_ids=torch.tensor([[101, 7592, 102]])).last_hidden_state.sum().backward()
    optimiser.step()
    stepped = encoder_fingerprint(model)
    assert stepped == weights_digest(model) != first
    model.load_state_dict(shipped)  # the shipped weights back
    assert encoder_fingerprint(model) == weights_digest(model) == first


def test_interpolation_mixes_every_parameter_of_two_encoders_of_one_lineage(tmp_path):
    from safetensors.torch import load_file

    from npmcore.encoder import interpolate, load_masked_lm, save_fp16

    shipped = str(default_encoder_path())
    _, model = load_masked_lm(shipped, require_head=True)
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.01)
    other = save_fp16(model, shipped, tmp_path / "other")
    a, b = load_file(Path(shipped) / "model.safetensors"), load_file(other / "model.safetensors")
    for weight in (0.0, 0.25, 1.0):
        mixed = load_file(interpolate(shipped, str(other), weight, tmp_path / f"mix{weight}") / "model.safetensors")
        assert mixed.keys() == a.keys()
        for key, value in mixed.items():
            expected = ((1 - weight) * a[key].float() + weight * b[key].float()).half()
            torch.testing.assert_close(value, expected, rtol=0, atol=1e-3, msg=key)
    assert load_tokenizer(str(tmp_path / "mix0.25")).get_vocab() == load_tokenizer(shipped).get_vocab()
    with pytest.raises(EncoderError, match=r"must lie in \[0, 1\]"):
        interpolate(shipped, str(other), 1.5, tmp_path / "bad")
    with pytest.raises(EncoderError, match="no trained masked-LM head"):
        interpolate(shipped, str(base_encoder_path()), 0.5, tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


# --- 3. the forward the datastore runs: OpenVINO on a CPU, torch's vectors --------------


@pytest.mark.parametrize("which", ["default", "roberta"])
def test_the_openvino_forward_gives_torchs_vectors(which, roberta_dir, news_lines):
    """Real text in batches of mixed lengths (padding included): the compiled forward's vectors equal
    torch's within float rounding, and so does every token's nearest neighbours among them."""
    tokenizer, model = load_encoder(None if which == "default" else roberta_dir)
    forward = fast_forward(model, "f32")
    assert forward.__qualname__.startswith("compile_forward")  # compiled, not the torch fallback
    assert fast_forward(model, "f32") is forward  # once per model, thread count and precision
    sequences = [tokenizer(" ".join(news_lines[i : i + 1 + i % 3]))["input_ids"][:256] for i in range(24)]
    fast = np.concatenate(encode(model, tokenizer, sequences, 2048, forward))
    exact = np.concatenate(encode(model, tokenizer, sequences, 2048, torch_forward(model)))
    assert fast.shape == exact.shape == (sum(map(len, sequences)), model.config.hidden_size)
    np.testing.assert_allclose(fast, exact, rtol=0, atol=1e-4 * np.abs(exact).max())
    queries = exact[:: len(exact) // 16][:16]
    scores = queries @ exact.T  # the nearest 20 by the compiled vectors score as the exact nearest 20 (ties may swap)
    found = np.take_along_axis(scores, np.argsort(-(queries @ fast.T))[:, :20], axis=1)
    np.testing.assert_allclose(found, -np.sort(-scores)[:, :20], rtol=1e-4)


def test_the_compiled_forward_answers_callers_on_several_threads(news_lines):
    """The query service checks a new index while the old one answers, both with the one compiled encoder:
    callers on several threads each get their own vectors (OpenVINO's one infer request refuses a second caller
    while busy)."""
    tokenizer, model = load_encoder()
    forward = fast_forward(model, "f32")
    sequences = [tokenizer(line)["input_ids"][:128] for line in news_lines[:16]]
    alone = encode(model, tokenizer, sequences, 2048, forward)
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda _: encode(model, tokenizer, sequences, 2048, forward), range(8)))
    for vectors in together:
        for a, b in zip(vectors, alone, strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("width", [16, 128])
def test_forward_flops_are_the_products_torch_counts(width):
    """Against torch's FLOP counter over a real forward (attention as plain products, no pooler)."""
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import AutoModel

    model = AutoModel.from_pretrained(default_encoder_path(), attn_implementation="eager", add_pooling_layer=False)
    ids = torch.ones((2, width), dtype=torch.long)
    with FlopCounterMode(display=False) as counter, torch.inference_mode():
        model(input_ids=ids, attention_mask=ids)
    assert forward_flops(model.config, width) * 2 * width == counter.get_total_flops()


def test_converting_an_encoder_sends_no_telemetry(tmp_path, monkeypatch, small_encoder):
    """OpenVINO's converter posts events during a conversion (its import posts one of its own, once a process)."""
    import openvino.tools.ovc  # noqa: F401  (imported before: its event is not the conversion's)
    import openvino_telemetry

    events = []
    monkeypatch.setattr(openvino_telemetry.Telemetry, "send_event", lambda self, *event, **kw: events.append(event))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # converted here, not read from a cache
    fast_forward(load_encoder(small_encoder)[1], "f32")
    assert (tmp_path / "cache" / "npmcore" / "openvino").is_dir() and events == []


def test_a_worker_compiles_the_converted_encoder_by_its_fingerprint_alone(
    tmp_path, monkeypatch, roberta_dir, news_lines
):
    """What a Dask worker embeds with (no torch, no weights): once this machine has converted the encoder, its
    weights' fingerprint finds it, and its vectors are exactly those of the forward that converted it."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    tokenizer, model = load_encoder(roberta_dir)
    assert converted_forward(encoder_fingerprint(model), 1, "f32") is None  # not converted on this machine yet
    sequences = [tokenizer(" ".join(news_lines[i : i + 1 + i % 3]))["input_ids"][:256] for i in range(12)]
    loaded = encode(model, tokenizer, sequences, 2048, fast_forward(model, "f32", threads=1))
    forward = converted_forward(encoder_fingerprint(model), 1, "f32")
    assert forward is not None and converted_forward(encoder_fingerprint(model), 1, "f32") is forward  # once
    for a, b in zip(encode_ids(sequences, tokenizer.pad_token_id, forward, 2048), loaded, strict=True):
        np.testing.assert_array_equal(a, b)


def test_the_converted_encoder_is_cached_and_a_cache_that_cannot_be_written_costs_only_time(
    tmp_path, monkeypatch, roberta_dir
):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    fast_forward(load_encoder(roberta_dir)[1], "f32")
    fast_forward(load_encoder(roberta_dir)[1], "f32")  # another model object, the same weights: read from the cache
    (entry,) = (tmp_path / "cache" / "npmcore" / "openvino").iterdir()
    assert (entry / "encoder.xml").is_file()
    (tmp_path / "not-a-folder").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "not-a-folder"))
    assert fast_forward(load_encoder(roberta_dir)[1], "f32").__qualname__.startswith("compile_forward")
