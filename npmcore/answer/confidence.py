"""Confidence: each answer's probability of being right, and when to say "not in this corpus".

Evidence scoring (:mod:`npmcore.answer.ranking`) ranks a query's candidates; its softmax score says how
an answer compares with the other candidates, not how often such an answer is right (a query whose
passages never say the fact still has a best candidate, often with a large share). A
:class:`Calibrator` turns what the ranking computed into a probability: scikit-learn's
histogram gradient boosting, fitted by ``bench/confidence.py`` on the dev sets' answers (log loss,
a proper scoring rule: its probabilities are calibrated on data like its fit's), of each answer's

* ``score`` and ``log_score``: its share of the ranking's softmax;
* ``gap_to_best`` and ``margin_to_next``: its log score below the first answer's, above the next one's;
* ``rank`` (log of 1 + rank) and ``candidates`` (log of how many phrases were scored);
* its score's parts (:data:`npmcore.answer.ranking.FEATURE_NAMES`, each a weight times a feature): how
  much of the query's words the evidence repeats, NPM's similarities, how many positions spell it;
* the query's shape: ``query_words`` (how many words), ``mask_at_end`` and ``mask_position`` (where its mask is, as
  a share of its length);
* ``kind``: whether its article in the datastore says it is of the kind the query asks for (+1), of another (-1),
  or nothing is known or asked (0) (:mod:`npmcore.answer.kinds`).

Whether it is a question is not among them: on the benchmarks' dev sets a question meant NQ or KAMEL, where few
answers are right, and a calibrator that knew it rated every question a person asks as one (ECE 0.14-0.30 on
questions people type); a question is asked as statements anyway (:mod:`npmcore.ask.asking`). An answer is one
name's pooled forms (:mod:`npmcore.answer.pooling`): its score is theirs together.

On the dev sets (5-fold cross-validated) boosting beat a logistic regression of the same features,
and one followed by isotonic regression, on the calibration error of 5 of 8 sets and on every set's
accuracy of its most confident quarter (docs/evaluate.md).

It ships as ``confidence.npz`` (the trees' node arrays, :mod:`npmcore.answer.trees`, and a JSON of what it
is: numbers and text, no pickle; answering needs neither scikit-learn nor its serialisation, seconds of a
command's start) beside the encoder and its ``ranker.json``; it names the ranker
and the encoder it was fitted with (checksum, fingerprint) and is used with those only: a new
encoder or a refitted ranker needs a refitted calibrator (``bench/confidence.py``).
``min_confidence``, chosen on the same dev sets, is the confidence below which the service
abstains: the threshold that maximises right minus wrong first answers given (an answer more
often wrong than right is not given).
"""

import hashlib
import json
import logging
import os
import re
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from npmcore.answer.phrases import Phrases
from npmcore.answer.ranking import FEATURE_NAMES, Ranker
from npmcore.answer.trees import TreeEnsemble
from npmcore.encoder import default_encoder_path, local_model_dir
from npmcore.mask import MASK

log = logging.getLogger(__name__)

CONFIDENCE_FILE = "confidence.npz"
CONFIDENCE_FEATURES = (
    "score",
    "log_score",
    "gap_to_best",
    "margin_to_next",
    "rank",
    "candidates",
    *(f"part.{name}" for name in FEATURE_NAMES),
    "query_words",
    "mask_at_end",
    "mask_position",
    "kind",
)
# the boosting's settings, chosen by 5-fold cross-validation on the dev sets (docs/evaluate.md)
BOOSTING = {
    "max_iter": 200,
    "learning_rate": 0.05,
    "max_leaf_nodes": 15,
    "min_samples_leaf": 40,
    "l2_regularization": 1.0,
}


def query_features(query: str) -> np.ndarray:
    """(3,) the query's shape: its words, whether its mask ends it (punctuation aside) and where its mask is (a share
    of its length)."""
    at = query.find(MASK)
    after = query[at + len(MASK) :] if at >= 0 else ""
    return np.array(
        [
            len(re.findall(r"\w+", query.replace(MASK, " "))),
            not re.search(r"\w", after),
            max(at, 0) / max(len(query), 1),
        ],
        dtype=np.float64,
    )


