"""Progress of long stages: on a terminal a rich display; elsewhere (a log file, CI, the Prefect
UI's task log) log lines from :class:`ProgressLog`, at least every 30 s and at every 10% done.
Ingestion is fed one shard result at a time (its share of the inputs' bytes), embedding and indexing
the tokens each finished shard held, training each step's stats."""

import contextvars
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from npmcore.durations import duration_in_whole_units

log = logging.getLogger(__name__)
LOG_EVERY_S = 30.0  # a log line at least this often while a stage runs
LOG_EVERY_SHARE = 0.1  # and whenever another tenth of its total is done


class ProgressLog:
    """Progress as log lines (done of total, rate, time left), from the caller's thread at every
    :data:`LOG_EVERY_SHARE` of ``total`` and from a timer thread when :data:`LOG_EVERY_S` passed
    without one, and at the stage's end when its last line is not the final count (a last shard
    that crossed no tenth). The timer runs in a copy of the caller's context, so that its lines land in the
    same Prefect task run's log."""

    def __init__(self, description: str, total: int | None, unit: str, every_s: float = LOG_EVERY_S):
        self.description, self.total, self.unit, self.every_s = description, total, unit, every_s
        self.done, self.detail = 0, ""
        self.stale = False  # advanced since the last line
        self.started = self.logged = time.monotonic()
        self.next_share = LOG_EVERY_SHARE
        self._lock, self._stop = threading.Lock(), threading.Event()
        self._timer = threading.Thread(target=contextvars.copy_context().run, args=(self._beat,), daemon=True)

    def __enter__(self) -> "ProgressLog":
        self._timer.start()
        return self

    def __exit__(self, error: type[BaseException] | None, *exc: object) -> None:
        self._stop.set()
        self._timer.join()
        if error is None and self.stale:
            self._log()

    def advance(self, n: int, detail: str = "") -> None:
        """``n`` more units done; ``detail``: shown after the counts (the latest loss, say)."""
        with self._lock:
            self.done += n
            self.detail = detail
            self.stale = True
            if self.total and self.done >= self.next_share * self.total:
                self._log()
                while self.next_share * self.total <= self.done:
                    self.next_share += LOG_EVERY_SHARE

    def line(self) -> str:
        elapsed = time.monotonic() - self.started
        rate = self.done / elapsed if elapsed > 0 else 0.0
        counts = f"{self.done:,} of {self.total:,} {self.unit}" if self.total else f"{self.done:,} {self.unit}"
        text = f"{self.description}: {counts}"
        if self.total:
            text += f" ({100 * self.done / self.total:.0f}%)"
        text += f", {rate:,.0f} {self.unit}/s, {duration_in_whole_units(elapsed)} elapsed"
        if self.total and rate > 0 and self.done < self.total:
            text += f", about {duration_in_whole_units((self.total - self.done) / rate)} left"
        return text + (f"; {self.detail}" if self.detail else "")

    def _log(self) -> None:
        log.info("%s", self.line())
        self.logged = time.monotonic()
        self.stale = False

    def _beat(self) -> None:
        while not self._stop.wait(max(0.0, self.logged + self.every_s - time.monotonic())):
            with self._lock:
                if time.monotonic() - self.logged >= self.every_s:
                    self._log()


@contextmanager
def shard_progress(description: str, total_bytes: int, terminal: bool) -> Iterator[Callable[[object], None]]:
    """Yields a callback taking a finished shard's result, with its ``input_bytes`` (the inputs' bytes it
    stands for; done of ``total_bytes``, bytes/s, time left) and ``docs``, ``blocks`` and ``tokens`` counts."""
    totals = {"shards": 0, "docs": 0, "blocks": 0, "tokens": 0}

    def add(result: object) -> str:
        totals["shards"] += 1
        for key in ("docs", "blocks", "tokens"):
            totals[key] += getattr(result, key)
        return " ".join(f"{k} {v:,}" for k, v in totals.items())

    if not terminal:
        with ProgressLog(description, total_bytes, "bytes") as logged:
            yield lambda result: logged.advance(result.input_bytes, add(result))
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TextColumn("{task.fields[totals]}"),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
    )
    with Progress(*columns) as progress:
        task_id = progress.add_task(description, total=total_bytes, totals="")
        yield lambda result: progress.update(task_id, advance=result.input_bytes, totals=add(result))


def _step_detail(stats: object) -> str:
    acc = f"start-acc {stats.start_acc:.2f}" if stats.start_acc is not None else f"mlm-acc {stats.mlm_acc:.2f}"
    rate = getattr(stats, "queries_per_s", None)  # query-side training counts queries, not tokens
    return f"loss {stats.loss:.3f} {acc} " + (f"{rate:,.1f} queries/s" if rate else f"{stats.tokens_per_s:,.0f} tok/s")


@contextmanager
def step_progress(description: str, total: int, terminal: bool) -> Iterator[Callable[[object], None]]:
    """Yields a callback taking training step stats (``step``, ``loss``, ``start_acc`` or ``mlm_acc``)."""
    if not terminal:
        with ProgressLog(description, total, "steps") as logged:
            yield lambda stats: logged.advance(stats.step - logged.done, _step_detail(stats))
        return
    columns = (*Progress.get_default_columns(), TextColumn("{task.fields[stats]}"))
    with Progress(*columns) as progress:
        task_id = progress.add_task(description, total=total, stats="")
        yield lambda stats: progress.update(task_id, completed=stats.step, stats=_step_detail(stats))


@contextmanager
def token_progress(description: str, total: int, terminal: bool) -> Iterator[Callable[[int], None]]:
    """Yields a callback taking the tokens just done: tokens done of ``total``, tokens/s, time left."""
    if not terminal:
        with ProgressLog(description, total, "tokens") as logged:
            yield logged.advance
        return
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
