"""The masked-LM stage: BERT masking on real blocks, and the loss against a plain per-position reference."""

import logging
import math
from collections import Counter
from fractions import Fraction

import pytest
import torch
import torch.nn.functional as F

from npmcore.corpus.blocks import split_document
from npmcore.corpus.readers import read_lines
from npmcore.encoder import EncoderError, load_masked_lm, mlm_head
from npmcore.model.mlm import mask_mlm, mlm_loss
from npmcore.vocab import vocab_tables


@pytest.fixture(scope="module")
def blocks(news_path, tokenizer) -> list[list[int]]:
    docs = list(read_lines(open(news_path, encoding="utf-8").read(), "lee", 0))[:60]
    return [b.token_ids for doc in docs for b in split_document(doc, tokenizer, 128)]


def test_mask_mlm_chooses_the_budget_of_content_tokens_and_keeps_the_originals(blocks, tokenizer):
    special = vocab_tables(tokenizer).special
    batch = blocks[:32]
    mb = mask_mlm(batch, tokenizer, 0.15, torch.Generator().manual_seed(0))
    B, T = mb.input_ids.shape
    assert (B, T) == (32, max(map(len, batch)))
    rows, cols = mb.positions // T, mb.positions % T
    assert mb.positions.tolist() == sorted(set(mb.positions.tolist()))
    counts = Counter(rows.tolist())
    for b, seq in enumerate(batch):
        assert mb.attention_mask[b].tolist() == [1] * len(seq) + [0] * (T - len(seq))
        content = sum(not special[t] for t in seq)
        assert counts[b] == max(1, math.ceil(Fraction("0.15") * content))  # the budget, exactly
        mine = cols[rows == b].tolist()
        assert all(not special[seq[t]] for t in mine)  # never a special token or padding
        assert mb.labels[rows == b].tolist() == [seq[t] for t in mine]  # targets are the original tokens
        untouched = [t for t in range(len(seq)) if t not in set(mine)]
        assert [int(mb.input_ids[b, t]) for t in untouched] == [seq[t] for t in untouched]


def test_mask_mlm_replaces_80_10_10_and_is_seeded(blocks, tokenizer):
    ids = mask_mlm(blocks, tokenizer, 0.15, torch.Generator().manual_seed(1))
    at = ids.input_ids.reshape(-1)[ids.positions]
    masked = float((at == tokenizer.mask_token_id).float().mean())
    kept = float((at == ids.labels).float().mean())
    assert (
        len(ids.labels) > 2000 and 0.77 < masked < 0.83 and 0.08 < kept < 0.12
    )  # random replacements may hit the original
    assert not vocab_tables(tokenizer).special[at[at != tokenizer.mask_token_id].numpy()].any()
    again = mask_mlm(blocks, tokenizer, 0.15, torch.Generator().manual_seed(1))
    other = mask_mlm(blocks, tokenizer, 0.15, torch.Generator().manual_seed(2))
    assert torch.equal(ids.input_ids, again.input_ids) and not torch.equal(ids.positions, other.positions)


def test_mlm_loss_equals_cross_entropy_over_every_position_with_ignored_labels(blocks, tokenizer):
    """The reference projects every position onto the vocabulary and ignores unmasked ones."""
    torch.manual_seed(0)
    _, model = load_masked_lm()
    model.eval()
    mb = mask_mlm(blocks[:6], tokenizer, 0.15, torch.Generator().manual_seed(3))
    hidden = model.base_model(input_ids=mb.input_ids, attention_mask=mb.attention_mask).last_hidden_state
    loss, stats = mlm_loss(hidden, mlm_head(model), mb.positions, mb.labels)
    labels = torch.full(mb.input_ids.shape, -100).reshape(-1)
    labels[mb.positions] = mb.labels
    logits = model(input_ids=mb.input_ids, attention_mask=mb.attention_mask).logits  # (B, T, V): every position
    reference = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels, ignore_index=-100)
    torch.testing.assert_close(loss, reference, rtol=1e-5, atol=1e-5)
    hits = logits.reshape(-1, logits.shape[-1])[mb.positions].argmax(-1) == mb.labels
    assert float(stats["acc"]) == pytest.approx(float(hits.float().mean())) and int(stats["tokens"]) == len(mb.labels)


def test_the_head_is_tied_to_the_input_embeddings(caplog, capfd):
    with caplog.at_level(logging.INFO, logger="npmcore.encoder"):
        _, model = load_masked_lm()
    assert model.get_output_embeddings().weight is model.base_model.get_input_embeddings().weight
    # a fresh head on a published encoder is said in one line, not as transformers' "corrupted" report
    assert "no masked-LM head: 6 head tensors freshly initialised" in caplog.text
    assert "corrupted" not in capfd.readouterr().err and "lacks encoder weights" not in caplog.text


def test_bad_input(tokenizer, roberta_dir):
    g = torch.Generator()
    with pytest.raises(ValueError, match="ratio"):
        mask_mlm([[101, 1996, 102]], tokenizer, 0.0, g)
    with pytest.raises(ValueError, match="empty"):
        mask_mlm([[101, 102], []], tokenizer, 0.15, g)
    with pytest.raises(ValueError, match="vocabulary"):
        mask_mlm([[101, len(tokenizer), 102]], tokenizer, 0.15, g)
    with pytest.raises(ValueError, match="no masked position"):
        mlm_loss(
            torch.zeros(1, 3, 4),
            torch.nn.Linear(4, 5),
            torch.zeros(0, dtype=torch.long),
            torch.zeros(0, dtype=torch.long),
        )
    _, roberta = load_masked_lm(roberta_dir)  # a RoBERTa-style head works too
    assert type(mlm_head(roberta)).__name__ == "RobertaLMHead"
    from transformers import DistilBertConfig, DistilBertForMaskedLM

    distil = DistilBertForMaskedLM(DistilBertConfig(vocab_size=100, dim=8, n_layers=1, n_heads=2, hidden_dim=16))
    with pytest.raises(EncoderError, match="not one module"):  # its head is three modules
        mlm_head(distil)
