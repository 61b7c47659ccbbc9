"""NPM single and closed-set labels: one vector per query, the retrieved tokens scored one by one.

* :func:`predict_tokens` (open-set, NPM single): distinct token ids ranked by the summed exp scores of their
  retrieved occurrences (kNN of the FAISS index, or every token of the top BM25 passages);
* :func:`classify` (closed-set): each label scores the exp similarities of the retrieved tokens that are its
  verbalizer words (:func:`label_token_ids`); NPM queries with q_start + q_end (the sum of the start and end
  similarities).

Imports :class:`~npmcore.answer.inference.NPM` (the index and encoder they search) and the shared scoring of
:mod:`npmcore.answer.phrases`.
"""

from typing import Literal

import numpy as np

from npmcore.answer.evidence import Evidence
from npmcore.answer.inference import NPM, Answer, InferenceConfig
from npmcore.answer.phrases import label_scores, score_tokens

Mode = Literal["npm", "npm-single"]  # two query vectors ([MASKs][MASKe]) or one


def predict_tokens(npm: NPM, queries: list[str], config: InferenceConfig = InferenceConfig()) -> list[list[Answer]]:
    """NPM single: the top single-token answers of each query."""
    q = npm.encode_queries(queries, 1)[:, 0] * npm.scale  # (B, d)
    if config.restrict:
        hits = [
            (ids, vectors @ qv)
            for qv, (ids, vectors) in zip(q, npm.retrieval.restricted(queries, config.passages), strict=True)
        ]
    else:
        sims, found = npm.retrieval.search(q, config.k, config.rerank, config.search_params)
        hits = [(f[f >= 0], s[f >= 0]) for s, f in zip(sims, found, strict=True)]
    results = []
    for ids, sims in hits:
        if config.content_words:
            tables = npm.corpus.tables
            keep = ~(tables.stop & tables.word_start)[npm.corpus.tokens[ids]]  # a word piece is no stopword
            ids, sims = ids[keep], sims[keep]
        if len(ids) == 0:
            results.append([])
            continue
        tokens = np.asarray(npm.corpus.tokens[ids], dtype=np.int64)
        vocab, scores = score_tokens(tokens, sims, config.tau)
        share = np.exp((sims - sims.max()) / config.tau)
        share /= share.sum()
        answers = []
        for token, score in zip(vocab[: config.answers].tolist(), scores[: config.answers].tolist(), strict=True):
            mine = np.flatnonzero(tokens == token)
            best = mine[np.argsort(-share[mine], kind="stable")[: config.evidence]]
            evidence = tuple(
                Evidence(int(npm.corpus.block_of(ids[i : i + 1])[0]), int(ids[i]), int(ids[i]), float(share[i]))
                for i in best
            )
            answers.append(Answer(npm.evidence.surface(evidence[0]), (token,), score, evidence, rank=len(answers)))
        results.append(answers)
    return results


def classify(
    npm: NPM,
    queries: list[str],
    label_words: list[np.ndarray],
    mode: Mode = "npm",
    config: InferenceConfig = InferenceConfig(),
) -> np.ndarray:
    """(B, labels) closed-set scores (log of summed exp similarity; -inf: no word of the label retrieved)."""
    if mode == "npm":
        q = npm.encode_queries(queries, 2).sum(axis=1) * npm.scale  # sim_start + sim_end
    else:
        q = npm.encode_queries(queries, 1)[:, 0] * npm.scale
    sims, found = npm.retrieval.search(q, config.k, config.rerank, config.search_params)
    out = np.empty((len(queries), len(label_words)))
    for row, (s, f) in enumerate(zip(sims, found, strict=True)):
        keep = f >= 0
        out[row] = label_scores(
            np.asarray(npm.corpus.tokens[f[keep]], dtype=np.int64), s[keep], label_words, config.tau
        )
    return out


def label_token_ids(tokenizer, words: list[str]) -> tuple[np.ndarray, list[str]]:
    """Token ids of the verbalizer ``words`` that are single tokens of the encoder's vocabulary
    (as a word inside a sentence, and at its start where that differs: BPE "Ġgreat" and
    "great"); returns (ids, the words that are not single tokens and were dropped)."""
    ids, dropped = set(), []
    for word in words:
        forms = [
            tokenizer(f" {word.strip()}", add_special_tokens=False)["input_ids"],
            tokenizer(word.strip(), add_special_tokens=False)["input_ids"],
        ]
        single = [f[0] for f in forms if len(f) == 1 and f[0] != tokenizer.unk_token_id]
        if single:
            ids.update(single)
        else:
            dropped.append(word)
    return np.array(sorted(ids), dtype=np.int64), dropped
