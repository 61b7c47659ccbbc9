"""Masked-token systems on a task: the MLM head, the kNN distribution and their interpolation
(:mod:`npmcore.answer.knnlm`), swept over λ, τ, exact or approximate search and datastore fractions.

The queries are encoded and searched once per searcher; every (λ, τ) is then arithmetic on
the same arrays, so a sweep costs little more than one run.

* Open-set tasks (``wikitext2``, LAMA, cloze) keep the examples with a gold answer that is
  one token of the encoder; accuracy: the top token among whole-word tokens is gold;
  perplexity: exp of the mean -log p(gold) (aliases' probabilities summed).
* Closed-set tasks score each label by log Σ p(w) over its verbalizer tokens, relative to
  the domain premise's (as :mod:`npmcore.evaluation.run` calibrates NPM).
"""

from dataclasses import dataclass

import numpy as np
from matplotlib.figure import Figure

from npmcore.answer.inference import NPM
from npmcore.answer.knnlm import (
    MaskedLMHead,
    Searcher,
    gold_nll,
    knn_log_probs,
    knn_probs,
    label_log_scores,
    log_mix,
    perplexity,
)
from npmcore.answer.tokens import label_token_ids
from npmcore.evaluation.run import label_ids
from npmcore.evaluation.tasks import Task
from npmcore.plots import line_plot
from npmcore.vocab import vocab_tables


@dataclass(frozen=True)
class MaskedRow:
    """One point of a sweep: a system at (search, fraction, λ, τ)."""

    system: str  # "mlm", "knn" or "knn-lm"
    search: str  # "approximate" (the index's codes), "exact" (Flat) or "" (mlm searches nothing)
    fraction: float  # share of the datastore's blocks searched (1.0 for mlm)
    lam: float  # weight of p_kNN: 0 for mlm, 1 for knn
    tau: float | None  # temperature of p_kNN (None for mlm)
    n: int
    accuracy: float
    perplexity: float | None  # open-set tasks only
    coverage: float | None  # open-set kNN systems: share of examples whose gold token was retrieved


@dataclass(frozen=True)
class MaskedStudy:
    task: str
    rows: tuple[MaskedRow, ...]
    notes: dict[str, int]


def run_masked(
    task: Task,
    npm: NPM,
    head: MaskedLMHead,
    searchers: list[Searcher],
    lams: list[float],
    taus: list[float],
    k: int,
    calibrate: bool = True,
) -> MaskedStudy:
    """Every system of :mod:`npmcore.answer.knnlm` on ``task``: ``mlm`` once, ``knn`` per searcher and τ,
    ``knn-lm`` per searcher, τ and λ (0 < λ < 1)."""
    if not task.examples:
        raise ValueError(f"task {task.name} has no examples to evaluate (skipped: {task.skipped})")
    if any(not 0 < lam < 1 for lam in lams):
        raise ValueError(f"knn-lm weights must lie strictly between 0 (mlm) and 1 (knn), got {lams}")
    notes = {f"skipped_{reason}": count for reason, count in task.skipped.items()}
    if task.kind == "closed":
        examples = list(task.examples)
        labels = label_ids(task, npm, notes)
        gold = [np.array([ex.label]) for ex in examples]
        premise = [task.domain] if calibrate and task.domain else []
    else:
        examples, gold = [], []
        for ex in task.examples:
            ids, _ = label_token_ids(npm.tokenizer, list(ex.answers))
            if len(ids):
                examples.append(ex)
                gold.append(ids)
        notes["skipped_multi_token"] = len(task.examples) - len(examples)
        if not examples:
            raise ValueError(f"task {task.name}: no example has a single-token answer for this encoder")
        labels, premise = None, []
    hidden = npm.encode_queries([ex.query for ex in examples] + premise, 1)[:, 0]  # (n [+ 1], d)
    lm = head.log_probs(hidden)
    V = lm.shape[1]
    words = np.zeros(V, dtype=bool)
    tables = vocab_tables(npm.tokenizer)
    words[: len(tables.word_start)] = tables.word_start & ~tables.boundary  # whole-word tokens

    def score(log_probs: np.ndarray) -> tuple[float, float | None]:
        if labels is not None:
            scores = label_log_scores(log_probs, labels)
            if premise:
                scores = scores[:-1] - scores[-1]
            return float(np.mean(np.argmax(scores, axis=1) == [g[0] for g in gold])), None
        top = np.argmax(np.where(words, log_probs, -np.inf), axis=1)
        correct = [t in g for t, g in zip(top, gold, strict=True)]
        return float(np.mean(correct)), perplexity(gold_nll(log_probs, gold))

    n = len(examples)
    rows = [MaskedRow("mlm", "", 1.0, 0.0, None, n, *score(lm), None)]
    for searcher in searchers:
        sims, ids = searcher.search(hidden * npm.scale, k)
        tokens = np.where(ids >= 0, np.asarray(npm.corpus.tokens)[np.maximum(ids, 0)], -1).astype(np.int64)
        coverage = (
            None
            if labels is not None
            else float(np.mean([np.isin(g, row).any() for g, row in zip(gold, tokens, strict=True)]))
        )
        for tau in taus:
            knn = knn_probs(tokens, sims, tau, V)
            where = (searcher.name, searcher.fraction)
            rows.append(MaskedRow("knn", *where, 1.0, tau, n, *score(knn_log_probs(knn)), coverage))
            rows += [MaskedRow("knn-lm", *where, lam, tau, n, *score(log_mix(lm, knn, lam)), coverage) for lam in lams]
    return MaskedStudy(task.name, tuple(rows), notes)


