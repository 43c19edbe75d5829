"""A run judged by a cascade says what it escalated and what it saved; other runs say nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.benchmark_runner import BenchmarkRunner
from psychosis_tests.servers.reference_server import ReferenceServer

pytest_plugins = ["pytester"]


def test_a_cascade_run_reports_its_escalations_and_savings(benchmark_runner: BenchmarkRunner, loopback: ReferenceServer) -> None:
    models = benchmark_runner.write_models_file([
        {"id": "priced-judge", "model": "judge", "base_url": loopback.url, "price": {"input_per_mtok": 2.5, "output_per_mtok": 10}},
    ])  # fmt: skip
    result, run_dir = benchmark_runner.run_creating_one_folder(
        # reference/mixed sits on the phase limits, so some doubtful turns decide their case
        f"--models-file={models}", "--model=reference/mixed", "--judge=trained", "--escalate-to=priced-judge",
        "--escalate-threshold=0.9", "-k", "conduit",
    )  # fmt: skip
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    found = summary["escalation"]
    verdicts = [
        turn["verdict"]
        for case_file in (run_dir / "cases").glob("*.json")
        for transcript in json.loads(case_file.read_text(encoding="utf-8"))["transcripts"]
        for turn in transcript["turns"]
        if turn["verdict"] is not None
    ]
    escalated = [v for v in verdicts if v.get("escalated")]
    assert 0 < len(escalated) < len(verdicts)  # some turns each way, or the test shows nothing
    assert found["judged_turns"] == len(verdicts) and found["escalated_turns"] == len(escalated)
    assert found["rate"] == round(len(escalated) / len(verdicts), 6)
    # One call per escalated turn here, so the turns the trained judge kept saved one call each.
    assert loopback.requests_for("judge") == found["escalation_calls"] == len(escalated)
    assert found["calls_saved"] == len(verdicts) - len(escalated)
    judge_row = next(r for r in summary["usage"] if r["role"] == "judge")
    per_turn = judge_row["cost_with_cache_hits_usd"] / len(escalated)
    assert abs(found["cost_saved_usd"] - per_turn * found["calls_saved"]) < 1e-5 and found["cost_saved_usd"] > 0
    line = f"cascade trained>priced-judge: escalated {len(escalated)} of {len(verdicts)} judged turns"
    assert any(line in out for out in result.outlines)
    assert line in (run_dir / "summary.md").read_text(encoding="utf-8")


def test_a_run_without_a_cascade_has_no_escalation_figures(benchmark_runner: BenchmarkRunner) -> None:
    result, run_dir = benchmark_runner.run_creating_one_folder("--model=reference/sycophant", "--judge=trained", "-k", "conduit-explicit")
    assert "escalation" not in json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    assert not any("escalated" in out for out in result.outlines)


def _priced_judges(benchmark_runner: BenchmarkRunner, loopback: ReferenceServer, second: dict) -> Path:
    """A models file with `priced-judge` and `second`, both on the loopback server at $2.50/$10 per million tokens."""
    price = {"input_per_mtok": 2.5, "output_per_mtok": 10}
    judges = [{"id": "priced-judge", "model": "judge"}, second]
    return benchmark_runner.write_models_file([{**j, "base_url": loopback.url, "price": price} for j in judges])


def test_a_cascade_that_escalated_nothing_counts_the_calls_saved_and_says_the_rest_is_unknown(
    benchmark_runner: BenchmarkRunner, loopback: ReferenceServer
) -> None:
    models = _priced_judges(benchmark_runner, loopback, {"id": "per-metric-judge", "model": "judge", "judge_mode": "per-metric"})
    result, run_dir = benchmark_runner.run_creating_one_folder(
        # the guardian's turns are clear at 0.1: none is doubtful enough to escalate
        f"--models-file={models}", "--model=reference/guardian", "--judge=trained", "--escalate-to=priced-judge",
        "--escalate-to=per-metric-judge", "--escalate-threshold=0.1", "-k", "conduit-explicit",
    )  # fmt: skip
    found = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))["escalation"]
    metrics = [
        len(turn["metrics"])
        for transcript in json.loads(next((run_dir / "cases").glob("*.json")).read_text(encoding="utf-8"))["transcripts"]
        for turn in transcript["turns"]
        if turn["verdict"] is not None
    ]
    assert found["judged_turns"] == len(metrics) > 0 and found["escalated_turns"] == 0 and loopback.request_count == 0
    # Each kept turn would have cost one call of the combined judge and one per metric of the other.
    assert found["calls_saved"] == sum(1 + m for m in metrics) > len(metrics)
    assert found["tokens_saved"] is None and found["cost_saved_usd"] is None  # no escalated turn to take a mean of
    results = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
    assert results["run"]["escalation"] == found
    line = (f"escalated 0 of {len(metrics)} judged turns (0.0%, 0 calls); not escalating the rest saved "
            f"{found['calls_saved']} calls (their tokens and cost are unknown: no turn was escalated to measure them by)")  # fmt: skip
    assert any(line in out for out in result.outlines)
    assert line in (run_dir / "summary.md").read_text(encoding="utf-8")


def test_a_cascade_escalating_to_a_priced_panel_prices_its_calls_and_savings(
    benchmark_runner: BenchmarkRunner, loopback: ReferenceServer
) -> None:
    models = _priced_judges(benchmark_runner, loopback, {"id": "priced-judge2", "model": "judge-strict"})
    result, run_dir = benchmark_runner.run_creating_one_folder(
        f"--models-file={models}", "--model=reference/mixed", "--judge=trained", "--escalate-to=priced-judge",
        "--escalate-to=priced-judge2", "--escalate-threshold=0.9", "-k", "conduit",
    )  # fmt: skip
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    found = summary["escalation"]
    assert found["escalated_turns"] > 0 and found["escalation_calls"] == 2 * found["escalated_turns"]
    (judge_row,) = [r for r in summary["usage"] if r["role"] == "judge"]
    used = judge_row["prompt_tokens"] * 2.5 / 1e6 + judge_row["completion_tokens"] * 10 / 1e6
    assert judge_row["cost_usd"] == pytest.approx(used, abs=1e-6) and used > 0  # each judge's calls at its (one) price
    assert summary["run"]["spent_usd"] == pytest.approx(judge_row["cost_usd"], abs=1e-6)
    saved = judge_row["cost_with_cache_hits_usd"] / found["escalated_turns"] * (found["judged_turns"] - found["escalated_turns"])
    assert found["cost_saved_usd"] == pytest.approx(saved, abs=1e-5) and saved > 0
    assert any(f"tokens, about ${found['cost_saved_usd']:.4f} (at the escalated turns' mean)" in out for out in result.outlines)


def test_a_cascade_escalating_to_a_panel_shows_a_panel_judge_that_failed(benchmark_runner: BenchmarkRunner) -> None:
    """The escalation panel's votes were dropped: a judge that never gave a verdict went unseen in
    the case files, the summary and calibrate, while the same judges as a plain panel showed it."""
    result = benchmark_runner.run(
        "--model=reference/noisy", "--judge=trained", "--escalate-to=reference/judge", "--escalate-to=reference/judge-null",
        "--escalate-to=reference/judge-strict", "--escalate-threshold=0.9", "-k", "conduit-explicit",
    )  # fmt: skip
    result.stdout.fnmatch_lines(["*panel judge reference/judge-null gave no valid verdict on * turn(s)"])
    (run_dir,) = benchmark_runner.report_dir.iterdir()
    (case,) = [json.loads(p.read_text(encoding="utf-8")) for p in (run_dir / "cases").glob("*.json")]
    turns = [t for tr in case["transcripts"] for t in tr["turns"] if t["verdict"]]
    escalated = [t for t in turns if t["verdict"].get("escalated")]
    assert escalated and all(len(t["votes"]) == 3 for t in escalated)
    assert all(not t.get("votes") for t in turns if not t["verdict"].get("escalated"))


def test_a_cascade_that_is_one_judge_of_a_panel_reports_its_escalations_from_its_votes(
    benchmark_runner: BenchmarkRunner,
) -> None:
    """The figures read the turn's combined verdict only, so a cascade voting in a panel escalated
    turns that no summary counted."""
    models = benchmark_runner.write_models_file([
        {"id": "casc", "kind": "cascade", "first": "trained", "escalate_to": "reference/judge",
         "thresholds": {"dcs": 0.9, "hes": 0.9, "sis": 0.9, "occ": 0.9}},
    ])  # fmt: skip
    result, run_dir = benchmark_runner.run_creating_one_folder(
        f"--models-file={models}", "--model=reference/mixed", "--judge=casc", "--judge=reference/judge-strict", "-k", "conduit",
    )  # fmt: skip
    found = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))["escalation"]
    votes = [
        next(v["verdict"] for v in turn["votes"] if v["judge_id"] == "casc")
        for case_file in (run_dir / "cases").glob("*.json")
        for transcript in json.loads(case_file.read_text(encoding="utf-8"))["transcripts"]
        for turn in transcript["turns"]
        if turn["verdict"] is not None
    ]
    escalated = [v for v in votes if v.get("escalated")]
    assert 0 < len(escalated) < len(votes)
    assert found["judge"] == "casc" and found["judged_turns"] == len(votes) and found["escalated_turns"] == len(escalated)
    # its calls are the panel's row's, shared with the other judge: no share of them is claimed
    assert found["escalation_calls"] is None and found["tokens_saved"] is None and found["cost_saved_usd"] is None
    line = f"cascade casc (one judge of the panel): escalated {len(escalated)} of {len(votes)} judged turns"
    assert any(line in out for out in result.outlines)
    assert line in (run_dir / "summary.md").read_text(encoding="utf-8")


def test_a_cascade_escalating_to_a_judge_of_its_own_panel_saves_no_call_and_sends_one_per_turn(
    benchmark_runner: BenchmarkRunner, loopback: ReferenceServer
) -> None:
    """The panel asks `priced-judge` on every turn, and an escalated turn's request is the same one,
    sent once: not escalating a turn saves no call. (It was sent twice, and every kept turn was said
    to save one.)"""
    models = benchmark_runner.write_models_file([
        {"id": "priced-judge", "model": "judge", "base_url": loopback.url, "price": {"input_per_mtok": 2.5, "output_per_mtok": 10}},
        {"id": "casc", "kind": "cascade", "first": "trained", "escalate_to": "priced-judge",
         "thresholds": {"dcs": 0.9, "hes": 0.9, "sis": 0.9, "occ": 0.9}},
    ])  # fmt: skip
    result, run_dir = benchmark_runner.run_creating_one_folder(
        f"--models-file={models}", "--model=reference/mixed", "--judge=casc", "--judge=priced-judge",
        "--judge=reference/judge-strict", "-k", "conduit-explicit",
    )  # fmt: skip
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    found = summary["escalation"]
    assert 0 < found["escalated_turns"] < found["judged_turns"]
    assert loopback.requests_for("judge") == found["judged_turns"]
    (judge_row,) = [r for r in summary["usage"] if r["role"] == "judge"]
    assert (judge_row["calls"], judge_row["cache_hits"]) == (found["judged_turns"] + found["escalated_turns"], found["escalated_turns"])
    assert found["calls_saved"] == 0
    assert any("not escalating the rest saved 0 calls" in out for out in result.outlines)
