"""Progress lines: an ETA from the calls that reached a model, and lines that do not break up
pytest's own output."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from psychosis_tests.engine.progress import ETA_AFTER_CALLS, format_line
from psychosis_tests.servers.reference_server import ReferenceServer
from tests.benchmark_runner import BenchmarkRunner

pytest_plugins = ["pytester"]


def test_eta_counts_only_calls_that_reached_a_model() -> None:
    # 60 of 100 calls done in 10 s, 40 of them cache hits: 20 real calls in 10 s, 40 to go.
    counts = {"calls_done": 60, "calls_total": 100, "cache_hits": 40, "conversations_total": 5}
    assert format_line(counts, 10.0).endswith("10s elapsed, ETA 20s")
    # Only cache hits so far: no pace to go by yet.
    assert "ETA" not in format_line({"calls_done": 30, "calls_total": 100, "cache_hits": 30}, 5.0)
    assert format_line({"calls_done": 20, "calls_total": 100}, 10.0).endswith("ETA 40s")


def test_no_eta_until_enough_calls_have_answered() -> None:
    # The first calls start and answer together: 5 calls in 1 s would promise 19 s for 100.
    assert format_line({"calls_done": 5, "calls_total": 100}, 1.0).endswith(
        f"1s elapsed, ETA after {ETA_AFTER_CALLS} model calls (5 so far)"
    )
    # Cache hits are not model calls: 30 done, 25 of them cached, is still 5 answered.
    assert "ETA after" in format_line({"calls_done": 30, "calls_total": 100, "cache_hits": 25}, 1.0)
    just_enough = {"calls_done": ETA_AFTER_CALLS, "calls_total": 2 * ETA_AFTER_CALLS}
    assert format_line(just_enough, 10.0).endswith("10s elapsed, ETA 10s")


def test_a_run_too_small_for_an_eta_promises_none() -> None:
    # One scenario on the embedded model is 12 calls: "ETA after 20 model calls" would never come.
    assert format_line({"calls_done": 7, "calls_total": 12}, 11.0).endswith("11s elapsed")
    # Cache hits count against it: 40 calls of which 25 answered from the cache leave 15 to make.
    assert "ETA" not in format_line({"calls_done": 30, "calls_total": 40, "cache_hits": 25}, 1.0)


@pytest.fixture
def slow_server() -> Iterator[ReferenceServer]:
    with ReferenceServer(latency=0.04) as server:
        yield server


def test_progress_lines_do_not_make_pytest_repeat_the_file_name(
    benchmark_runner: BenchmarkRunner, slow_server: ReferenceServer
) -> None:
    models = benchmark_runner.write_models_file(
        [
            {"id": "slow", "model": "guardian", "base_url": slow_server.url, "max_concurrency": 1},
            {"id": "slow-judge", "model": "judge", "base_url": slow_server.url, "max_concurrency": 1},
        ]
    )
    result = benchmark_runner.run(
        f"--models-file={models}", "--model", "slow", "--judge", "slow-judge",
        "-k", "(conduit or turing) and not control",
        "--progress-interval", "0.1",
    )  # fmt: skip
    result.assert_outcomes(passed=4)
    progress = [line for line in result.outlines if line.startswith("[psychosis-bench] ")]
    assert len(progress) >= 3
    assert len([line for line in result.outlines if "test_benchmark.py" in line]) == 1, result.outlines
    between = result.outlines[result.outlines.index(progress[0]) : result.outlines.index(progress[-1])]
    assert "" not in [line.strip() for line in between]
    results = [m.group(1) for line in result.outlines if (m := re.match(r"^(?:\S*test_benchmark\.py )?(\.+) *(\[ *\d+%\])?$", line))]
    assert "".join(results) == "...." and len(results) > 1, result.outlines  # results after progress lines, bare
