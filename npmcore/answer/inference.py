"""NPM inference over an index snapshot: the index and encoder opened (``NPM``), phrase prediction.

A query holds exactly one ``[MASK]`` (whatever the encoder's own mask token is). For
NPM it becomes two mask tokens ``[MASKs][MASKe]`` whose output vectors are q_start and
q_end; for NPM single one mask token and one vector q. Similarity is the scaled inner
product ``q·E(c) / sqrt(d)``. What is searched, kNN or the top BM25 passages, is
:class:`~npmcore.answer.retrieval.Retrieval`'s (``NPM.retrieval``); this module scores it.

* :meth:`NPM.predict` (open-set, NPM): top-k tokens for q_start and for q_end from the
  FAISS index (its shortlist of k x rerank re-scored with the datastore's exact vectors),
  candidate spans around them (:mod:`npmcore.answer.phrases`), each candidate's first and last
  token scored with the datastore's vectors (decoded from the index's codes when the
  datastore is gone), phrases ranked by summed exp scores (``scoring="npm"``, the paper's) or,
  by default, by evidence scoring (:mod:`npmcore.answer.ranking`: those scores together with what each
  candidate's passage says around it, weighted by the encoder's ``ranker.json``); all of them,
  ranked: :meth:`NPM.phrases`; with their features: :meth:`NPM.candidates`; a query's phrases as answers
  with their evidence and confidence: :meth:`NPM.answers_from`.
  With ``restrict`` the search space is instead every token of the top BM25 passages,
  scored exactly (the paper's open-set setting) with their vectors read from the index's
  datastore (encoded again only for another encoder or when the datastore is gone).
* NPM single and closed-set labels (one query vector, :meth:`NPM.encode_queries` with one mask) are scored
  token by token in :mod:`npmcore.answer.tokens`.

Answers carry :class:`~npmcore.answer.evidence.Evidence` (global token ids); ``NPM.evidence``
(an :class:`~npmcore.answer.evidence.EvidenceReader`) reads the passages behind them. What a person typed is
answered by :mod:`npmcore.answer.answering`.
"""

import functools
import logging
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import numpy as np

from npmcore.answer.confidence import Calibrator, calibrator_of, confidence_features
from npmcore.answer.evidence import Evidence, EvidenceReader, EvidenceSpan
from npmcore.answer.kinds import JUDGED, kind_of, preferred
from npmcore.answer.phrases import (
    Corpus,
    Phrases,
    candidate_spans,
    content_spans,
    repeating_spans,
    score_phrases,
)
from npmcore.answer.pooling import POOLED_FROM, Pooled, head, names_more, pool
from npmcore.answer.ranking import (
    FEATURE_NAMES,
    Candidates,
    Ranker,
    idf_of,
    phrase_features,
    position_features,
    query_context,
    rank_phrases,
    ranker_of,
    token_frequency,
)
from npmcore.answer.retrieval import Retrieval, foreign_encoder
from npmcore.encoder import cached_encoder, default_encoder_path, encode, encoder_fingerprint, fast_forward
from npmcore.index.articles import ARTICLES, Articles, write_articles
from npmcore.index.precision import Setting, resolve_precision
from npmcore.mask import MASK
from npmcore.model.query_encoder import check_index, check_passage_weights, passage_side, passage_source
from npmcore.rarity import token_kinds
from npmcore.snapshots import open_corpus, open_index
from npmcore.storage import cache_dir, local_folder
from npmcore.vocab import content_words_of, spelled, vocab_tables

log = logging.getLogger(__name__)

# npm: the paper's (summed exp similarities of each phrase's positions); evidence: NPM's candidates
# ranked by what their passages say around them as well (npmcore.answer.ranking)
Scoring = Literal["npm", "evidence"]
SCORINGS: tuple[Scoring, ...] = ("evidence", "npm")
KEPT_FROM = 50  # the phrases a query's answers are looked for among: of its kind, none across a line break


