"""Evidence-aware scoring of NPM's candidate phrases: what the passages around each one say.

NPM scores a candidate phrase by how similar its first and last tokens' vectors are to the
query's two mask vectors, summed over its positions. It never reads the words around a
position, and the sum favours frequent phrases: a small encoder tells "Ulm" from "Zürich", or
one year from another, by little more than frequency. Reading systems compare the evidence's
own words with the question's (DrQA's exact-match features, the sliding-window baselines of
cloze reading tasks); this module does that for every candidate position, vectorised.

Per position (a candidate's occurrence, ``spans`` row), against the query's tokens around its mask:

* ``left_share`` / ``right_share``: how much of the query's words before (after) the mask the
  passage repeats right before (after) the occurrence, in order: the IDF sum of the run of equal
  tokens next to both (at most :data:`RUN` tokens) over that of the query's side, plus
  :data:`SHARE_SMOOTHING` (a side of punctuation alone shares next to nothing). A sentence copied
  word for word shares all of its words; "Albert Einstein was born in [MASK]." shares all of its
  left side with "Albert Einstein was born in Ulm", a third with "Eduard, was born in Zürich";
* ``near`` / ``sentence`` / ``window``: the IDF-weighted share of the query's distinct content
  tokens found around the occurrence, each counted once: ``near`` at its closest position within
  :data:`WINDOW` tokens with weight ``exp(-(distance - 1) / NEAR)``, ``sentence`` anywhere in the
  occurrence's sentence (up to the nearest ".", "!" or "?" on either side, within the window),
  ``window`` anywhere within the window;
* ``start_sim`` / ``end_sim``: NPM's own similarities of its first and last token, divided by τ;
* ``cuts_number``: the occurrence stops inside a date or a number: its last token is a date or a
  number (:func:`npmcore.rarity.token_kinds`) and so is the token after it, or the one after a
  punctuation mark there ("December 21" of "December 21, 1968", "17" of "17 August 1945"; a year
  after its day and month, as LAMA asks for one, is not cut).

Per phrase: ``npm`` (the log of NPM's score, its positions' summed exp scores normalised over the
candidates), ``positions`` (the log of how many positions spell it), ``tokens`` (its length) and
``idf`` (the mean IDF of its tokens: answers are names, dates and numbers, rarer than the words
around them; NPM's sum over positions favours the frequent).

A phrase's score is ``w_phrase · phrase features + max over its positions of w_position ·
position features`` (:class:`Ranker`); its best position is its first evidence. The weights
are fitted on dev data (:func:`fit_ranker`) and ship as ``ranker.json`` beside the encoder.
"""

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from npmcore.answer.phrases import Corpus, Phrases
from npmcore.encoder import default_encoder_path, local_model_dir
from npmcore.rarity import OTHER, block_frequency

log = logging.getLogger(__name__)

RUN = 16  # longest context run compared, in tokens
SHARE_SMOOTHING = 1.0  # added to a query side's IDF sum: a side of punctuation alone shares next to nothing
WINDOW = 48  # tokens on each side of an occurrence searched for the query's words
NEAR = 3.0  # tokens: the decay of the near feature
PHRASE_FEATURES = ("npm", "positions", "tokens", "idf")
POSITION_FEATURES = (
    "left_share",
    "right_share",
    "near",
    "sentence",
    "window",
    "start_sim",
    "end_sim",
    "cuts_number",
)
FEATURE_NAMES = (*PHRASE_FEATURES, *POSITION_FEATURES)
RANKER_FILE = "ranker.json"


@dataclass(frozen=True)
class QueryContext:
    """A query's tokens around its mask."""

    left: np.ndarray  # (RUN,) token ids before the mask, nearest first, -1 past the query's start
    right: np.ndarray  # (RUN,) token ids after the mask, nearest first, -1 past its end
    words: np.ndarray  # (T,) its distinct content token ids (no special, stopword or punctuation token)