def confidence_features(phrases: Phrases, query: str, answers: int, kinds: np.ndarray | None = None) -> np.ndarray:
    """(min(answers, m), len(CONFIDENCE_FEATURES)) features of a query's best ``answers`` phrases,
    ranked by evidence scoring (``phrases.parts`` set: :func:`npmcore.answer.ranking.rank_phrases`; pooled,
    :func:`npmcore.answer.pooling.pool`), with each one's kind as its article says it (``kinds``: +1 of the kind asked,
    -1 of another, 0 unknown or none asked: :mod:`npmcore.answer.kinds`; None: none asked).

    Raises:
        ValueError: ``phrases`` were ranked by NPM's own scoring (no parts).
    """
    if phrases.parts is None:
        raise ValueError("confidence needs phrases ranked by evidence scoring (their score's parts)")
    m = len(phrases.scores)
    top = min(answers, m)
    log_score = np.log(np.maximum(phrases.scores, 1e-300))
    following = np.r_[log_score[1:], log_score[-1:] - 10.0] if m else log_score  # the last: 10 nats above nothing
    parts = len(FEATURE_NAMES)
    out = np.empty((top, len(CONFIDENCE_FEATURES)))
    out[:, 0] = phrases.scores[:top]
    out[:, 1] = log_score[:top]
    out[:, 2] = log_score[:1] - log_score[:top] if m else 0.0
    out[:, 3] = log_score[:top] - following[:top]
    out[:, 4] = np.log1p(np.arange(top))
    out[:, 5] = np.log(max(m, 1))
    out[:, 6 : 6 + parts] = phrases.parts[:top]
    out[:, 6 + parts : -1] = query_features(query)
    out[:, -1] = 0.0 if kinds is None else kinds[:top]
    return out


def ranker_checksum(ranker: Ranker) -> str:
    """The sha256 of a ranker's weights (its provenance aside): what a calibrator was fitted with."""
    weights = np.concatenate([ranker.phrase, ranker.position])
    return hashlib.sha256(np.round(weights, 12).astype(np.float64).tobytes()).hexdigest()


def calibrator_checksum(calibrator: "Calibrator") -> str:
    """The sha256 of a calibrator's trees: what a reply's confidence was fitted over (:mod:`npmcore.answer.sure`)."""
    digest = hashlib.sha256()
    for name, array in sorted(calibrator.trees.arrays().items()):
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


@dataclass(frozen=True, eq=False)
class Calibrator:
    """A classifier of :data:`CONFIDENCE_FEATURES` (right or wrong), for one encoder and ranker."""

    trees: TreeEnsemble  # the fitted boosting's trees
    min_confidence: float  # abstain below it (chosen on dev: module docstring)
    ranker: str  # ranker_checksum of the ranker it was fitted with
    encoder: str  # the fingerprint of the encoder whose answers it was fitted on (npmcore.encoder.encoder_fingerprint)
    provenance: dict  # what it was fitted on, and how well it did there

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_confidence <= 1.0:
            raise ValueError(f"min_confidence must be in [0, 1], got {self.min_confidence}")
        if self.trees.features != len(CONFIDENCE_FEATURES):
            raise ValueError(f"trees of {self.trees.features} features, not the {len(CONFIDENCE_FEATURES)} of answers")

    def confidence(self, features: np.ndarray) -> np.ndarray:
        """(n,) the probability that each answer is right, from its (n, F) :func:`confidence_features`."""
        if len(features) == 0:
            return np.empty(0)
        return self.trees.probability(features)

    def save(self, path: str | Path) -> None:
        """Write the calibrator to ``path`` (a temporary name, then renamed: never half-written)."""
        about = {
            "features": list(CONFIDENCE_FEATURES),
            "min_confidence": self.min_confidence,
            "ranker": self.ranker,
            "encoder": self.encoder,
            "provenance": self.provenance,
        }
        path = Path(path)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, about=np.array(json.dumps(about)), **self.trees.arrays())
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)  # as any file written here, not mkstemp's owner-only
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    @classmethod
    def load(cls, path: str | Path) -> "Calibrator":
        """Raises:
        ValueError: ``path`` is not a calibrator file."""
        try:
            with np.load(path, allow_pickle=False) as arrays:  # numbers and text only: nothing a load runs
                about = json.loads(str(arrays["about"]))
                trees = TreeEnsemble.from_arrays({name: arrays[name] for name in arrays.files if name != "about"})
        except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile) as e:
            raise ValueError(f"{path}: not a calibrator ({type(e).__name__}: {e})") from e
        if not isinstance(about, dict) or about.get("features") != list(CONFIDENCE_FEATURES):
            raise ValueError(f"{path}: not a calibrator of features {CONFIDENCE_FEATURES}")
        return cls(trees, about["min_confidence"], about["ranker"], about["encoder"], about["provenance"])


def calibrator_of(encoder: str, fingerprint: str, ranker: Ranker) -> Calibrator | None:
    """The encoder's confidence calibrator (its folder's ``confidence.npz``, else the shipped encoder's), if it
    was fitted on this encoder's answers (``fingerprint``) ranked by ``ranker``; None otherwise (logged): answers
    then carry no confidence until ``bench/confidence.py`` fits one."""
    for folder in (Path(local_model_dir(encoder)), Path(default_encoder_path())):
        if (folder / CONFIDENCE_FILE).exists():
            try:
                calibrator = Calibrator.load(folder / CONFIDENCE_FILE)
            except ValueError as e:  # another package's features, say
                log.warning("%s", e)
                continue
            if calibrator.encoder == fingerprint and calibrator.ranker == ranker_checksum(ranker):
                return calibrator
    log.info("no %s fitted for encoder %s and its ranker: answers carry no confidence", CONFIDENCE_FILE, encoder)
    return None


