"""A fitted binary scikit-learn ``HistGradientBoostingClassifier`` as plain arrays, predicted with numpy alone.

A query's confidence (:mod:`npmcore.answer.confidence`) is a few hundred trees over a few answers: loading
scikit-learn and a safe serialisation of its estimator to compute it took 4 to 8 s of a command's start on
this project's 2-core machines, the predictions a few milliseconds. Here the trees are their nodes' arrays,
as scikit-learn's own predictor holds them (``_predictors[i][0].nodes``), walked the way its ``TreePredictor``
walks them: a missing value (NaN) goes to the side the fit learnt, any other goes left when it is at most the
node's threshold. The raw score adds the baseline and then each tree's leaf value in the fit's order, as
scikit-learn adds them, so the probabilities are its probabilities to float rounding of the logistic function
(tests/test_confidence.py compares them). Numeric features only: the calibrator has no categorical one.
"""

from dataclasses import dataclass
from typing import Any

import numpy as np

FIELDS = ("feature", "threshold", "missing_left", "left", "right", "leaf", "value", "roots")


@dataclass(frozen=True, eq=False)
class TreeEnsemble:
    """Trees whose nodes are the rows of the node arrays (``left``/``right``: row numbers, all trees together)."""

    feature: np.ndarray  # (nodes,) int64: the feature an inner node splits on
    threshold: np.ndarray  # (nodes,) float64: an inner node sends a value <= threshold left
    missing_left: np.ndarray  # (nodes,) bool: an inner node sends a missing value (NaN) left
    left: np.ndarray  # (nodes,) int64: an inner node's children
    right: np.ndarray
    leaf: np.ndarray  # (nodes,) bool
    value: np.ndarray  # (nodes,) float64: a leaf's contribution to the raw score
    roots: np.ndarray  # (trees,) int64: each tree's first node, in the fit's order
    baseline: float  # the raw score before any tree
    features: int  # the width of the rows it predicts

    @classmethod
    def of(cls, model: Any) -> "TreeEnsemble":
        """The trees of a fitted binary ``HistGradientBoostingClassifier`` of numeric features.

        Raises:
            ValueError: the model has more than two classes or a categorical feature."""
        if model.n_trees_per_iteration_ != 1:
            raise ValueError(f"a binary classifier has one tree an iteration, this one {model.n_trees_per_iteration_}")
        nodes = [trees[0].nodes for trees in model._predictors]
        if any(n["is_categorical"].any() for n in nodes):
            raise ValueError("the trees split on a categorical feature: only numeric features are supported")
        roots = np.cumsum([0] + [len(n) for n in nodes[:-1]], dtype=np.int64)
        offset = np.repeat(roots, [len(n) for n in nodes])
        every = np.concatenate(nodes)
        return cls(
            feature=every["feature_idx"].astype(np.int64),
            threshold=every["num_threshold"].astype(np.float64),
            missing_left=every["missing_go_to_left"].astype(bool),
            left=every["left"].astype(np.int64) + offset,
            right=every["right"].astype(np.int64) + offset,
            leaf=every["is_leaf"].astype(bool),
            value=every["value"].astype(np.float64),
            roots=roots,
            baseline=float(np.asarray(model._baseline_prediction).item()),
            features=int(model.n_features_in_),
        )

    def raw(self, x: np.ndarray) -> np.ndarray:
        """(n,) raw scores (log odds) of the (n, features) rows ``x``."""
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.features:
            raise ValueError(f"expected rows of {self.features} features, got an array of shape {x.shape}")
        node = np.tile(self.roots, (len(x), 1))  # (n, trees)
        rows = np.arange(len(x))[:, None]
        while (inner := ~self.leaf[node]).any():
            value = x[rows, self.feature[node]]
            left = np.where(np.isnan(value), self.missing_left[node], value <= self.threshold[node])
            node = np.where(inner, np.where(left, self.left[node], self.right[node]), node)
        # the baseline, then each tree's value added in order: cumsum adds left to right, as the fit's sum
        terms = np.concatenate([np.full((len(x), 1), self.baseline), self.value[node]], axis=1)
        return np.cumsum(terms, axis=1)[:, -1]

    def probability(self, x: np.ndarray) -> np.ndarray:
        """(n,) the probability of the positive class of each row of ``x``."""
        return 1.0 / (1.0 + np.exp(-self.raw(x)))

    def arrays(self) -> dict[str, np.ndarray]:
        """The trees as named arrays (:meth:`from_arrays` reads them back)."""
        return {
            **{name: getattr(self, name) for name in FIELDS},
            "baseline": np.float64(self.baseline),
            "features": np.int64(self.features),
        }

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> "TreeEnsemble":
        """Trees from :meth:`arrays`, checked to be trees: every child a node, every tree's walk ending."""
        trees = cls(
            **{name: np.asarray(arrays[name]) for name in FIELDS},
            baseline=float(arrays["baseline"]),
            features=int(arrays["features"]),
        )
        n = len(trees.leaf)
        lengths = {len(getattr(trees, name)) for name in FIELDS if name != "roots"}
        inner = ~trees.leaf
        children = np.concatenate([trees.left[inner], trees.right[inner], trees.roots])
        if lengths != {n} or children.size and (children.min() < 0 or children.max() >= n):
            raise ValueError("node arrays of different lengths, or a child that is no node")
        parents = np.flatnonzero(inner)
        if (trees.left[inner] <= parents).any() or (trees.right[inner] <= parents).any():
            raise ValueError("a child before its parent: the nodes are no tree")
        if n and (trees.feature.min() < 0 or trees.feature.max() >= trees.features):
            raise ValueError(f"a split on a feature beyond the {trees.features} features")
        return trees
