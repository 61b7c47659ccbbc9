"""The reply's confidence: how often the answer shown to a person is right, from what its readings and its check say.

Each answer's own confidence (:mod:`npmcore.answer.confidence`) rates one query's answer. A person sees a reply: the
name its readings vote for (:mod:`npmcore.answer.vote`), checked the other way round where it is about to be shown as
sure (:mod:`npmcore.answer.checks`). :class:`Sure` rates each name of a reply from

* the vote (:data:`npmcore.answer.vote.VOTE_FEATURES`): its best and its mean confidence over the readings (as
  log-odds), the shares of readings that name it first and at all, how many readings there were;
* its check (:data:`npmcore.answer.checks.CHECK_FEATURES`): whether it was checked, whether its subject came back
  first, at all, and how sure;

a logistic regression (Kamath et al. 2020: a calibrator of cheap features, fitted on data like what it rates), fitted
by ``bench/confidence.py`` on the dev sets' replies (the calibrator's confidences in them cross-validated: what it says
of facts it was not fitted on), shipped as ``sure.json`` beside the encoder's ``confidence.npz`` (numbers only) and
used with the calibrator it was fitted over alone. A reply's names are ranked by it, and its ``min_confidence`` (the
confidence from which an answer is shown as sure) is chosen for precision: the lowest at which the answers shown as
sure to the dev queries people type are right at least :data:`PRECISION` of the time, for each way of typing (a
question, keywords, a statement). A name is checked where its best confidence is at least ``check_from`` (chosen on the
same dev sets among a few: the one whose answers are then most often right and sure), so that only what may be shown
as sure pays for a check.
"""

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from npmcore.answer.checks import CHECK_FEATURES
from npmcore.answer.confidence import Calibrator, calibrator_checksum
from npmcore.answer.vote import VOTE_FEATURES
from npmcore.encoder import default_encoder_path, local_model_dir
from npmcore.storage import replace_json

log = logging.getLogger(__name__)

SURE_FILE = "sure.json"
SURE_FEATURES = (*VOTE_FEATURES, *CHECK_FEATURES)
PRECISION = 0.9  # answers shown as sure are right at least this often on the dev sets of queries people type
LOG_ODDS = ("confidence", "mean_confidence", "check_confidence")  # probabilities, read as log-odds


def design(features: np.ndarray) -> np.ndarray:
    """(n, F) features as the regression reads them: the probabilities of :data:`LOG_ODDS` as log-odds."""
    out = np.array(features, dtype=np.float64, copy=True).reshape(-1, len(SURE_FEATURES))
    for name in LOG_ODDS:
        k = SURE_FEATURES.index(name)
        p = np.clip(out[:, k], 1e-4, 1 - 1e-4)
        out[:, k] = np.log(p / (1 - p))
    return out


@dataclass(frozen=True, eq=False)
class Sure:
    """A reply's confidence for one calibrator: a logistic regression of :data:`SURE_FEATURES`."""

    coef: tuple[float, ...]
    intercept: float
    min_confidence: float  # shown as sure from this confidence (chosen for precision on dev)
    check_from: float  # a name whose best confidence is below this is not checked
    calibrator: str  # calibrator_checksum of the calibrator whose confidences it reads
    provenance: dict  # what it was fitted on, and how well it did there

    def __post_init__(self) -> None:
        if len(self.coef) != len(SURE_FEATURES):
            raise ValueError(f"{len(self.coef)} coefficients, not the {len(SURE_FEATURES)} of {SURE_FEATURES}")
        for name in ("min_confidence", "check_from"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")

    def confidence(self, features: np.ndarray) -> np.ndarray:
        """(n,) the probability that each name is right, from its (n, F) features."""
        z = design(features) @ np.asarray(self.coef) + self.intercept
        return 1.0 / (1.0 + np.exp(-z))

    def save(self, path: str | Path) -> None:
        """Write it to ``path`` as JSON, replaced whole (:func:`npmcore.storage.replace_json`: never half-written)."""
        about = {
            "features": list(SURE_FEATURES),
            "coef": list(self.coef),
            "intercept": self.intercept,
            "min_confidence": self.min_confidence,
            "check_from": self.check_from,
            "calibrator": self.calibrator,
            "provenance": self.provenance,
        }
        replace_json(str(path), about)

    @classmethod
    def load(cls, path: str | Path) -> "Sure":
        """Raises:
        ValueError: ``path`` is not a reply's confidence of :data:`SURE_FEATURES`."""
        try:
            about = json.loads(Path(path).read_text())
            if about.get("features") != list(SURE_FEATURES):
                raise ValueError(f"features {about.get('features')}, not {list(SURE_FEATURES)}")
            return cls(
                tuple(float(c) for c in about["coef"]),
                float(about["intercept"]),
                float(about["min_confidence"]),
                float(about["check_from"]),
                str(about["calibrator"]),
                dict(about["provenance"]),
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"{path}: not a reply's confidence ({type(e).__name__}: {e})") from e


def sure_of(encoder: str, calibrator: Calibrator | None) -> Sure | None:
    """The reply's confidence fitted over ``calibrator`` (the encoder's folder's ``sure.json``, else the shipped
    encoder's); None without a calibrator or where none was fitted over it (logged): replies then show the most
    confident name, unchecked."""
    if calibrator is None:
        return None
    for folder in (Path(local_model_dir(encoder)), Path(default_encoder_path())):
        if (folder / SURE_FILE).exists():
            try:
                sure = Sure.load(folder / SURE_FILE)
            except ValueError as e:
                log.warning("%s", e)
                continue
            if sure.calibrator == calibrator_checksum(calibrator):
                return sure
    log.info("no %s fitted over encoder %s's calibrator: replies are not checked", SURE_FILE, encoder)
    return None


def precision_threshold(confidence: np.ndarray, right: np.ndarray, precision: float = PRECISION) -> float:
    """The lowest confidence at and above which the answers are right at least ``precision`` of the time (ties go
    together; 1.0 where no such set of answers exists)."""
    order = np.argsort(-confidence, kind="stable")
    ranked = confidence[order]
    share = np.cumsum(right[order]) / np.arange(1, len(order) + 1)
    cut = np.r_[ranked[1:] != ranked[:-1], True] if len(ranked) else np.zeros(0, dtype=bool)
    ok = np.flatnonzero(cut & (share >= precision))
    return float(ranked[ok.max()]) if len(ok) else 1.0


def fit_sure(
    features: np.ndarray,
    right: np.ndarray,
    weights: np.ndarray,
    calibrator: Calibrator,
    min_confidence: float,
    check_from: float,
    provenance: dict,
) -> Sure:
    """A reply's confidence fitted on names' (n, F) :data:`SURE_FEATURES` and whether each is right (scikit-learn's
    logistic regression, each name weighing its ``weights``); ``min_confidence`` and ``check_from`` as chosen on the
    dev sets (``bench/confidence.py``)."""
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(C=1.0, max_iter=2000).fit(design(features), right, sample_weight=weights)
    return Sure(
        tuple(float(c) for c in model.coef_[0]),
        float(model.intercept_[0]),
        min_confidence,
        check_from,
        calibrator_checksum(calibrator),
        provenance,
    )
