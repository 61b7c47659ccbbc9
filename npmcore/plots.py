"""Figures for MLflow runs: bar and line plots on a bare matplotlib ``Figure`` (no pyplot,
no global backend, nothing to close), which ``mlflow.log_figure`` saves."""

from collections.abc import Sequence

from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter


def bar_plot(values: dict[str, float], xlabel: str, ylabel: str, title: str) -> Figure:
    """One bar per key, scores in [0, 1]."""
    figure = Figure(figsize=(4, 3))
    axes = figure.subplots()
    axes.bar(list(values), list(values.values()))
    axes.set(xlabel=xlabel, ylabel=ylabel, ylim=(0, 1), title=title)
    figure.tight_layout()
    return figure


def line_plot(
    curves: dict[str, Sequence[tuple[float, float]]],
    xlabel: str,
    ylabel: str,
    title: str,
    log_x: bool = False,
    ylim: tuple[float, float] | None = (0, 1),
    log_y: bool = False,
) -> Figure:
    """One line (with markers) per named curve of (x, y) points; y in ``ylim`` (None: fitted, e.g. perplexity)."""
    figure = Figure(figsize=(5, 3.5))
    axes = figure.subplots()
    for name, points in curves.items():
        xs, ys = zip(*sorted(points), strict=True)
        axes.plot(xs, ys, marker="o", label=name)
    axes.set(
        xlabel=xlabel,
        ylabel=ylabel,
        title=title,
        xscale="log" if log_x else "linear",
        yscale="log" if log_y else "linear",
    )
    if log_x:  # label the measured x values, not powers of ten
        ticks = sorted({x for points in curves.values() for x, _ in points})
        axes.set_xticks(ticks, [f"{x:g}" for x in ticks])
        axes.xaxis.set_minor_formatter(NullFormatter())
    if ylim is not None:
        axes.set_ylim(*ylim)
    axes.legend()
    figure.tight_layout()
    return figure
