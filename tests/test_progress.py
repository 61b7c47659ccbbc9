"""Progress where no terminal shows it: log lines at every tenth done and on a timer, in the Prefect task's log."""

import logging
import time

from prefect import flow, task
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import LogFilter, LogFilterTaskRunId
from prefect.logging.handlers import APILogWorker

from npmcore.progress import ProgressLog, token_progress


def test_a_line_at_every_tenth_done_and_when_the_timer_passes_without_one(caplog):
    caplog.set_level(logging.INFO, logger="npmcore.progress")
    with ProgressLog("embedding", 1000, "tokens", every_s=0.3) as logged:
        logged.advance(50)
        assert not caplog.records  # 5%: not yet a tenth, and the timer has not passed
        logged.advance(260)  # 31%: one line, not three
        time.sleep(0.45)  # the timer's line, with the same counts
        logged.advance(690)
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("embedding: 310 of 1,000 tokens (31%), ") and "tokens/s" in lines[0]
    assert "left" in lines[0]
    assert lines[1].startswith("embedding: 310 of 1,000 tokens (31%), ")
    assert lines[-1].startswith("embedding: 1,000 of 1,000 tokens (100%), ") and "left" not in lines[-1]
    assert len(lines) == 3


def test_the_last_line_is_the_final_count_though_the_last_advance_crossed_no_tenth(caplog):
    """The demo's ingest: its 100% line came with 5 of its 6 shards, the last (a shard standing for none of the
    inputs' bytes) finishing after it; the stage's end logs the final counts, and only when they are not logged."""
    caplog.set_level(logging.INFO, logger="npmcore.progress")
    with ProgressLog("ingesting", 100, "bytes", every_s=60) as logged:
        logged.advance(100, "shards 5 docs 392")
        logged.advance(0, "shards 6 docs 398")
    with ProgressLog("ingesting", 100, "bytes", every_s=60) as logged:
        logged.advance(100, "shards 6 docs 398")
    details = [r.getMessage().rsplit("; ", 1)[1] for r in caplog.records]
    assert details == ["shards 5 docs 392", "shards 6 docs 398", "shards 6 docs 398"]


def test_without_a_total_lines_count_what_is_done_with_its_detail(caplog):
    caplog.set_level(logging.INFO, logger="npmcore.progress")
    with ProgressLog("ingesting", None, "shards", every_s=0.2) as logged:
        logged.advance(2, "docs 40 blocks 120")
        time.sleep(0.3)
    assert caplog.records[0].getMessage().startswith("ingesting: 2 shards, ")
    assert caplog.records[0].getMessage().endswith("; docs 40 blocks 120")


@task
def embed_slowly() -> str:
    from prefect.runtime import task_run

    with token_progress("embedding", 100, terminal=False) as show:
        show(40)  # a line from the task's thread
    with ProgressLog("indexing", 100, "tokens", every_s=0.2):
        time.sleep(0.3)  # a line from the timer's thread
    return task_run.id


@flow
def embedding_flow() -> str:
    return embed_slowly()


def test_progress_lines_land_in_the_prefect_task_runs_log(prefect_server):
    task_run_id = embedding_flow()
    APILogWorker.drain_all()
    with get_client(sync_client=True) as client:
        logs = client.read_logs(LogFilter(task_run_id=LogFilterTaskRunId(any_=[task_run_id])))
    messages = [entry.message for entry in logs]
    assert any(m.startswith("embedding: 40 of 100 tokens (40%)") for m in messages), messages
    assert any(m.startswith("indexing: 0 of 100 tokens (0%)") for m in messages), messages
