"""A batch run killed, or cut off, in each window of a submission: nothing is submitted twice.

The windows: before the upload, between the upload and the create, between the create and the
batch id's being saved, while polling (docs/reliability.md, "Batch faults"), and a pending batch
the provider no longer knows when the next run polls it. The in-process tests cut a create's reply
(the double creates the batch and closes the connection) or cancel a run's calls; the others kill
a benchmark run in a process of its own with SIGKILL and run the same command again.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import closing, suppress
from pathlib import Path

import openai
import pytest

from psychosis_tests.common.errors import ModelCallError
from psychosis_tests.engine.batch_store import store_path
from psychosis_tests.engine.batch_transport import METADATA_KEY
from psychosis_tests.inputs.models import ModelSpec
from psychosis_tests.servers.batch_server import BatchServer
from psychosis_tests.servers.reference_chat import APIError
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


def leave_a_pending_batch(double: BatchServer, spec: ModelSpec, tmp_path: Path) -> str:
    """A run that dies with its one batch (of the first three prompts) pending and its id saved; that id."""
    double.state.delay = 60.0

    async def killed() -> None:
        provider = provider_for(spec, double.url, tmp_path)
        calls = asyncio.ensure_future(asyncio.gather(
            *(provider.chat(spec, [{"role": "user", "content": p}], role="judge", call_label="c", conversation=f"c{i}")
              for i, p in enumerate(PROMPTS[:3]))))  # fmt: skip
        while saved_batches(tmp_path / "cache.sqlite3") == 0:
            await asyncio.sleep(0.01)
        calls.cancel()
        with suppress(asyncio.CancelledError):
            await calls
        await provider.aclose()

    asyncio.run(killed())
    double.state.delay = 0.0
    (pending,) = double.state.batches
    return pending


def test_a_pending_batch_the_provider_no_longer_knows_is_named_and_its_requests_submitted_again(
    double: BatchServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spec = batched(base_url=double.url)
    lost = leave_a_pending_batch(double, spec, tmp_path)
    double.state.batches.clear()  # forgotten: a provider's double started afresh, a batch deleted
    provider = provider_for(spec, double.url, tmp_path)
    with caplog.at_level(logging.WARNING, logger="psychosis_tests.engine.batch_transport"):
        answers = run(provider, spec, PROMPTS[:3])
    assert all(not isinstance(a, Exception) and a.text for a in answers), answers
    assert double.state.batches_created == 2 and set(double.state.custom_ids_received.values()) == {2}
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and said == provider.transport.warnings, said
    assert f"batch {lost} is not known to {double.url} (Batch API) (HTTP 404: no such batch: {lost})" in said[0]
    assert "its requests not yet answered are submitted again" in said[0]
    counters = provider.transport.batch_counters
    assert (counters.resumed, counters.submitted, counters.pending) == (1, 1, 0)
    assert kept(tmp_path / "cache.sqlite3") == 0


def test_a_pending_batch_whose_id_now_names_another_submissions_batch_is_submitted_again(
    double: BatchServer, tmp_path: Path
) -> None:
    spec = batched(base_url=double.url)
    lost = leave_a_pending_batch(double, spec, tmp_path)
    double.state.batches.clear()
    create_batches(double, 1)  # a double started afresh hands the old id to someone else's batch
    (other,) = double.state.batches.values()
    other.id, other.metadata = lost, {METADATA_KEY: "another submission"}
    double.state.batches = {lost: other}
    provider = provider_for(spec, double.url, tmp_path)
    answers = run(provider, spec, PROMPTS[:3])
    assert all(not isinstance(a, Exception) and a.text for a in answers), answers
    assert double.state.batches_created == 3 and set(double.state.custom_ids_received.values()) == {2}
    (warning,) = provider.transport.warnings
    assert f"batch {lost} is not known to" in warning and "(its id now names another submission's batch)" in warning
    assert kept(tmp_path / "cache.sqlite3") == 0


def test_requests_whose_batch_is_gone_twice_error_instead_of_being_submitted_a_third_time(
    double: BatchServer, tmp_path: Path
) -> None:
    spec = batched(base_url=double.url)
    leave_a_pending_batch(double, spec, tmp_path)
    double.state.batches.clear()
    double.state.delay = 60.0

    async def forget_the_resubmission() -> None:
        while double.state.batches_created < 2:
            await asyncio.sleep(0.01)
        double.state.batches.clear()

    async def both() -> list:
        provider = provider_for(spec, double.url, tmp_path)
        calls = [provider.chat(spec, [{"role": "user", "content": p}], role="judge", call_label="c", conversation=f"c{i}")
                 for i, p in enumerate(PROMPTS[:3])]  # fmt: skip
        forget = asyncio.ensure_future(forget_the_resubmission())
        results = await asyncio.gather(*calls, return_exceptions=True)
        forget.cancel()
        await provider.aclose()
        return results

    failed = asyncio.run(both())
    assert all(isinstance(f, ModelCallError) for f in failed), failed
    gone_again = "already submitted again after their first batch was gone (not retryable, 1 attempt)"
    assert all(gone_again in str(f) for f in failed), failed
    assert double.state.batches_created == 2
    assert kept(tmp_path / "cache.sqlite3") == 0


def test_a_batch_that_cannot_be_polled_errors_its_calls_and_stays_kept_for_the_next_run(
    double: BatchServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(batch_id: str) -> None:
        raise APIError(403, f"this project may not read {batch_id}")

    monkeypatch.setattr(double.state, "retrieve", refuse)
    spec = batched(base_url=double.url, max_retries=2)
    (failed,) = run(provider_for(spec, double.url, tmp_path), spec, ["hello"])
    assert isinstance(failed, ModelCallError)
    assert "could not be polled (HTTP 403: this project may not read batch_" in str(failed)
    assert "it stays kept, and the next run polls it again (not retryable, 1 attempt)" in str(failed)
    assert double.state.batches_created == 1 and saved_batches(tmp_path / "cache.sqlite3") == 1


# -- a real kill -9 ----------------------------------------------------------------------------
def command(runner: BenchmarkRunner, double: BatchServer, *extra: str, **judge_fields: object) -> list[str]:
    """The benchmark on the reference guardian, judged by a batch judge on the double (`judge_fields` on its entry)."""
    judge = {"id": "batch-judge", "model": "judge", "base_url": double.url, "batch": True, "batch_size": 200,
             "batch_flush": 0.05, "batch_poll_max": 0.1, **judge_fields}  # fmt: skip
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


def run_to_the_end(runner: BenchmarkRunner, double: BatchServer, *extra: str, **judge_fields: object) -> str:
    done = subprocess.run(command(runner, double, *extra, **judge_fields), cwd=runner.path, capture_output=True,
                          text=True, timeout=RUN_TIMEOUT, check=False)  # fmt: skip
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


def test_a_run_killed_while_its_batch_is_pending_whose_batch_the_provider_then_forgets_submits_it_again(
    benchmark_runner: BenchmarkRunner,
) -> None:
    """As the suite's own double does: it starts afresh, empty, on the next run."""
    with BatchServer(delay=60.0) as double:
        kill_when(benchmark_runner, double, lambda: saved_batches(benchmark_runner.cache_path) > 0)
        lost = set(double.state.batches)
        double.state.batches.clear()
        double.state.delay = 0.0
        killed = set(benchmark_runner.run_dirs())
        out = run_to_the_end(benchmark_runner, double)
        assert kept(benchmark_runner.cache_path) == 0
        received = double.state.custom_ids_received
        assert received and max(received.values()) == 2, received.most_common(3)  # a forgotten batch's lines, again
    (run_dir,) = set(benchmark_runner.run_dirs()) - killed
    warnings = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))["run"]["transport_warnings"]
    assert warnings and all("is not known to" in w and w.split()[2] in lost for w in warnings), (warnings, lost)
    assert "WARNING: 'batch-judge': batch batch_" in out


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