def query_context(ids: Sequence[int], mask_id: int, special: np.ndarray, stop: np.ndarray) -> QueryContext:
    """The context of a query's token ids (special tokens included) holding one or two adjacent masks.

    Args:
        special, stop: (V,) the special and the stopword or punctuation tables of :class:`~npmcore.vocab.VocabTables`.
    """
    ids = np.asarray(ids, dtype=np.int64)
    masks = np.flatnonzero(ids == mask_id)
    if len(masks) == 0:
        raise ValueError("the query holds no mask token")
    before, after = ids[: masks[0]], ids[masks[-1] + 1 :]
    before, after = before[~special[before]], after[~special[after]]
    words = np.concatenate([before, after])
    return QueryContext(_pad(before[::-1], RUN), _pad(after, RUN), np.unique(words[~stop[words]]))


def _pad(ids: np.ndarray, n: int) -> np.ndarray:
    out = np.full(n, -1, dtype=np.int64)
    out[: min(n, len(ids))] = ids[:n]
    return out


def idf_of(df: np.ndarray, blocks: int) -> np.ndarray:
    """(V,) smoothed inverse document frequency ``log((blocks + 1) / (df + 1))``, >= 0."""
    return np.log((blocks + 1) / (np.asarray(df, dtype=np.float64) + 1))


def token_frequency(folder: Path, corpus: Corpus, vocab_size: int) -> tuple[np.ndarray, int]:
    """(token_df (V,), blocks) of an index: its ``token_df.npy``, or counted now for an index built
    before evidence scoring (one vectorised pass over its tokens)."""
    blocks = len(corpus.offsets) - 1
    if (folder / "token_df.npy").exists():
        return np.load(folder / "token_df.npy"), blocks
    log.info("index %s has no token_df.npy (built by an earlier package): counting it now", folder)
    return block_frequency(corpus.tokens, corpus.offsets, vocab_size).df, blocks


def position_features(
    corpus: Corpus,
    spans: np.ndarray,
    context: QueryContext,
    idf: np.ndarray,
    sim_first: np.ndarray,
    sim_last: np.ndarray,
    tau: float,
    kinds: np.ndarray,
) -> np.ndarray:
    """(n, len(POSITION_FEATURES)) features of each candidate position (module docstring).

    Args:
        spans: (n, 2) candidate positions [first, last] (global token ids, inside one block each).
        idf: (V,) the corpus's token IDF (:func:`idf_of`).
        sim_first, sim_last: (n,) NPM's similarities of each position's first and last token.
        kinds: (V,) the tokenizer's token kinds (:func:`npmcore.rarity.token_kinds`).
    """
    n = len(spans)
    out = np.zeros((n, len(POSITION_FEATURES)))
    if n == 0:
        return out
    block = corpus.block_of(spans[:, 0])
    lo, hi = corpus.offsets[block], corpus.offsets[block + 1]
    steps = np.arange(1, WINDOW + 1)
    left_pos = spans[:, :1] - steps  # (n, WINDOW) nearest first
    right_pos = spans[:, 1:] + steps
    left = _tokens_at(corpus, left_pos, left_pos >= lo[:, None])
    right = _tokens_at(corpus, right_pos, right_pos < hi[:, None])
    out[:, 0] = _share(left[:, :RUN], context.left, idf)
    out[:, 1] = _share(right[:, :RUN], context.right, idf)
    end = corpus.tables.sentence_end
    # inside the sentence: before the first sentence end on the left; up to and with the first on the right
    left_in = np.cumsum(end[np.maximum(left, 0)] & (left >= 0), axis=1) == 0
    right_end = end[np.maximum(right, 0)] & (right >= 0)
    right_in = np.cumsum(right_end, axis=1) - right_end == 0
    out[:, 2:5] = _proximity(
        np.concatenate([left, right], axis=1),
        np.concatenate([steps, steps]),
        np.concatenate([left_in, right_in], axis=1),
        context,
        idf,
    )
    out[:, 5] = sim_first / tau
    out[:, 6] = sim_last / tau
    numeric = np.r_[kinds != OTHER, False]  # a token id, or -1 (outside the block): a date or a number
    punctuation = np.r_[corpus.tables.boundary, False]
    last = np.asarray(corpus.tokens[spans[:, 1]], dtype=np.int64)
    out[:, 7] = numeric[last] & (numeric[right[:, 0]] | (punctuation[right[:, 0]] & numeric[right[:, 1]]))
    return out


