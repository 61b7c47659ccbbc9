"""Baselines of the paper's shape with the evaluated encoder's own masked-LM head.

* ``mlm-head``: the parametric model alone: the head fills the query's one ``[MASK]`` with its most
  likely token that is a whole word and a content word (no word piece, function word, punctuation or
  special token), decoded.
* ``mlm-read``: retrieve-then-read: the top BM25 passage of the query stands before it (cut from its
  end to fit the encoder's length), then the head fills the mask the same way.

Both answer one token, so a gold answer of several tokens is never matched: the gap to NPM's
phrases is part of what the nonparametric part adds. The head must have been trained
(:class:`npmcore.answer.knnlm.MaskedLMHead` refuses one that was not).
"""

import numpy as np

from npmcore.answer.inference import NPM
from npmcore.answer.knnlm import MaskedLMHead
from npmcore.encoder import special_frame

BASELINES = ("mlm-head", "mlm-read")


class MaskFiller:
    """The masked-LM head of the encoder of ``npm``'s queries, filling masks with whole content words."""

    def __init__(self, npm: NPM):
        self.npm = npm
        self.head = MaskedLMHead(npm.encoder_source, npm.fingerprint)
        tables = npm.corpus.tables
        self.allowed = tables.word_start & ~tables.stop & ~tables.special

    def sequences(self, queries: list[str], read: bool, passages: int = 1) -> list[list[int]]:
        """Each query's token ids with one mask; ``read``: its top ``passages`` BM25 passages before it,
        their end cut so that the whole fits the encoder's limit."""
        tokenizer = self.npm.tokenizer
        before = special_frame(tokenizer)[0]
        out = []
        for query in queries:
            ids = self.npm.query_ids(query, 1)
            if read:
                text = " ".join(self.npm.retrieval.passages(query, passages))
                context = tokenizer(text, add_special_tokens=False)["input_ids"]
                room = max(0, tokenizer.model_max_length - len(ids))
                ids = ids[:before] + context[:room] + ids[before:]
            out.append(ids)
        return out

    def fill(self, queries: list[str], read: bool) -> list[str]:
        """The head's best whole content word at each query's mask ("" when it has none)."""
        hidden = self.npm.mask_states(self.sequences(queries, read))[:, 0]
        scores = self.head.log_probs(hidden)
        scores[:, ~self.allowed[: scores.shape[1]]] = -np.inf
        if scores.shape[1] > len(self.allowed):  # a head wider than the tokenizer: the extra rows never answer
            scores[:, len(self.allowed) :] = -np.inf
        best = scores.argmax(axis=1)
        return [
            self.npm.tokenizer.decode([int(t)]).strip() if np.isfinite(row[t]) else ""
            for t, row in zip(best, scores, strict=True)
        ]
