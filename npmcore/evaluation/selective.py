"""Selective prediction: how well a confidence says when an answer is right.

* expected calibration error (:func:`expected_calibration_error`): the answers sorted into 10
  equal-width bins of confidence, the mean over bins, weighted by their share of the answers, of
  |accuracy - mean confidence|;
* the risk-coverage curve (:func:`risk_coverage`): answering only the most confident share of the
  queries (the coverage), the share of those answers that are wrong (the risk); its area
  (:func:`aurc`, the mean risk over coverages 1/n … 1) and the accuracy at a coverage
  (:func:`accuracy_at_coverage`: of the ceil(coverage · n) most confident answers).

Ties in confidence are broken by the answers' order (a stable sort): a constant confidence gives
the accuracy of the first answers at every coverage.
"""

import math
from collections.abc import Sequence

import numpy as np

COVERAGES = (0.1, 0.25, 0.5, 1.0)
BINS = 10


def _checked(confidence: Sequence[float], correct: Sequence[bool]) -> tuple[np.ndarray, np.ndarray]:
    conf = np.asarray(confidence, dtype=np.float64)
    right = np.asarray(correct, dtype=bool)
    if conf.shape != right.shape or conf.ndim != 1:
        raise ValueError(f"confidence and correct differ in shape: {conf.shape} vs {right.shape}")
    if len(conf) == 0:
        raise ValueError("no answers to measure")
    if not np.all((conf >= 0) & (conf <= 1)):
        raise ValueError("confidence must lie in [0, 1]")
    return conf, right


def expected_calibration_error(confidence: Sequence[float], correct: Sequence[bool], bins: int = BINS) -> float:
    conf, right = _checked(confidence, correct)
    which = np.minimum((conf * bins).astype(np.int64), bins - 1)  # [0, 0.1), …, [0.9, 1.0]
    gap = np.abs(np.bincount(which, right, minlength=bins) - np.bincount(which, conf, minlength=bins))
    return float(gap.sum() / len(conf))


def risk_coverage(confidence: Sequence[float], correct: Sequence[bool]) -> tuple[np.ndarray, np.ndarray]:
    """(coverage, risk), each (n,): answering the k most confident answers, k = 1 … n."""
    conf, right = _checked(confidence, correct)
    wrong = ~right[np.argsort(-conf, kind="stable")]
    k = np.arange(1, len(conf) + 1)
    return k / len(conf), np.cumsum(wrong) / k


def aurc(confidence: Sequence[float], correct: Sequence[bool]) -> float:
    return float(risk_coverage(confidence, correct)[1].mean())


def accuracy_at_coverage(confidence: Sequence[float], correct: Sequence[bool], coverage: float) -> float:
    if not 0 < coverage <= 1:
        raise ValueError(f"coverage must be in (0, 1], got {coverage}")
    conf, right = _checked(confidence, correct)
    k = max(1, math.ceil(coverage * len(conf) - 1e-9))
    return float(right[np.argsort(-conf, kind="stable")[:k]].mean())


def calibration_report(confidence: Sequence[float], correct: Sequence[bool]) -> dict:
    """``{"ece", "aurc", "accuracy_at_coverage": {"0.1", "0.25", "0.5", "1.0"}, "n"}``, rounded to 4 places."""
    return {
        "ece": round(expected_calibration_error(confidence, correct), 4),
        "aurc": round(aurc(confidence, correct), 4),
        "accuracy_at_coverage": {str(c): round(accuracy_at_coverage(confidence, correct, c), 4) for c in COVERAGES},
        "n": len(confidence),
    }


def shown_report(confidence: Sequence[float], correct: Sequence[bool], min_confidence: float) -> dict:
    """What a person is shown: ``{"min_confidence", "sure", "precision", "right_greyed"}``, the share of answers at or
    above ``min_confidence`` (shown as sure), the share of those that are right (None: none is sure), and the share
    of the right answers below it (shown greyed), rounded to 4 places."""
    conf, right = _checked(confidence, correct)
    sure = conf >= min_confidence
    return {
        "min_confidence": round(float(min_confidence), 4),
        "sure": round(float(sure.mean()), 4) if len(sure) else 0.0,
        "precision": round(float(right[sure].mean()), 4) if sure.any() else None,
        "right_greyed": round(float((right & ~sure).sum() / max(int(right.sum()), 1)), 4),
    }


def reliability(
    confidence: Sequence[float], correct: Sequence[bool], bins: int = BINS
) -> list[tuple[float, float, int]]:
    """Per non-empty bin: (mean confidence, accuracy, answers), the points of a reliability diagram."""
    conf, right = _checked(confidence, correct)
    which = np.minimum((conf * bins).astype(np.int64), bins - 1)
    return [
        (float(conf[which == b].mean()), float(right[which == b].mean()), int((which == b).sum()))
        for b in range(bins)
        if (which == b).any()
    ]
