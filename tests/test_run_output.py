"""What a run shows: each case's duration, the terminal table and summaries, the Allure result."""

from __future__ import annotations

import csv
import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from psychosis_tests.engine.panel import JudgePanel
from psychosis_tests.engine.plan import Plan
from psychosis_tests.inputs.models import builtin_models
from psychosis_tests.inputs.settings import resolve
from psychosis_tests.servers.reference_server import ReferenceServer
from tests.benchmark_runner import REPO, BenchmarkRunner

pytest_plugins = ["pytester"]


@pytest.fixture
def slow_server() -> Iterator[ReferenceServer]:
    with ReferenceServer(latency=0.05) as server:
        yield server


def _case_seconds(run_dir: Path) -> dict[str, float]:
    return {
        f"{c['model']}-{c['scenario']}": c["seconds"]
        for c in (json.loads(p.read_text()) for p in (run_dir / "cases").glob("*.json"))
    }


def test_a_case_lasts_as_long_as_its_conversation(benchmark_runner: BenchmarkRunner, slow_server: ReferenceServer) -> None:
    path = benchmark_runner.path
    entries = [{"id": "slow", "model": "guardian"}, {"id": "slow-judge", "model": "judge"}]
    models = benchmark_runner.write_models_file([{**e, "base_url": slow_server.url} for e in entries])
    result = benchmark_runner.run(
        f"--models-file={models}", "--model", "slow", "--judge", "slow-judge", "-k", "conduit and not control",
        "--durations=0", "--durations-min=0", f"--junitxml={path / 'junit.xml'}", f"--alluredir={path / 'allure'}",
    )  # fmt: skip
    result.assert_outcomes(passed=2)
    seconds = _case_seconds(benchmark_runner.only_run_dir())
    # 12 replies one after another, 50 ms each at the least (verdicts overlap the next reply).
    assert all(s > 0.55 for s in seconds.values()), seconds
    # Both conversations ran at once: the second test found its result ready, yet lasts as long.
    junit = {
        case.get("name").removeprefix("test_case[").removesuffix("]"): float(case.get("time"))
        for case in ET.parse(path / "junit.xml").getroot().iter("testcase")
    }
    for case, wall in seconds.items():
        phases = {
            when: float(m.group(1))
            for when in ("setup", "call", "teardown")
            if (m := re.search(rf"^(\d+\.\d+)s {when} +\S+::test_case\[{re.escape(case)}\]$", result.stdout.str(), re.M))
        }
        assert abs(phases["call"] - wall) < 0.01, (case, phases, wall)
        assert phases["setup"] < 0.5, (case, phases)  # its wait for the result is not its time
        # junit adds the phases; teardown draws the Allure attachments.
        assert abs(junit[case] - sum(phases.values())) < 0.02, (case, phases, junit[case])
    allure = [json.loads(p.read_text()) for p in (path / "allure").glob("*-result.json")]
    cases = {next(p["value"].strip("'") for p in r["parameters"] if p["name"] == "scenario"): r for r in allure if r["parameters"][0]["name"] == "model"}
    assert len(cases) == 2
    for scenario, found in cases.items():
        assert abs((found["stop"] - found["start"]) / 1000 - seconds[f"slow-{scenario}"]) < 0.01
        assert [p["name"] for p in found["parameters"]] == ["model", "scenario", "repeats", "judge"]  # no CaseKey(...)


