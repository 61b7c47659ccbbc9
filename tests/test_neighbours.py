"""Cross-document batches: seed blocks with their BM25 neighbours in other documents, on real Wikipedia blocks."""

from dataclasses import replace
from itertools import islice

import pytest
import torch
from conftest import SHARED_DATA

from npmcore.corpus.ingest import ingest
from npmcore.corpus.partitions import IngestConfig
from npmcore.encoder import load_tokenizer
from npmcore.index import bm25
from npmcore.index.bm25_index import build_bm25_index
from npmcore.model.neighbours import NEIGHBOURS, SEARCHED, neighbour_batches, seed_query
from npmcore.model.step_batches import mask_batch, masked_batches
from npmcore.model.step_stats import batch_stats
from npmcore.model.train import train
from npmcore.model.train_config import TrainConfig
from npmcore.snapshots import read_blocks
from npmcore.storage import local_folder

BATCH = 8


@pytest.fixture(scope="module")
def wiki(tmp_path_factory) -> tuple[str, str]:
    """A corpus of one enwiki_sample file in 128-token blocks and its index of BM25 alone."""
    store = tmp_path_factory.mktemp("neighbours")
    corpus = ingest([str(SHARED_DATA / "enwiki_sample" / "wiki_00")], str(store), IngestConfig(max_tokens=128))
    return corpus, build_bm25_index(corpus)


def test_each_seed_brings_its_top_bm25_neighbours_of_other_documents(wiki):
    corpus, index = wiki
    rows = [
        row
        for t in read_blocks(corpus, ["block_id", "doc_id", "text"])
        for row in zip(*(t.column(c).to_pylist() for c in ("block_id", "doc_id", "text")), strict=True)
    ]
    number = {block_id: n for n, (block_id, _, _) in enumerate(rows)}
    searcher = bm25.BM25Searcher(str(local_folder(index) / "bm25"))
    batches = list(islice(neighbour_batches(corpus, index, BATCH, seed=0), 40))
    assert batches == list(islice(neighbour_batches(corpus, index, BATCH, seed=0), 40))  # a function of the seed
    assert batches != list(islice(neighbour_batches(corpus, index, BATCH, seed=1), 40))
    placed: set[str] = set()
    for batch in batches:
        assert len(batch.block_ids) == BATCH == len(set(batch.block_ids))
        seeds = []
        # reference: walk the batch as groups, each a seed and the hits that follow it
        at = 0
        while at < BATCH:
            seed = number[batch.block_ids[at]]
            seeds.append(batch.block_ids[at])
            seeds.append(batch.block_ids[at])
            hits = [int(h.block_id) for h in searcher.search(seed_query(rows[seed][2]), SEARCHED)]
            expected = [seed]
            for hit in hits:
                if len(expected) > NEIGHBOURS or at + len(expected) == BATCH:
                    break
                if rows[hit][1] != rows[seed][1] and hit not in expected and rows[hit][0] not in batch.block_ids[:at]:
                    expected.append(hit)
            assert [number[b] for b in batch.block_ids[at : at + len(expected)]] == expected
            at += len(expected)
        assert not placed & set(seeds)  # a seed is a block not yet placed this epoch (a neighbour may come again)
        placed |= set(batch.block_ids)
    searcher.close()


def test_their_positives_lie_in_other_documents_and_training_takes_them(wiki, tmp_path):
    corpus, index = wiki
    config = TrainConfig(corpus=corpus, steps=2, batch_size=BATCH, warmup_steps=1, checkpoint_every=2)
    cross = replace(config, batches="bm25", neighbours=index)
    tokenizer = load_tokenizer(None)
    shares = {}
    for name, c in (("document", config), ("bm25", cross)):
        stats = [batch_stats(b) for b in islice(masked_batches(c, tokenizer, 0), 6)]
        shares[name] = sum(s["other_document_positives"] for s in stats) / len(stats)
    assert shares["bm25"] > 0.8 and shares["bm25"] > shares["document"] + 0.3
    logged = []
    train(cross, str(tmp_path / "run"), on_step=logged.append)
    assert [s.step for s in logged] == [1, 2] and all(s.other_document_positives > 0.5 for s in logged)
    with pytest.raises(ValueError, match="bm25 batches need an index of the corpus with BM25"):
        replace(config, batches="bm25")
    batch = mask_batch(next(neighbour_batches(corpus, index, BATCH, 0)), tokenizer, cross, step=0, micro=0)
    assert batch.docs.shape == (BATCH,) and torch.unique(batch.docs).numel() >= BATCH // (NEIGHBOURS + 1)


def test_the_neighbours_must_come_from_an_index_of_the_same_corpus(wiki, tmp_path):
    corpus, _ = wiki
    other = ingest([str(SHARED_DATA / "enwiki_sample" / "wiki_01")], str(tmp_path), IngestConfig(max_tokens=128))
    with pytest.raises(ValueError, match="is not an index of corpus"):
        next(neighbour_batches(corpus, build_bm25_index(other), BATCH, seed=0))