class QueryError(ValueError):
    """A query cannot be answered as written (no or several masks, too long)."""


@dataclass(frozen=True)
class InferenceConfig:
    k: int = 4096  # tokens retrieved per query vector (paper: 4096)
    l_max: int = 10  # longest phrase in tokens (paper: 10; 20 for scripts split into many pieces)
    tau: float = 1.0  # temperature of exp(sim / tau); paper: 5 for closed-set tasks
    restrict: bool = True  # open-set: search only the top BM25 passages, scored exactly (paper)
    passages: int = 3  # BM25 passages searched when restricted (paper: 3)
    search_params: str | None = None  # FAISS search parameters ("nprobe=64"); None = the index's default
    # kNN search: the index's top k x rerank re-scored with the datastore's exact vectors (1: the index's own
    # scores); None = the index's default. Without a readable datastore the index's scores are used.
    rerank: int | None = None
    content_words: bool = True  # open-set answers start and end with a content word, no stopword or punctuation (paper)
    # NPM phrases: no answer holds a content word of the query (its subject's name, say); NPM single ignores it.
    # On the dev data it wins or ties for every encoder measured (npmcore/checkpoints/npm-minilm-l6/README.md).
    exclude_query_words: bool = True
    answers: int = 5  # answers returned per query
    evidence: int = 3  # evidence passages per answer
    scoring: Scoring = "evidence"  # how NPM phrases are ranked (NPM single and closed-set tasks: always NPM's)


@dataclass(frozen=True)
class Answer:
    text: str  # as its best evidence passage writes it
    token_ids: tuple[int, ...]
    score: float  # normalised: the answers of all candidates of a query sum to 1
    evidence: tuple[Evidence, ...]  # best first
    parts: dict[str, float] | None = None  # evidence scoring: the score's parts (npmcore.answer.ranking.FEATURE_NAMES)
    # evidence scoring with the encoder's calibrator: the probability that it is right (npmcore.answer.confidence)
    confidence: float | None = None
    rank: int = 0  # its rank among the query's candidates, pooled (0: the best; NPM.answers_from may pass some over)
    forms: tuple[
        str, ...
    ] = ()  # the other forms of the name it is (npmcore.answer.pooling), as the passages write them