def test_table_keeps_an_errored_model_and_shows_intervals_with_repeats(benchmark_runner: BenchmarkRunner) -> None:
    result = benchmark_runner.run(
        "--model", "reference/noisy", "--model", "reference/fail-500", "--judge", "reference/judge",
        "-k", "conduit-explicit", "--repeats", "3",
    )  # fmt: skip
    assert any(line.startswith("model ") for line in result.outlines), result.outlines + result.errlines
    table = result.outlines[result.outlines.index(next(l for l in result.outlines if l.startswith("model "))) :]
    noisy = next(line for line in table if line.startswith("reference/noisy "))
    failing = next(line for line in table if line.startswith("reference/fail-500 "))
    assert re.search(r"^reference/fail-500 +0 +0 +1 +n/a +n/a +n/a +n/a$", failing)
    assert len(re.findall(r"\d\.\d\d ± \d\.\d\d \[\d\.\d\d, \d\.\d\d\]", noisy)) == 3
    assert any("95% bootstrap interval of the mean over the model's conversations (3 per case)" in line for line in table)
    assert any("not an interval" in line for line in table)
    run_dir = benchmark_runner.only_run_dir()
    markdown = (run_dir / "summary.md").read_text()
    assert "95% bootstrap interval" in markdown and re.search(r"\| `reference/noisy` \|.*\[\d\.\d\d, \d\.\d\d\] \|", markdown)
    rows = list(csv.DictReader((run_dir / "summary.csv").open()))
    noisy_row = next(r for r in rows if r["model"] == "reference/noisy")
    assert float(noisy_row["dcs_phase3_low"]) <= float(noisy_row["dcs_phase3"]) <= float(noisy_row["dcs_phase3_high"])
    summary = json.loads((run_dir / "summary.json").read_text())
    assert {r["model"] for r in summary["statistics"]["per_model_interval"]} == {"reference/noisy"}
    # The errored case: a short paragraph (case, model at its URL, turn, cause, what to do), no traceback.
    start = result.outlines.index(next(l for l in result.outlines if "ERROR at setup of test_case[reference/fail-500" in l))
    paragraph = result.outlines[start + 1 : start + 3]
    assert re.match(
        r"ModelCallError: reference/fail-500 on conduit-explicit could not be scored: reference/fail-500 conduit-explicit "
        r"repeat \d turn 1: 'reference/fail-500' at http://127\.0\.0\.1:\d+/v1 failed: HTTP 500",
        paragraph[0],
    )
    assert paragraph[1].startswith("  Check that the endpoint is up")
    assert result.outlines[start + 3].startswith(("=", "_"))  # the next section: nothing more


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["n0", "n2"])
def test_junit_headline_of_an_errored_case_says_why(benchmark_runner: BenchmarkRunner, xdist: list[str]) -> None:
    """CI pages show junit's `message` as the case's headline: it must hold the cause, not only
    "could not be scored" with the cause cut off into the element text."""
    junit = benchmark_runner.path / "junit.xml"
    result = benchmark_runner.run("--model", "reference/guardian", "--judge", "reference/judge-null", "-k", "conduit-explicit",
                                  f"--junitxml={junit}", *xdist)  # fmt: skip
    result.assert_outcomes(errors=1)
    (error,) = ET.parse(junit).getroot().iter("error")
    message = error.get("message")
    assert "VerdictError: reference/guardian on conduit-explicit could not be scored: " in message
    assert re.search(r"turn \d+: the judge 'reference/judge-null' gave no valid verdict in 3 attempts \(attempt 1: ", message), message
    assert "The judge's answers are in the case file" in error.text  # the advice, kept in the full report


def test_the_offline_run_says_its_target_is_the_toy_model_too(tmp_path: Path) -> None:
    settings = resolve({}.get, {}, REPO)
    registry = builtin_models()
    plan = Plan(settings, [registry["local"]], JudgePanel((registry["local"],)), {}, None)  # type: ignore[arg-type]
    assert "NOT a basis for release decisions" in plan.judge_warning
    assert "the target is that same 135M model" in plan.judge_warning and "expected result" in plan.judge_warning
    other = Plan(settings, [registry["reference/guardian"]], JudgePanel((registry["local"],)), {}, None)  # type: ignore[arg-type]
    assert "NOT a basis" in other.judge_warning and "target" not in other.judge_warning


def test_the_header_names_the_cascade_that_scores_as_the_run_files_do(benchmark_runner: BenchmarkRunner) -> None:
    cascade = ["--model", "reference/guardian", "--judge", "trained", "--escalate-to", "reference/judge", "-k", "conduit-explicit"]
    estimate = benchmark_runner.run(*cascade, "--estimate")
    assert estimate.ret == 0, estimate.outlines + estimate.errlines
    estimate.stdout.fnmatch_lines(["psychosis-bench *: targets reference/guardian; judge trained>reference/judge; repeats 1;*"])
    result = benchmark_runner.run(*cascade)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["psychosis-bench *: targets reference/guardian; judge trained>reference/judge; repeats 1;*"])
    run_dir = benchmark_runner.only_run_dir()
    assert json.loads((run_dir / "results.json").read_text(encoding="utf-8"))["run"]["judge"] == "trained>reference/judge"
    assert "Judge `trained>reference/judge`" in (run_dir / "summary.md").read_text(encoding="utf-8")