def _tokens_at(corpus: Corpus, pos: np.ndarray, inside: np.ndarray) -> np.ndarray:
    """Token ids at global positions, -1 where ``inside`` is False (outside the block)."""
    safe = np.clip(pos, 0, len(corpus.tokens) - 1)
    return np.where(inside, np.asarray(corpus.tokens[safe.ravel()]).reshape(pos.shape).astype(np.int64), -1)


def _share(seen: np.ndarray, wanted: np.ndarray, idf: np.ndarray) -> np.ndarray:
    """(n,) IDF sum of the leading tokens of each row of ``seen`` that equal ``wanted``'s, in order,
    over ``wanted``'s own (-1: past the query's end) plus :data:`SHARE_SMOOTHING`."""
    weight = np.where(wanted >= 0, idf[np.maximum(wanted, 0)], 0.0)
    run = np.logical_and.accumulate((seen == wanted[None, :]) & (wanted[None, :] >= 0), axis=1)
    return (run * weight[None, :]).sum(axis=1) / (weight.sum() + SHARE_SMOOTHING)


def _proximity(
    window: np.ndarray, distance: np.ndarray, sentence: np.ndarray, context: QueryContext, idf: np.ndarray
) -> np.ndarray:
    """(n, 3) IDF-weighted shares of the query's words seen in each window: near (by distance), in
    the sentence (``sentence``: (n, columns) bool), anywhere."""
    n = len(window)
    words = context.words
    weight = idf[words]
    total = weight.sum()
    if len(words) == 0 or total <= 0:
        return np.zeros((n, 3))
    out = np.zeros((n, 3))
    never = np.iinfo(np.int64).max
    for word, w in zip(words.tolist(), weight.tolist()):  # a few words: one pass over the windows each
        hit = window == word  # (n, columns)
        nearest = np.where(hit, distance, never).min(axis=1)
        seen = nearest < never
        out[:, 0] += w * np.where(seen, np.exp(-(nearest - 1) / NEAR), 0.0)
        out[:, 1] += w * (hit & sentence).any(axis=1)
        out[:, 2] += w * seen
    return out / total


def phrase_features(phrases: Phrases, idf: np.ndarray) -> np.ndarray:
    """(m, len(PHRASE_FEATURES)) features of each candidate phrase of NPM's scoring (module docstring)."""
    m = len(phrases.scores)
    positions = np.bincount(phrases.phrase_of_span, minlength=m)
    inside = phrases.token_ids >= 0
    tokens = inside.sum(axis=1)
    mean_idf = np.where(inside, idf[np.maximum(phrases.token_ids, 0)], 0.0).sum(axis=1) / np.maximum(tokens, 1)
    npm = np.log(np.maximum(phrases.scores, 1e-300))
    return np.stack([npm, np.log(np.maximum(positions, 1)), tokens.astype(np.float64), mean_idf], axis=1)


