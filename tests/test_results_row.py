"""A case's row of results.json: built once, from the case's typed record, the same however the
run was driven (pytest with or without xdist, or a script through `run_without_pytest`); pinned
for a fixed reference run; and found by what the session collected, never by parsing node ids.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from benchmarks.same_outputs import Side, differences
from psychosis_tests.common.errors import ConfigError
from psychosis_tests.engine.plan import CaseKey
from psychosis_tests.inputs.settings import RunSettings, resolve
from psychosis_tests.servers.reference_server import ReferenceServer
from psychosis_tests.sessions.benchmark import run_without_pytest
from tests.benchmark_runner import REPO, SCENARIOS, THRESHOLDS, BenchmarkRunner

pytest_plugins = ["pytester"]

PINNED = Path(__file__).parent / "pinned" / "results-row-sycophant-conduit-explicit.json"
"""The row of reference/sycophant on conduit-explicit judged by reference/judge (one repeat, seed
as configured; the judge scores in-process, so its usage is 0 calls): what the reference models, the scoring and the row builder give today. A change
to any of them that alters the row shows here; if it is meant, write the new row into the file."""
TWO_CASES = ["--model", "reference/sycophant", "--model", "reference/guardian", "--judge", "reference/judge", "-k", "conduit-explicit"]


def script_settings(tmp_path: Path, *models: str) -> RunSettings:
    given = {
        "model": list(models),
        "judge": ["reference/judge"],
        "report_dir": str(tmp_path / "script-reports"),
        "cache_path": str(tmp_path / "script-cache.sqlite3"),
        "scenarios": str(SCENARIOS),
        "thresholds": str(THRESHOLDS),
    }
    return resolve(given.get, {}, REPO, cwd=tmp_path)


def rows(run_dir: Path) -> list[dict]:
    return json.loads((run_dir / "results.json").read_text(encoding="utf-8"))["cases"]


def without_nodeid(cases: list[dict]) -> list[dict]:
    return sorted(({k: v for k, v in c.items() if k != "nodeid"} for c in cases), key=lambda c: (c["model"], c["scenario"]))


def test_pytest_with_and_without_xdist_and_a_script_write_the_same_rows(benchmark_runner: BenchmarkRunner, tmp_path: Path) -> None:
    found = {}
    for name, xdist in (("n0", []), ("n2", ["-n", "2"])):
        benchmark_runner.cache_path = benchmark_runner.path / f"cache-{name}.sqlite3"
        result, found[name] = benchmark_runner.run_creating_one_folder(*TWO_CASES, *xdist)
        result.assert_outcomes(passed=1, failed=1)
    keys = [CaseKey(model, "conduit-explicit") for model in ("reference/sycophant", "reference/guardian")]
    found["script"] = run_without_pytest(script_settings(tmp_path, "reference/sycophant", "reference/guardian"), keys)

    n0, n2, script = (rows(found[name]) for name in ("n0", "n2", "script"))
    assert {c["outcome"] for c in n0} == {"passed", "failed"}
    assert n0 == n2  # node ids included: under xdist the controller knows each case's
    assert all(c["nodeid"].endswith(f"::test_case[{c['model']}-{c['scenario']}]") for c in n0)
    assert without_nodeid(script) == without_nodeid(n0) and {c["nodeid"] for c in script} == {""}
    # The script's failure text is the benchmark test's: the same rule, the same message.
    failed = next(c for c in script if c["outcome"] == "failed")
    assert "threshold breach(es) for reference/sycophant on conduit-explicit:" in failed["failure"]
    # summary.csv holds no node id: the same bytes, whoever drove the run.
    assert (found["script"] / "summary.csv").read_bytes() == (found["n0"] / "summary.csv").read_bytes()
    assert (found["script"] / "summary.md").is_file() and (found["script"] / "summary.json").is_file()


def test_the_row_of_a_fixed_reference_run_is_pinned(tmp_path: Path) -> None:
    run_dir = run_without_pytest(script_settings(tmp_path, "reference/sycophant"), [CaseKey("reference/sycophant", "conduit-explicit")])
    (row,) = rows(run_dir)
    assert row == json.loads(PINNED.read_text(encoding="utf-8"))


def test_a_script_run_records_a_case_that_could_not_be_scored(tmp_path: Path) -> None:
    run_dir = run_without_pytest(script_settings(tmp_path, "reference/fail-500"), [CaseKey("reference/fail-500", "conduit-explicit")])
    (row,) = rows(run_dir)
    assert row["outcome"] == "error" and "HTTP 500" in row["error"] and row["phases"] == [] and row["turns"] == []
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    assert [c["outcome"] for c in summary["cases"]] == ["error"]
    assert "HTTP 500" in (run_dir / "summary.csv").read_text(encoding="utf-8")


def test_a_case_whose_node_id_pytest_escapes_is_found_under_xdist(
    benchmark_runner: BenchmarkRunner, loopback: ReferenceServer
) -> None:
    """pytest writes a non-ASCII id escaped into the node id (`caf\\xe9`): a case parsed back out of
    it would not be found, and its test would wait for a case the controller never started."""
    models = benchmark_runner.write_models_file([{"id": "gardien-café", "model": "guardian", "base_url": loopback.url}])
    result, run_dir = benchmark_runner.run_creating_one_folder(
        f"--models-file={models}", "--model", "gardien-café", "--judge", "reference/judge", "-k", "conduit-explicit", "-n", "2"
    )
    result.assert_outcomes(passed=1)
    (row,) = rows(run_dir)
    assert (row["model"], row["outcome"]) == ("gardien-café", "passed")
    assert "\\xe9" in row["nodeid"] and row["phases"]
    assert not list(run_dir.glob("collected-*"))  # the workers' collection files are read and gone


def test_two_replays_of_a_recorded_run_leave_the_same_files(benchmark_runner: BenchmarkRunner) -> None:
    """The comparison that shows a change altered no output (benchmarks/same_outputs.py): two
    replays of one recorded run are the same, run files and Allure results alike, one without
    xdist and one with; an edited verdict is found."""
    benchmark_runner.run_creating_one_folder(*TWO_CASES)
    found = []
    for name, xdist in (("n0", []), ("n2", ["-n", "2"])):
        allure = benchmark_runner.path / f"allure-{name}"
        _, run_dir = benchmark_runner.run_creating_one_folder(*TWO_CASES, "--cache-mode", "replay", f"--alluredir={allure}", *xdist)
        found.append(Side(run_dir, allure))
    first, second = found
    assert first.run_dir.name != second.run_dir.name
    compared: list[str] = []
    assert differences(first, second, compared) == []
    assert {"results.json", "summary.json", "summary.csv", "summary.md"} <= set(compared)
    assert sum(name.startswith("result ") for name in compared) == 2  # the two cases
    edited = second.run_dir / "results.json"
    results = json.loads(edited.read_text(encoding="utf-8"))
    results["cases"][0]["turns"][5]["dcs"] = 1 - results["cases"][0]["turns"][5]["dcs"]
    edited.write_text(json.dumps(results, indent=2), encoding="utf-8")
    (changed,) = differences(first, second)
    assert changed.startswith("--- A results.json") and '"dcs"' in changed


def test_the_engine_given_no_case_refuses_and_writes_no_run_folder(tmp_path: Path) -> None:
    """pytest selecting no case writes no run folder; neither does the engine given none."""
    settings = script_settings(tmp_path, "reference/guardian")
    with pytest.raises(ValueError, match="no case given"):
        run_without_pytest(settings, [])
    assert not settings.report_dir.exists() or not any(settings.report_dir.iterdir())


def test_a_script_naming_a_case_outside_its_plan_is_refused_before_any_call(tmp_path: Path) -> None:
    """Such a key was run (its case errored obscurely), then writing results.json raised a bare KeyError."""
    settings = script_settings(tmp_path, "reference/guardian")
    with pytest.raises(ConfigError, match="no-such-scenario"):
        run_without_pytest(settings, [CaseKey("reference/guardian", "conduit-explicit"), CaseKey("reference/guardian", "no-such-scenario")])
    assert not settings.report_dir.exists() or not any(settings.report_dir.iterdir())
