"""`python -m psychosis_tests calibrate` and `pytest -m judge_calibration`, end to end, offline.

Runs are subprocesses, as a user types them, against a small hand-labelled set
(calibration_fixtures.py) kept in folders whose names contain spaces.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from calibration_fixtures import write_fixture_set
from sklearn.metrics import cohen_kappa_score

REPO = Path(__file__).resolve().parents[1]
BENCHMARK = REPO / "psychosis_tests" / "test_benchmark.py"
CALIBRATION_TESTS = REPO / "psychosis_tests" / "test_judge_calibration.py"
FEW_RESAMPLES = ["--bootstrap-resamples", "50"]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PSYCHOSIS_")} | {"PSYCHOSIS_PROGRESS_INTERVAL": "0"}


def _calibrate(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "psychosis_tests", "calibrate", "--report-dir", str(tmp_path / "my reports"), *args],
        cwd=REPO, capture_output=True, text=True, env=_env(), timeout=300,
    )


def _result(tmp_path: Path) -> dict:
    (path,) = sorted((tmp_path / "my reports").glob("*-calibration/calibration.json"))[-1:]
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture
def fixture_set(tmp_path: Path) -> Path:
    return write_fixture_set(tmp_path / "labelled set")


def test_a_judge_that_agrees_passes_and_the_run_folder_has_every_file(tmp_path: Path, fixture_set: Path) -> None:
    done = _calibrate(tmp_path, "--judge", "reference/judge", "--calibration", str(fixture_set), *FEW_RESAMPLES)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASSED the calibration gate" in done.stdout
    result = _result(tmp_path)
    assert result["passed"] and result["items"] == result["judged_items"] == 36
    assert [(m["metric"], m["kappa"], m["exact_agreement"]) for m in result["metrics"]] == [
        ("dcs", 1.0, 1.0), ("hes", 1.0, 1.0), ("sis", 1.0, 1.0)
    ]
    run_dir = next((tmp_path / "my reports").glob("*-calibration"))
    assert {"calibration.json", "calibration.md", "answers.jsonl"} <= {p.name for p in run_dir.iterdir()}
    assert {g["by"] for g in result["breakdown"]} == {"archetype", "variant", "phase"}
    assert result["fingerprint"]["judges"][0]["judge_mode"] == "combined"


def test_an_always_validating_judge_fails_the_gate_with_kappa_zero(tmp_path: Path, fixture_set: Path) -> None:
    done = _calibrate(tmp_path, "--judge", "reference/judge-always-validating", "--calibration", str(fixture_set), *FEW_RESAMPLES)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAILED the calibration gate" in done.stdout
    result = _result(tmp_path)
    assert [m["kappa"] for m in result["metrics"]] == [0.0, 0.0, 0.0]
    assert len(result["worst"]) == 10 and result["worst"][0]["rationale"].startswith("judge-always-validating")
    markdown = next((tmp_path / "my reports").glob("*-calibration/calibration.md")).read_text(encoding="utf-8")
    assert "| DCS | 36 | 0.00 |" in markdown and "**FAIL**" in markdown


def test_the_shipped_set_scores_with_the_reference_judge(tmp_path: Path) -> None:
    done = _calibrate(tmp_path, "--judge", "reference/judge", *FEW_RESAMPLES)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    result = _result(tmp_path)
    assert result["items"] >= 240 and not result["errors"]


def test_bad_input_is_exit_status_two_naming_the_problem(tmp_path: Path) -> None:
    done = _calibrate(tmp_path, "--judge", "reference/judge", "--calibration", str(tmp_path / "no such set"))
    assert done.returncode == 2
    assert "calibration set not found" in done.stderr
    unknown = _calibrate(tmp_path, "--judge", "reference/nobody")
    assert unknown.returncode == 2 and "unknown model id 'reference/nobody'" in unknown.stderr


def test_a_panel_calibrates_and_reports_its_judges_agreement(tmp_path: Path, fixture_set: Path) -> None:
    panel = ["--judge", "reference/judge", "--judge", "reference/judge-strict", "--judge", "reference/judge-lenient"]
    done = _calibrate(tmp_path, *panel, "--calibration", str(fixture_set), *FEW_RESAMPLES)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    result = _result(tmp_path)
    assert result["judge"] == "reference/judge+reference/judge-strict+reference/judge-lenient"
    assert {r["metric"] for r in result["panel_agreement"]} == {"dcs", "hes", "sis"}
    assert all(r["raters"] == 3 for r in result["panel_agreement"])
    # strict and lenient read 'I can't help with that part' (a refusal without consequence) two levels apart
    hes = next(r for r in result["panel_agreement"] if r["metric"] == "hes")
    assert hes["disagreeing_items"] > 0


def test_judge_repeats_use_distinct_cached_answers_and_report_self_consistency(tmp_path: Path, fixture_set: Path) -> None:
    cache = tmp_path / "the cache.sqlite3"
    args = ["--judge", "reference/judge", "--calibration", str(fixture_set), "--cache-path", str(cache), *FEW_RESAMPLES]
    done = _calibrate(tmp_path, *args, "--judge-repeats", "3")
    assert done.returncode == 0, done.stdout + done.stderr
    result = _result(tmp_path)
    assert result["repeats"] == 3
    assert [(r["metric"], r["raters"], r["disagreeing_items"]) for r in result["self_consistency"]] == [
        ("dcs", 3, 0), ("hes", 3, 0), ("sis", 3, 0)
    ]
    with sqlite3.connect(cache) as db:
        assert db.execute("SELECT COUNT(*) FROM responses").fetchone()[0] == 36 * 3
    replayed = _calibrate(tmp_path, *args, "--judge-repeats", "3", "--cache-mode", "replay")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr


def test_per_metric_mode_asks_once_per_metric_and_changes_the_fingerprint(tmp_path: Path, fixture_set: Path) -> None:
    models = tmp_path / "my models.yaml"
    models.write_text(yaml.safe_dump({"models": [{"id": "reference/judge", "model": "judge", "judge_mode": "per-metric"}]}))
    cache = tmp_path / "per metric.sqlite3"
    done = _calibrate(
        tmp_path, "--judge", "reference/judge", "--models-file", str(models), "--calibration", str(fixture_set),
        "--cache-path", str(cache), *FEW_RESAMPLES,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result = _result(tmp_path)
    assert result["fingerprint"]["judges"][0]["judge_mode"] == "per-metric"
    with sqlite3.connect(cache) as db:  # turns 4-6: DCS only; turns 7-12: three calls
        assert db.execute("SELECT COUNT(*) FROM responses").fetchone()[0] == 2 * (3 * 2 * 1 + 6 * 2 * 3)


def _bench(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", str(BENCHMARK), "-p", "no:cacheprovider", f"--report-dir={tmp_path / 'my reports'}",
         "--model=reference/guardian", "-k", "conduit-explicit", *args],
        cwd=REPO, capture_output=True, text=True, env=_env(), timeout=300,
    )


def test_a_benchmark_run_names_its_judges_calibration_or_says_it_has_none(tmp_path: Path, fixture_set: Path) -> None:
    before = _bench(tmp_path, "--judge=reference/judge")
    assert before.returncode == 0, before.stdout
    assert "judge not calibrated" in before.stdout
    refused = _bench(tmp_path, "--judge=reference/judge", "--require-calibrated-judge")
    assert refused.returncode == 4
    assert "--require-calibrated-judge: judge not calibrated" in refused.stderr
    calibrated = _calibrate(tmp_path, "--judge", "reference/judge", "--calibration", str(fixture_set), *FEW_RESAMPLES)
    assert calibrated.returncode == 0
    after = _bench(tmp_path, "--judge=reference/judge", "--require-calibrated-judge")
    assert after.returncode == 0, after.stdout + after.stderr
    assert after.stdout.count("judge calibrated: passes the calibration gate (DCS kappa 1.00") == 2  # header and summary
    summaries = [p.read_text(encoding="utf-8") for p in (tmp_path / "my reports").glob("*/summary.md")]
    assert sum("judge calibrated: passes the calibration gate" in text for text in summaries) == 1
    assert sum("judge not calibrated" in text for text in summaries) == 1
    other = _bench(tmp_path, "--judge=reference/judge-strict", "--require-calibrated-judge")
    assert other.returncode == 4  # another judge's fingerprint: not calibrated


def test_pytest_mark_judge_calibration_runs_the_gate_as_tests(tmp_path: Path, fixture_set: Path) -> None:
    def run(judge: str, *extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pytest", str(REPO / "psychosis_tests"), "-p", "no:cacheprovider", "-m", "judge_calibration",
             "--judge", judge, "--calibration", str(fixture_set), f"--report-dir={tmp_path / 'my reports'}", *extra],
            cwd=REPO, capture_output=True, text=True, env=_env(), timeout=300,
        )

    good = run("reference/judge", f"--alluredir={tmp_path / 'allure results'}")
    assert good.returncode == 0, good.stdout
    assert "4 passed" in good.stdout and "deselected" in good.stdout
    allure = [json.loads(p.read_text()) for p in (tmp_path / "allure results").glob("*-result.json")]
    assert [r["status"] for r in allure if r["name"] == "judge calibration: reference/judge"] == ["passed"]
    assert len(allure) == 5  # the four tests and the calibration result
    bad = run("reference/judge-always-validating", "-n", "2")
    assert bad.returncode == 1
    assert "3 failed, 1 passed" in bad.stdout
    assert "DCS: kappa 0.0 " in bad.stdout


def test_several_raters_give_their_agreement_and_the_judge_is_scored_against_each(tmp_path: Path, fixture_set: Path) -> None:
    author, second = [], []
    for path in sorted(fixture_set.glob("*.yaml")):
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
        for index, item in enumerate(document["items"]):
            label = dict(item["labels"][0], rater="second")
            if index == 0 and path.name.startswith("conduit-explicit"):
                label["dcs"] = 2 - label["dcs"]  # the second rater disagrees once, by two levels
            item["labels"].append(label)
            author.append(item["labels"][0]["dcs"])
            second.append(label["dcs"])
        path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    done = _calibrate(tmp_path, "--judge", "reference/judge", "--calibration", str(fixture_set), *FEW_RESAMPLES)
    assert "raters among themselves, DCS" in done.stdout
    result = _result(tmp_path)
    dcs = next(r for r in result["inter_rater"] if r["metric"] == "dcs")
    assert (dcs["raters"], dcs["items"], dcs["disagreeing_items"]) == (2, 36, 1)
    assert dcs["kappa"] == pytest.approx(cohen_kappa_score(author, second, weights="quadratic"))
    per_rater = {(r["rater"], r["metric"]): r for r in result["per_rater"]}
    assert per_rater[("fixture", "dcs")]["kappa"] == 1.0
    assert per_rater[("second", "dcs")]["kappa"] < 1.0


def test_a_long_calibration_prints_progress_lines(tmp_path: Path, fixture_set: Path) -> None:
    from psychosis_tests.engine.calibration_run import judge_calibration_set
    from psychosis_tests.engine.panel import JudgePanel
    from psychosis_tests.inputs.calibration import load_calibration
    from psychosis_tests.inputs.models import builtin_models
    from psychosis_tests.inputs.scenarios import load_scenarios

    items = load_calibration(fixture_set, {s.id: s for s in load_scenarios(REPO / "scenarios")}).items
    lines: list[str] = []
    judged = judge_calibration_set(
        JudgePanel((builtin_models()["reference/judge"],)), items, cache_mode="off",
        cache_path=tmp_path / "unused.sqlite3", progress=lines.append, progress_interval=0.001,
    )
    assert len(judged) == len(items) == 36 and not any(j.error for j in judged)
    assert lines, "a progress line every millisecond, and the run takes longer than that"
    assert all(line.startswith("[psychosis-bench] calibrate: ") for line in lines)
    counts = [int(line.split(": ", 1)[1].split("/", 1)[0]) for line in lines]
    assert counts == sorted(counts) and all(0 <= c <= 36 for c in counts)
    assert all("/36 items judged, 0 errors, " in line for line in lines)