def best(rows: list[MaskedRow], system: str) -> MaskedRow:
    """The row of ``system`` with the lowest perplexity (closed-set: the highest accuracy)."""
    mine = [r for r in rows if r.system == system]
    if not mine:
        raise ValueError(f"no {system} row in the study")
    return min(mine, key=lambda r: r.perplexity if r.perplexity is not None else -r.accuracy)


def sweep_plots(rows: list[MaskedRow], task: str) -> dict[str, Figure]:
    """The study's figures, by file name: the task's metric (perplexity for open-set tasks,
    else accuracy) against λ at the best τ (mlm at λ = 0, knn at 1), against τ at the best λ,
    and against the datastore fraction at the best (λ, τ); one line per search."""
    open_set = rows[0].perplexity is not None
    metric = "perplexity" if open_set else "accuracy"

    def value(r: MaskedRow) -> float:
        return r.perplexity if open_set else r.accuracy

    figures = {}
    searched = [r for r in rows if r.system != "mlm"]
    if not searched:
        return figures
    top = best(searched, "knn-lm") if any(r.system == "knn-lm" for r in searched) else best(searched, "knn")
    mlm = [r for r in rows if r.system == "mlm"]
    by_lam, by_tau, by_size = {}, {}, {}
    for search in dict.fromkeys(r.search for r in searched):
        full = [r for r in searched if r.search == search and r.fraction == 1.0]
        by_lam[search] = [(r.lam, value(r)) for r in full if r.tau == top.tau] + [(0.0, value(m)) for m in mlm]
        by_tau[f"{search} knn"] = [(r.tau, value(r)) for r in full if r.system == "knn"]
        by_tau[f"{search} knn-lm λ={top.lam:g}"] = [(r.tau, value(r)) for r in full if r.lam == top.lam]
        at_best = [r for r in searched if r.search == search and r.tau == top.tau]
        by_size[f"{search} knn"] = [(r.fraction, value(r)) for r in at_best if r.system == "knn"]
        by_size[f"{search} knn-lm λ={top.lam:g}"] = [(r.fraction, value(r)) for r in at_best if r.lam == top.lam]
    ylim = None if open_set else (0, 1)
    scale = dict(ylim=ylim, log_y=open_set)  # perplexity on a log scale: knn alone can be far above the others
    figures[f"{metric}_by_lambda.png"] = line_plot(
        {k: v for k, v in by_lam.items() if v}, "λ (weight of p_kNN)", metric, f"{task}: τ={top.tau:g}", **scale
    )
    figures[f"{metric}_by_tau.png"] = line_plot(
        {k: v for k, v in by_tau.items() if v}, "τ", metric, f"{task}: temperature of p_kNN", log_x=True, **scale
    )
    if len({r.fraction for r in searched}) > 1:
        figures[f"{metric}_by_datastore.png"] = line_plot(
            {k: v for k, v in by_size.items() if v},
            "share of the datastore",
            metric,
            f"{task}: τ={top.tau:g}",
            log_x=True,
            **scale,
        )
    return figures