@dataclass(frozen=True)
class Ranker:
    """Weights of the phrase and position features (:data:`PHRASE_FEATURES`, :data:`POSITION_FEATURES`)."""

    phrase: np.ndarray  # (len(PHRASE_FEATURES),)
    position: np.ndarray  # (len(POSITION_FEATURES),)
    provenance: dict  # what it was fitted on, and how well it did there

    def __post_init__(self) -> None:
        if self.phrase.shape != (len(PHRASE_FEATURES),) or self.position.shape != (len(POSITION_FEATURES),):
            raise ValueError(
                f"a ranker needs {len(PHRASE_FEATURES)} phrase and {len(POSITION_FEATURES)} position weights, "
                f"got {self.phrase.shape} and {self.position.shape}"
            )

    def to_json(self) -> str:
        return json.dumps(
            {
                "phrase": dict(zip(PHRASE_FEATURES, self.phrase.tolist(), strict=True)),
                "position": dict(zip(POSITION_FEATURES, self.position.tolist(), strict=True)),
                "provenance": self.provenance,
            },
            indent=2,
        )

    @classmethod
    def from_json(cls, text: str, source: str = "ranker") -> "Ranker":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"{source}: not a ranker, not JSON ({e})") from e
        try:
            phrase = np.array([data["phrase"][f] for f in PHRASE_FEATURES], dtype=np.float64)
            position = np.array([data["position"][f] for f in POSITION_FEATURES], dtype=np.float64)
        except (KeyError, TypeError) as e:
            raise ValueError(
                f"{source}: not a ranker of features {PHRASE_FEATURES} and {POSITION_FEATURES} (missing {e})"
            ) from e
        return cls(phrase, position, data.get("provenance", {}))

    @classmethod
    def load(cls, path: str | Path) -> "Ranker":
        return cls.from_json(Path(path).read_text(encoding="utf-8"), str(path))


def ranker_of(encoder: str) -> Ranker:
    """The evidence-scoring weights of an encoder: its folder's ``ranker.json``, else the shipped
    encoder's (the evidence features mean the same for any encoder; fit one with ``bench/ranker.py``)."""
    own = Path(local_model_dir(encoder)) / RANKER_FILE
    if own.exists():
        return Ranker.load(own)
    shipped = Path(default_encoder_path()) / RANKER_FILE
    log.info("encoder %s has no %s: evidence scoring uses the shipped encoder's (%s)", encoder, RANKER_FILE, shipped)
    return Ranker.load(shipped)


@dataclass(frozen=True)
class Candidates:
    """One query's candidates as NPM scores them, with the evidence features of the phrases and their positions."""

    phrases: Phrases  # NPM's scoring (npmcore.answer.phrases.score_phrases)
    features: np.ndarray  # (m, len(PHRASE_FEATURES)) of phrases' rows (phrase_features)
    positions: np.ndarray  # (n, len(POSITION_FEATURES)) of phrases.spans (position_features)


