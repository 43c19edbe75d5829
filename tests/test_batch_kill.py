"""A batch run killed, or cut off, in each window of a submission: nothing is submitted twice.

The windows: before the upload, between the upload and the create, between the create and the
batch id's being saved, while polling (docs/reliability.md, "Batch faults"). The in-process tests
cut a create's reply (the double creates the batch and closes the connection); the others kill a
benchmark run in a process of its own with SIGKILL and run the same command again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import openai
import pytest

from psychosis_tests.common.errors import ModelCallError
from psychosis_tests.engine.batch_store import store_path
from psychosis_tests.servers.batch_server import BatchServer
from tests.benchmark_runner import BenchmarkRunner
from tests.test_batch import PROMPTS, batched, provider_for, run

pytest_plugins = ["pytester"]

SELECTION = ["-k", "conduit and not control"]  # 2 cases
RUN_TIMEOUT = 300


@pytest.fixture
def double() -> Iterator[BatchServer]:
    with BatchServer() as server:
        yield server


def test_a_create_whose_reply_was_lost_is_adopted_by_its_metadata_not_submitted_again(double: BatchServer, tmp_path: Path) -> None:
    double.state.create_reply = "dropped"  # the batch is created; the run never hears its id
    spec = batched(base_url=double.url, max_retries=1)
    provider = provider_for(spec, double.url, tmp_path)
    answers = run(provider, spec, PROMPTS[:3])
    assert all(not isinstance(a, Exception) and a.text for a in answers), answers
    assert (double.state.batches_created, double.state.lines_received) == (1, 3)
    counters = provider.transport.batch_counters
    assert (counters.submitted, counters.resumed, counters.done) == (0, 1, 1)  # adopted: polled as resumed
    assert kept(tmp_path / "cache.sqlite3") == 0  # every line handed over: the response cache keeps them


def lose_a_create(double: BatchServer, tmp_path: Path) -> str:
    """A run whose one batch is created but whose create reply is lost, its calls failing; the batch's id."""
    before = set(double.state.batches)
    double.state.create_reply = "dropped"
    spec = batched(base_url=double.url)
    lost = run(provider_for(spec, double.url, tmp_path), spec, PROMPTS[:3])
    assert all(isinstance(a, ModelCallError) and "the batch could not be submitted" in str(a) for a in lost), lost
    double.state.create_reply = "sent"
    assert unconfirmed(tmp_path / "cache.sqlite3") == 1
    (created,) = set(double.state.batches) - before
    return created


def create_batches(double: BatchServer, count: int) -> None:
    """Batches of someone else's (empty, with metadata of their own) on the double."""

    async def create() -> None:
        async with openai.AsyncOpenAI(base_url=double.url, api_key="not-needed") as client:
            for n in range(count):
                file = await client.files.create(file=("x.jsonl", b"", "application/jsonl"), purpose="batch")
                await client.batches.create(input_file_id=file.id, endpoint="/v1/chat/completions",
                                            completion_window="24h", metadata={"other": str(n)})  # fmt: skip

    asyncio.run(create())


def kept(cache_path: Path, which: str = "1") -> int:
    """Submissions kept in the batch store that meet `which` (0 while the run has not made it yet)."""
    try:
        with closing(sqlite3.connect(f"file:{store_path(cache_path)}?mode=ro", uri=True)) as db:
            return db.execute(f"SELECT COUNT(*) FROM submissions WHERE {which}").fetchone()[0]
    except sqlite3.OperationalError:  # no file, or no tables yet
        return 0


def unconfirmed(cache_path: Path) -> int:
    return kept(cache_path, "batch_id IS NULL")


def saved_batches(cache_path: Path) -> int:
    return kept(cache_path, "batch_id IS NOT NULL")


def test_the_lookup_pages_through_newer_batches_to_the_submissions_own(double: BatchServer, tmp_path: Path) -> None:
    lose_a_create(double, tmp_path)
    create_batches(double, 5)
    double.state.page_cap = 2  # the submission's batch is on the third page
    spec = batched(base_url=double.url)
    provider = provider_for(spec, double.url, tmp_path)
    answers = run(provider, spec, PROMPTS[:3])
    assert all(not isinstance(a, Exception) and a.text for a in answers), answers
    assert (double.state.batches_created, double.state.lines_received) == (6, 3)
    assert provider.transport.batch_counters.resumed == 1
    assert unconfirmed(tmp_path / "cache.sqlite3") == 0


def test_a_submission_whose_batch_was_never_created_is_submitted_anew_without_listing_older_batches(
    double: BatchServer, tmp_path: Path
) -> None:
    create_batches(double, 5)
    for older in double.state.batches.values():
        older.created_at -= 3600  # an hour before the submission
    lost = lose_a_create(double, tmp_path)
    del double.state.batches[lost]  # as if the run died before its create took effect
    double.state.page_cap = 2
    spec = batched(base_url=double.url)
    answers = run(provider_for(spec, double.url, tmp_path), spec, PROMPTS[:3])
    assert all(not isinstance(a, Exception) and a.text for a in answers), answers
    assert double.state.pages_listed == 1  # the first page showed batches older than the submission
    assert double.state.batches_created == 7 and max(double.state.custom_ids_received.values()) == 2
    assert kept(tmp_path / "cache.sqlite3") == 0