def fit_calibrator(
    features: np.ndarray,
    right: np.ndarray,
    facts: np.ndarray,
    queries: np.ndarray,
    ranker: Ranker,
    encoder: str,
    provenance: dict | None = None,
    weights: np.ndarray | None = None,
) -> Calibrator:
    """A calibrator of answers' (n, F) features and whether each is right (:data:`BOOSTING`, seeded; each answer
    weighing its ``weights``, else the same). Its ``min_confidence`` is :func:`abstention_threshold` of the answers
    shown first (:func:`shown`: ``facts``, each answer's question, ``queries``, each answer's query), so weighted, as a
    5-fold cross-validation rates them (folds of whole facts), not as the fit does.

    Raises:
        ValueError: the answers are all right or all wrong (nothing to tell apart).
    """
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.model_selection import GroupKFold, cross_val_predict

    right = np.asarray(right, dtype=bool)
    if right.all() or not right.any():
        raise ValueError(f"all {len(right)} answers are {'right' if right.any() else 'wrong'}: nothing to calibrate")
    weights = np.ones(len(right)) if weights is None else np.asarray(weights, dtype=np.float64)
    model = HistGradientBoostingClassifier(**BOOSTING, early_stopping=False, random_state=0)
    folds = GroupKFold(n_splits=min(5, len(np.unique(facts))))
    weighed = {"sample_weight": weights}
    rated = cross_val_predict(model, features, right, groups=facts, cv=folds, method="predict_proba", params=weighed)
    first = shown(rated[:, 1], facts, queries)
    threshold = abstention_threshold(rated[first, 1], right[first], weights[first])
    record = {**(provenance or {}), "answers": len(right), "boosting": BOOSTING}
    trees = TreeEnsemble.of(model.fit(features, right, sample_weight=weights))
    return Calibrator(trees, threshold, ranker_checksum(ranker), encoder, record)


def shown(confidence: np.ndarray, facts: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """(n,) which answers are shown first: of each fact, the first answer of its query whose first answer is the
    most confident (the first such query on a tie), as :func:`npmcore.answer.answering.replies` chooses. The rows
    of a query are consecutive, best first; ``facts`` and ``queries`` name each row's fact and query."""
    first = np.flatnonzero(np.r_[True, queries[1:] != queries[:-1]]) if len(queries) else np.zeros(0, dtype=int)
    order = first[np.lexsort((-confidence[first], facts[first]))]  # by fact, the most confident first (stable)
    out = np.zeros(len(queries), dtype=bool)
    out[order[np.r_[True, facts[order][1:] != facts[order][:-1]]] if len(order) else order] = True
    return out


def abstention_threshold(confidence: np.ndarray, right: np.ndarray, weight: np.ndarray | None = None) -> float:
    """The confidence at and above which answering maximises (weighted) right minus wrong answers
    given: the lowest confidence of the best set of answers, 1.0 when every answer is better withheld."""
    weight = np.ones(len(confidence)) if weight is None else np.asarray(weight, dtype=np.float64)
    order = np.argsort(-confidence, kind="stable")
    ranked = confidence[order]
    gain = np.cumsum(np.where(right[order], weight[order], -weight[order]))
    cut = np.r_[ranked[1:] != ranked[:-1], True] if len(ranked) else np.zeros(0, dtype=bool)  # ties go together
    gain = np.where(cut, gain, -np.inf)
    if len(gain) == 0 or gain.max() <= 0:
        return 1.0
    return float(ranked[int(np.argmax(gain))])


class Rated(Protocol):
    """What abstention reads of an answer (:class:`npmcore.answer.inference.Answer`): its confidence, if any."""

    confidence: float | None


def abstention(calibrator: Calibrator | None, answers: Sequence[Rated], min_confidence: float | None) -> dict:
    """Whether anything was found, and whether a query's answers are shown as unsure (``abstained``): its first
    answer's confidence is below ``min_confidence`` (None: the calibrator's), or nothing was found ("not in this
    corpus"). Without confidence (NPM's scoring, or no calibrator for the encoder) nothing found is unsure and
    ``min_confidence`` is None."""
    if not answers or answers[0].confidence is None:
        return {"found": bool(answers), "abstained": not answers, "min_confidence": None}
    threshold = calibrator.min_confidence if min_confidence is None else min_confidence
    return {"found": True, "abstained": answers[0].confidence < threshold, "min_confidence": threshold}