def rank_phrases(candidates: Candidates, ranker: Ranker) -> Phrases:
    """The candidates ranked by ``ranker``: phrases best first with scores softmax-normalised, each
    position's share (``span_scores``) the softmax of its own score (its phrase's features and its
    own), and ``parts`` (m, len(FEATURE_NAMES)) each phrase's score parts: its features times their
    weights, then its best position's (they sum to its score)."""
    phrases, positions = candidates.phrases, candidates.positions
    m = len(phrases.scores)
    if m == 0:
        return replace(phrases, parts=np.empty((0, len(FEATURE_NAMES))))
    phrase_part = candidates.features * ranker.phrase  # (m, P)
    position_part = positions * ranker.position  # (n, Q)
    own = position_part.sum(axis=1)
    best = _argmax_by_group(own, phrases.phrase_of_span, m)  # (m,) each phrase's best position
    score = phrase_part.sum(axis=1) + own[best]
    order = np.argsort(-score, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(m)
    span_score = phrase_part.sum(axis=1)[phrases.phrase_of_span] + own
    return Phrases(
        phrases.token_ids[order],
        _softmax(score[order]),
        phrases.spans,
        _softmax(span_score),
        rank[phrases.phrase_of_span],
        np.concatenate([phrase_part, position_part[best]], axis=1)[order],
    )


def _argmax_by_group(values: np.ndarray, group: np.ndarray, groups: int) -> np.ndarray:
    """(groups,) the index of the largest value of each group (every group non-empty; ties: the first)."""
    order = np.lexsort((np.arange(len(values)), -values, group))  # by group, then value descending
    first = np.r_[True, group[order][1:] != group[order][:-1]]
    out = np.empty(groups, dtype=np.int64)
    out[group[order][first]] = order[first]
    return out


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


@dataclass(frozen=True)
class Labelled:
    """A query's candidates and which of its phrases are right answers: what :func:`fit_ranker` learns from."""

    candidates: Candidates
    gold: np.ndarray  # (m,) bool over candidates.phrases' rows
    weight: float = 1.0  # its share of the loss (e.g. 1 / the size of its dev set: every set counts the same)

    def right_first(self, ranker: Ranker | None) -> bool:
        """Whether the first candidate is right, ranked by ``ranker`` (None: NPM's own order)."""
        phrases = self.candidates.phrases
        if len(phrases.scores) == 0:
            return False
        if ranker is None:
            return bool(self.gold[0])
        best = rank_phrases(self.candidates, ranker).token_ids[0]
        return bool(self.gold[(phrases.token_ids == best).all(axis=1)].any())


def fit_ranker(
    examples: Sequence[Labelled], l2: float = 1e-3, steps: int = 400, provenance: dict | None = None
) -> Ranker:
    """Weights that maximise the (example-weighted) likelihood of the right phrases under a softmax
    over each query's candidates (listwise; a phrase's score as :func:`rank_phrases` computes it),
    with an L2 penalty.
    Starts from NPM's own ranking (weight 1 on ``npm``, 0 elsewhere); examples without a right
    candidate teach nothing and are left out. Deterministic (full-batch Adam on float64)."""
    import torch

    used = [e for e in examples if e.gold.any()]
    if not used:
        raise ValueError("no example has a right answer among its candidates: nothing to fit")
    phrase_x, position_x, phrase_of, query_of, gold = [], [], [], [], []
    first = 0
    for q, e in enumerate(used):
        p = e.candidates.phrases
        phrase_x.append(e.candidates.features)
        position_x.append(e.candidates.positions)
        phrase_of.append(p.phrase_of_span + first)
        query_of.append(np.full(len(p.scores), q))
        gold.append(e.gold)
        first += len(p.scores)
    px = torch.from_numpy(np.concatenate(phrase_x))
    ox = torch.from_numpy(np.concatenate(position_x))
    owner = torch.from_numpy(np.concatenate(phrase_of))
    query = torch.from_numpy(np.concatenate(query_of))
    right = torch.from_numpy(np.concatenate(gold))
    weight = torch.tensor([e.weight for e in used], dtype=torch.float64)
    weight = weight / weight.sum()
    wp = torch.zeros(len(PHRASE_FEATURES), dtype=torch.float64)
    wp[PHRASE_FEATURES.index("npm")] = 1.0
    wp.requires_grad_(True)
    wo = torch.zeros(len(POSITION_FEATURES), dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.Adam([wp, wo], lr=0.05)
    queries = len(used)

    def loss_of() -> torch.Tensor:
        own = ox @ wo
        best = torch.full((first,), -torch.inf, dtype=torch.float64).scatter_reduce(0, owner, own, "amax")
        score = px @ wp + best
        top = torch.full((queries,), -torch.inf, dtype=torch.float64).scatter_reduce(0, query, score, "amax").detach()
        e = torch.exp(score - top[query])
        total = torch.zeros(queries, dtype=torch.float64).index_add(0, query, e)
        good = torch.zeros(queries, dtype=torch.float64).index_add(0, query, e * right)
        nll = -(torch.log(good) - torch.log(total))
        return (weight * nll).sum() + l2 * (wp.square().sum() + wo.square().sum())

    for _ in range(steps):
        optimizer.zero_grad()
        loss = loss_of()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        final = float(loss_of())
    record = {**(provenance or {}), "queries": queries, "loss": round(final, 4), "l2": l2, "steps": steps}
    return Ranker(wp.detach().numpy().copy(), wo.detach().numpy().copy(), record)