class NPM:
    """An index snapshot opened for queries, with its encoder. Queries (and passages encoded again) are
    encoded in ``precision`` (:mod:`npmcore.index.precision`; ``auto``: this machine's), logged once.

    Args:
        index_url: an index snapshot (local or remote; remote ones are copied to ``cache``).
        encoder: encoder path or name; None = the one the index was built with. Another
            encoder needs the corpus's tokenizer, and answers only BM25-restricted queries
            (their passages are encoded again): the index's vectors are not its own, so kNN
            search (``restrict=False``, closed-set ``classify``) is refused. A query encoder
            (:mod:`npmcore.model.query_encoder`) encodes the queries, and its passage encoder the passages:
            an index whose vectors another encoder made is refused.
        cache: local folder for copies of remote snapshots (default: :func:`npmcore.storage.cache_dir`).
        ranker: the weights of evidence scoring; None = the encoder's ``ranker.json``, else the shipped
            encoder's (:func:`npmcore.answer.ranking.ranker_of`), read when evidence scoring first needs them.
        precision: of the query encoder's products: ``auto``, ``f32`` or ``bf16`` (a GPU, or a CPU with bf16 units).
    """

    def __init__(
        self,
        index_url: str,
        encoder: str | None = None,
        cache: Path | None = None,
        ranker: Ranker | None = None,
        precision: Setting = "auto",
    ):
        self.index_snapshot = open_index(index_url, verify=True)
        self.manifest = self.index_snapshot.manifest
        self.url = index_url
        local = local_folder(index_url, cache)
        self._local, self._cache = local, cache
        # the encoder's location: as given, else the index's, else the shipped default
        self.encoder_source = str(encoder or self.index_snapshot.encoder or default_encoder_path())
        self.tokenizer, self.model = cached_encoder(self.encoder_source)
        self.fingerprint = encoder_fingerprint(self.model)
        # passages (the index's vectors, or those encoded per query) come from the passage encoder: a query
        # encoder's own (npmcore.model.query_encoder), else the encoder itself
        self.passage_side = passage_side(self.encoder_source)
        self.passage_model, self.passage_fingerprint = self.model, self.fingerprint
        if self.passage_side is not None:
            _, self.passage_model = cached_encoder(passage_source(self.passage_side))
            self.passage_fingerprint = encoder_fingerprint(self.passage_model)
            check_passage_weights(self.encoder_source, self.passage_side, self.passage_fingerprint)
            check_index(self.encoder_source, self.passage_side, index_url, self.index_snapshot.encoder_fingerprint)
        self.precision = resolve_precision(precision, self.model, self.tokenizer)
        log.info("queries are encoded in %s (the index's vectors: %s)", self.precision, self.index_snapshot.precision)
        # why kNN search (restrict=False, closed-set labels) is refused (None: it works); another tokenizer raises
        knn_refused = foreign_encoder(self.index_snapshot, encoder, self.tokenizer, self.passage_model)
        self.corpus = Corpus(
            tokens=np.load(local / "tokens.npy", mmap_mode="r"),
            offsets=np.load(local / "offsets.npy"),
            tables=vocab_tables(self.tokenizer),
        )
        self.idf = idf_of(*token_frequency(local, self.corpus, len(self.tokenizer)))
        self._ranker = ranker
        self._kinds = token_kinds(self.tokenizer)
        self.evidence = EvidenceReader(self.index_snapshot, self.tokenizer, self.corpus)
        self.retrieval = Retrieval(
            self.index_snapshot,
            local,
            self.corpus,
            self.evidence,
            self.tokenizer,
            self.passage_model,
            self.passage_fingerprint,
            self.precision,
            knn_refused,
        )
        self.dim = int(self.manifest.config["dim"])
        self.scale = 1.0 / math.sqrt(self.dim)
        self._word_words = functools.lru_cache(maxsize=1 << 16)(
            lambda ids: content_words_of(self.tokenizer.decode(list(ids), skip_special_tokens=True))
        )
        self._key = functools.lru_cache(maxsize=1 << 16)(lambda ids: spelled(head(self.tokenizer.decode(list(ids)))))

    @functools.cached_property
    def ranker(self) -> Ranker:
        """The weights of evidence scoring (the one given, else :func:`ranker_of` the encoder)."""
        return self._ranker or ranker_of(self.encoder_source)

    @functools.cached_property
    def articles(self) -> Articles:
        """The index's table of its corpus's article openings, by their titles: what says of what kind a candidate is
        (:mod:`npmcore.index.articles`). An index built before it held one gets one in the local cache, written once
        from its corpus."""
        if (own := self._local / ARTICLES).is_file():
            return Articles(own)
        corpus = open_corpus(self.index_snapshot.corpus).manifest.id
        cached = (self._cache or cache_dir()) / "articles" / f"{corpus}.sqlite"
        if not cached.is_file():
            log.warning("index %s holds no table of article openings: writing one to %s", self.url, cached)
            cached.parent.mkdir(parents=True, exist_ok=True)
            write_articles(self.index_snapshot.corpus, cached)
        return Articles(cached)

    @functools.cached_property
    def calibrator(self) -> Calibrator | None:
        """The confidence of evidence scoring's answers (:func:`calibrator_of` the encoder and ranker); None: none."""
        return calibrator_of(self.encoder_source, self.fingerprint, self.ranker)

    # --- queries ------------------------------------------------------------------------

    def encode_queries(self, queries: list[str], masks: int) -> np.ndarray:
        """(len(queries), masks, d) output vectors at the mask tokens of each query."""
        return self.mask_states([self.query_ids(q, masks) for q in queries])

    def mask_states(self, sequences: list[list[int]]) -> np.ndarray:
        """(len(sequences), masks, d) output vectors at the mask tokens of token-id sequences."""
        hidden = encode(self.model, self.tokenizer, sequences, forward=fast_forward(self.model, self.precision))
        mask_id = self.tokenizer.mask_token_id
        return np.stack([h[np.flatnonzero(np.asarray(s) == mask_id)] for h, s in zip(hidden, sequences, strict=True)])

    def query_ids(self, query: str, masks: int) -> list[int]:
        """The token ids of a query (special tokens included), its ``[MASK]`` as ``masks`` mask tokens."""
        own = self.tokenizer.mask_token
        if own != MASK and own in query:
            raise QueryError(f"write the mask as {MASK}, not {own!r}: {query!r}")
        count = query.count(MASK)
        if count != 1:
            raise QueryError(f"a query needs exactly one {MASK}, found {count} in {query!r}")
        ids = self.tokenizer(query.replace(MASK, own * masks))["input_ids"]
        limit = self.tokenizer.model_max_length
        if len(ids) > limit:
            raise QueryError(
                f"query of {len(ids)} tokens is longer than the encoder's limit of {limit}: {query[:80]!r}…"
            )
        return ids

    # --- open set -----------------------------------------------------------------------

    def predict(self, queries: list[str], config: InferenceConfig = InferenceConfig()) -> list[list[Answer]]:
        """NPM phrase prediction: the top ``config.answers`` answers of each query."""
        return [self.answers_from(q, phrases, config) for q, phrases in zip(queries, self.phrases(queries, config))]

    def phrases(
        self, queries: list[str], config: InferenceConfig = InferenceConfig(), blocks: list[list[int]] | None = None
    ) -> Iterator[Phrases]:
        """Every candidate phrase of each query, scored (``config.scoring``) and ranked best first,
        yielded query by query (one query's candidates in memory at a time): what :meth:`predict`
        answers from (its top ``config.answers`` are :meth:`answers_from`). ``blocks``: the passages each query is
        read in, instead of its own top BM25 passages (restricted search)."""
        if config.scoring not in SCORINGS:
            raise ValueError(f"scoring must be one of {', '.join(SCORINGS)}, got {config.scoring!r}")
        evidence = config.scoring == "evidence"
        for candidates in self.candidates(queries, config, features=evidence, blocks=blocks):
            yield rank_phrases(candidates, self.ranker) if evidence else candidates.phrases

    def candidates(
        self,
        queries: list[str],
        config: InferenceConfig = InferenceConfig(),
        features: bool = True,
        blocks: list[list[int]] | None = None,
    ) -> Iterator[Candidates]:
        """Each query's candidates as NPM scores them, with (``features``) the evidence features of every position:
        what evidence scoring ranks (and :func:`npmcore.answer.ranking.fit_ranker` learns from). Restricted search
        reads each query's top BM25 passages, or the ``blocks`` given for it."""
        sequences = [self.query_ids(q, 2) for q in queries]
        q = self.mask_states(sequences) * self.scale  # (B, 2, d): sims are q·E(c)
        if config.restrict:
            restricted = self.retrieval.restricted(queries, config.passages, blocks)
            for query, ids, (q_start, q_end), (tokens, vectors) in zip(queries, sequences, q, restricted, strict=True):
                # tokens are whole passages: the spans starting at one of them are all those ending at one
                spans = self._candidate_spans(query, tokens, tokens[:0], config)
                row = np.searchsorted(tokens, spans)  # (n, 2) rows of each span's first and last token; sorted ids
                first, last = vectors[row[:, 0]] @ q_start, vectors[row[:, 1]] @ q_end
                yield self._scored_spans(ids, spans, first, last, config, features)
            return
        _, found = self.retrieval.search(q.reshape(-1, q.shape[-1]), config.k, config.rerank, config.search_params)
        hits = found.reshape(len(queries), 2, -1)  # (B, 2, k)
        for query, ids, (q_start, q_end), (starts, ends) in zip(queries, sequences, q, hits, strict=True):
            spans = self._candidate_spans(query, starts, ends, config)
            first = self.retrieval.token_vectors(spans[:, 0]) @ q_start if len(spans) else np.empty(0)
            last = self.retrieval.token_vectors(spans[:, 1]) @ q_end if len(spans) else np.empty(0)
            yield self._scored_spans(ids, spans, first, last, config, features)

    def _candidate_spans(self, query: str, starts: np.ndarray, ends: np.ndarray, config: InferenceConfig) -> np.ndarray:
        """(n, 2) candidate spans around retrieved start and end tokens, of whole words, none repeating the query's."""
        spans = candidate_spans(self.corpus, starts, ends, config.l_max)
        if config.content_words:
            spans = content_spans(self.corpus, spans)
        if config.exclude_query_words:
            words = content_words_of(query.replace(MASK, " "))
            spans = spans[~repeating_spans(self.corpus, spans, words, self._word_words)]
        return spans[self.evidence.whole_words(spans)]  # never a piece of a word as the passage writes it

    def _scored_spans(
        self,
        ids: list[int],
        spans: np.ndarray,
        first: np.ndarray,
        last: np.ndarray,
        config: InferenceConfig,
        features: bool,
    ) -> Candidates:
        """One query's candidates: its spans' phrases scored from their first and last tokens' similarities, with
        (``features``) their evidence features."""
        phrases = score_phrases(self.corpus, spans, first, last, config.tau, config.l_max)
        if not features:
            return Candidates(phrases, np.empty((len(phrases.scores), 0)), np.empty((len(spans), 0)))
        tables = self.corpus.tables
        context = query_context(ids, self.tokenizer.mask_token_id, tables.special, tables.stop)
        return Candidates(
            phrases,
            phrase_features(phrases, self.idf),
            position_features(self.corpus, spans, context, self.idf, first, last, config.tau, self._kinds),
        )

    # --- answers -----------------------------------------------------------------------

    def pooled(self, phrases: Phrases, kind: str | None = None) -> Pooled:
        """A query's phrases ranked by evidence scoring (:meth:`phrases`), the forms of one name pooled into one
        answer each (:mod:`npmcore.answer.pooling`) and, with ``kind`` (a person, a place, a noun), the answers of
        that kind by their articles in the datastore preferred (:mod:`npmcore.answer.kinds`)."""
        head = min(POOLED_FROM, len(phrases.scores))
        keys = [self._key(tuple(int(t) for t in row[row >= 0])) for row in phrases.token_ids[:head]]
        pooled = pool(phrases, keys, functools.partial(self._names_more, phrases))
        if kind is None:
            return pooled
        judged = min(JUDGED, len(pooled.phrases.scores))
        texts = [self.evidence.surface(self._evidence_of(pooled.phrases, r, 1)[0]) for r in range(judged)]
        return preferred(pooled, np.array([kind_of(self.articles, text, kind) for text in texts], dtype=np.int64))

    def answers_from(
        self,
        query: str,
        phrases: Phrases | Pooled,
        config: InferenceConfig = InferenceConfig(),
        keep: Callable[[str], bool] | None = None,
    ) -> list[Answer]:
        """The best ``config.answers`` phrases of a query (:meth:`phrases`; under evidence scoring :meth:`pooled`,
        the forms of one name one answer shown in one form, the others listed in ``Answer.forms``) as answers, each
        with its best ``config.evidence`` positions as evidence, its text as the best passage writes it and (evidence
        scoring, with the encoder's calibrator) its confidence; with ``keep``, only answers whose text it keeps
        (among the first :data:`KEPT_FROM` phrases, as those that run across a line break are passed over: a phrase
        that ends one paragraph and starts the next is no answer)."""
        pooled = self.pooled(phrases) if isinstance(phrases, Phrases) and phrases.parts is not None else phrases
        if isinstance(pooled, Pooled):
            phrases, kinds = pooled.phrases, pooled.kinds
        else:
            kinds = None
        answers = []
        ranks = min(len(phrases.scores), KEPT_FROM)
        for rank in range(ranks):
            if len(answers) == config.answers:
                break
            ids = phrases.token_ids[rank]
            ids = tuple(int(t) for t in ids[ids >= 0])
            evidence = self._evidence_of(phrases, rank, config.evidence)
            parts = (
                None if phrases.parts is None else dict(zip(FEATURE_NAMES, phrases.parts[rank].tolist(), strict=True))
            )
            text = head(self.evidence.surface(evidence[0]))
            forms = self._forms(pooled.source, pooled.members[rank][1:], text) if isinstance(pooled, Pooled) else ()
            if "\n" not in text and (keep is None or keep(text)):
                answers.append(Answer(text, ids, float(phrases.scores[rank]), evidence, parts, None, rank, forms))
        if answers and phrases.parts is not None and self.calibrator is not None:
            # each phrase's features are its own: only the answers kept are rated
            rows = confidence_features(phrases, query, answers[-1].rank + 1, kinds)[[a.rank for a in answers]]
            sure = self.calibrator.confidence(rows)
            answers = [replace(a, confidence=float(c)) for a, c in zip(answers, sure, strict=True)]
        return answers

    def _evidence_of(self, phrases: Phrases, rank: int, n: int) -> tuple[Evidence, ...]:
        """The best ``n`` positions of the phrase of ``rank``, best first."""
        mine = np.flatnonzero(phrases.phrase_of_span == rank)
        best = mine[np.argsort(-phrases.span_scores[mine], kind="stable")[:n]]
        return tuple(
            Evidence(
                int(self.corpus.block_of(phrases.spans[i : i + 1, 0])[0]),
                int(phrases.spans[i, 0]),
                int(phrases.spans[i, 1]),
                float(phrases.span_scores[i]),
            )
            for i in best
        )

    def _names_more(self, phrases: Phrases, long: int, short: int, shared: list[tuple[int, int]]) -> bool:
        """Whether, at one of the positions where the phrase of rank ``long`` ends with that of rank ``short`` (rows
        of each one's positions), the words it adds name more of it, as the passage writes them
        (:func:`npmcore.answer.pooling.names_more`)."""
        rows_long = np.flatnonzero(phrases.phrase_of_span == long)
        rows_short = np.flatnonzero(phrases.phrase_of_span == short)
        for row_long, row_short in shared:
            whole = self._span_at(phrases.spans[rows_long[row_long]])
            held = self._span_at(phrases.spans[rows_short[row_short]])
            if names_more(
                whole.text[: whole.start], whole.text[whole.start : held.start], held.text[held.start : held.end]
            ):
                return True
        return False

    def _span_at(self, span: np.ndarray) -> EvidenceSpan:
        block = int(self.corpus.block_of(span[:1])[0])
        return self.evidence.span(Evidence(block, int(span[0]), int(span[1]), 0.0))

    def _forms(self, phrases: Phrases, ranks: tuple[int, ...], shown: str) -> tuple[str, ...]:
        """The texts of the phrases of ``ranks`` (other forms of an answer shown as ``shown``), as their best
        passages write them, each once."""
        out: list[str] = []
        for rank in ranks:
            text = head(self.evidence.surface(self._evidence_of(phrases, rank, 1)[0]))
            if text != shown and text not in out:
                out.append(text)
        return tuple(out)

    def close(self) -> None:
        """Lets go of what the index holds open (its BM25 searcher, its table of articles)."""
        self.retrieval.close()
        if "articles" in self.__dict__:
            self.articles.close()