def test_a_provider_that_cannot_list_batches_gets_the_requests_anew_and_the_run_says_so_once(
    double: BatchServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    lose_a_create(double, tmp_path)
    double.state.lists_batches = False
    spec = batched(base_url=double.url)
    with caplog.at_level(logging.WARNING, logger="psychosis_tests.engine.batch_transport"):
        answers = run(provider_for(spec, double.url, tmp_path), spec, PROMPTS[:3])
    assert all(not isinstance(a, Exception) and a.text for a in answers), answers
    assert double.state.batches_created == 2 and max(double.state.custom_ids_received.values()) == 2  # paid twice
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1, said
    assert "cannot be listed (HTTP 404: no such endpoint: GET /v1/batches)" in said[0] and "paid twice" in said[0]
    assert unconfirmed(tmp_path / "cache.sqlite3") == 0


def test_a_provider_that_drops_the_metadata_is_named_once(double: BatchServer, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    double.state.keeps_metadata = False
    spec = batched(base_url=double.url)
    with caplog.at_level(logging.WARNING, logger="psychosis_tests.engine.batch_transport"):
        answers = run(provider_for(spec, double.url, tmp_path), spec, PROMPTS)
    assert all(not isinstance(a, Exception) and a.text for a in answers), answers
    assert double.state.batches_created == 2
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "did not keep the batch's metadata" in said[0], said


# -- a real kill -9 ----------------------------------------------------------------------------
def command(runner: BenchmarkRunner, double: BatchServer, *extra: str) -> list[str]:
    """The benchmark on the reference guardian, judged by a batch judge on the double."""
    judge = {"id": "batch-judge", "model": "judge", "base_url": double.url, "batch": True, "batch_size": 200,
             "batch_flush": 0.05, "batch_poll_max": 0.1}  # fmt: skip
    models = runner.write_models_file([judge])
    options = [f"--models-file={models}", "--model", "reference/guardian", "--judge", "batch-judge", *SELECTION]
    return [sys.executable, "-m", "pytest", *runner.args(*options, *extra)]


def kill_when(runner: BenchmarkRunner, double: BatchServer, ready: Callable[[], bool]) -> None:
    """Start the benchmark in a process group of its own; SIGKILL it once `ready()` holds."""
    killed = subprocess.Popen(command(runner, double), cwd=runner.path, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not ready():
            assert killed.poll() is None, killed.communicate()[0].decode()[-3000:]
            assert time.monotonic() < deadline, "the run never reached the state to be killed in"
            time.sleep(0.02)
    finally:
        os.killpg(killed.pid, signal.SIGKILL)
        killed.communicate(timeout=30)
    assert killed.returncode == -signal.SIGKILL


def run_to_the_end(runner: BenchmarkRunner, double: BatchServer, *extra: str) -> str:
    done = subprocess.run(command(runner, double, *extra), cwd=runner.path, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT, check=False)  # fmt: skip
    assert done.returncode == 0 and "2 passed" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def assert_paid_once(runner: BenchmarkRunner, double: BatchServer) -> None:
    """Every judge request went to the double once, as many as a run never killed sends."""
    received = double.state.custom_ids_received
    assert received and max(received.values()) == 1, received.most_common(3)
    paid = double.state.lines_received
    tmp = runner.path
    run_to_the_end(runner, double, f"--cache-path={tmp / 'fresh.sqlite3'}", f"--report-dir={tmp / 'fresh'}")
    assert double.state.lines_received - paid == paid  # the run never killed paid as many lines


def test_a_run_killed_while_its_batch_is_pending_is_resumed_by_the_next(benchmark_runner: BenchmarkRunner) -> None:
    with BatchServer(delay=60.0) as double:
        kill_when(benchmark_runner, double, lambda: saved_batches(benchmark_runner.cache_path) > 0)
        assert double.state.batches_created >= saved_batches(benchmark_runner.cache_path) >= 1
        double.state.delay = 0.0
        run_to_the_end(benchmark_runner, double)
        assert_paid_once(benchmark_runner, double)


def test_a_run_killed_between_create_and_save_has_its_batch_adopted_by_the_next(benchmark_runner: BenchmarkRunner) -> None:
    with BatchServer(delay=60.0) as double:
        double.state.create_reply = "stalled"  # created, but the run hears nothing until it is killed
        kill_when(benchmark_runner, double, lambda: double.state.batches_created > 0)
        # each created batch's submission is kept without its id (one more may be uploaded, not created)
        assert unconfirmed(benchmark_runner.cache_path) >= double.state.batches_created
        assert saved_batches(benchmark_runner.cache_path) == 0
        double.state.create_reply, double.state.delay = "sent", 0.0
        double.state.released.set()
        run_to_the_end(benchmark_runner, double)
        assert unconfirmed(benchmark_runner.cache_path) == 0
        assert_paid_once(benchmark_runner, double)


def test_a_run_whose_batches_could_be_paid_twice_says_so_in_its_reports(benchmark_runner: BenchmarkRunner) -> None:
    """A provider that drops the batch metadata: the terminal summary and results.json say so once."""
    with BatchServer() as double:
        double.state.keeps_metadata = False
        out = run_to_the_end(benchmark_runner, double)
    (run_dir,) = benchmark_runner.report_dir.iterdir()
    warnings = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))["run"]["transport_warnings"]
    assert len(warnings) == 1 and warnings[0].startswith("'batch-judge': ") and "paid twice" in warnings[0]
    assert out.count("did not keep the batch's metadata") == 1 and "WARNING: 'batch-judge': " in out
    assert "did not keep the batch's metadata" in (run_dir / "summary.md").read_text(encoding="utf-8")