def test_the_providers_words_in_a_batch_warning_are_inert_and_mask_the_key_everywhere_a_run_writes(
    benchmark_runner: BenchmarkRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A listing refused with a 401 whose body echoes the key, whole and masked, and an escape code."""
    key = "sk-test-SECRET123"
    monkeypatch.setenv("BATCH_AUDIT_KEY", key)
    with BatchServer() as double:
        creates = itertools.count()
        create = double.state.create

        def create_once_unanswered(*args: object) -> object:
            if next(creates):  # the first create's reply is lost: the run lists the batches to find it
                double.state.create_reply = "sent"
            return create(*args)

        def refuse(limit: int, after: str | None) -> None:
            echoed = f"{key} ({key[:8]}****{key[-4:]})"  # whole, and masked as OpenAI does
            raise APIError(401, f"Incorrect API key provided: {echoed}. \x1b[31mSee your keys.")

        double.state.create_reply = "dropped"
        monkeypatch.setattr(double.state, "create", create_once_unanswered)
        monkeypatch.setattr(double.state, "listing", refuse)
        out = run_to_the_end(benchmark_runner, double, api_key_env="BATCH_AUDIT_KEY")
    (run_dir,) = benchmark_runner.report_dir.iterdir()
    warnings = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))["run"]["transport_warnings"]
    assert len(warnings) == 1, warnings
    assert "cannot be listed (HTTP 401: Incorrect API key provided: [redacted] ([redacted])" in warnings[0]
    assert "\\x1b[31mSee your keys." in warnings[0] and "cannot be listed" in out
    written = [path for path in benchmark_runner.path.rglob("*") if path.is_file()]
    assert run_dir / "summary.md" in written and run_dir / "summary.json" in written
    for text in [out.encode(), *(path.read_bytes() for path in written)]:
        assert b"SECRET" not in text and b"sk-test" not in text and b"\x1b[31m" not in text
