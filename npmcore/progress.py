"""Terminal progress displays (rich): ingestion fed one shard result at a time, embedding and
indexing fed the tokens each finished shard held, training fed each step's stats."""

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.progress import (
    BarColumn,
    Progress,
    SpinnerColumn,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


@contextmanager
def shard_progress(description: str) -> Iterator[Callable[[object], None]]:
    """Yields a callback taking a result with ``docs``, ``blocks`` and ``tokens`` counts."""
    totals = {"shards": 0, "docs": 0, "blocks": 0, "tokens": 0}
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TextColumn("{task.fields[totals]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, transient=False) as progress:
        task_id = progress.add_task(description, totals="")

        def update(result: object) -> None:
            totals["shards"] += 1
            for key in ("docs", "blocks", "tokens"):
                totals[key] += getattr(result, key)
            progress.update(task_id, totals=" ".join(f"{k} {v:,}" for k, v in totals.items()))

        yield update


@contextmanager
def step_progress(description: str, total: int) -> Iterator[Callable[[object], None]]:
    """Yields a callback taking training step stats (``step``, ``loss``, ``start_acc`` or ``mlm_acc``)."""
    columns = (*Progress.get_default_columns(), TextColumn("{task.fields[stats]}"))
    with Progress(*columns) as progress:
        task_id = progress.add_task(description, total=total, stats="")

        def update(stats: object) -> None:
            acc = f"start-acc {stats.start_acc:.2f}" if stats.start_acc is not None else f"mlm-acc {stats.mlm_acc:.2f}"
            progress.update(
                task_id, completed=stats.step, stats=f"loss {stats.loss:.3f} {acc} {stats.tokens_per_s:,.0f} tok/s"
            )

        yield update


@contextmanager
def token_progress(description: str, total: int) -> Iterator[Callable[[int], None]]:
    """Yields a callback taking the tokens just done: tokens done of ``total``, tokens/s, time left."""
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TextColumn("{task.completed:,.0f} of {task.total:,.0f} tokens"),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
    )
    with Progress(*columns) as progress:
        task_id = progress.add_task(description, total=total, rate="")

        def update(tokens: int) -> None:
            progress.advance(task_id, tokens)
            speed = progress.tasks[0].speed
            progress.update(task_id, rate=f"{speed:,.0f} tokens/s" if speed else "")

        yield update
