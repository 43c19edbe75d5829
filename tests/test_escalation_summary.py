"""A run judged by a cascade says what it escalated and what it saved; other runs say nothing."""

from __future__ import annotations

import json

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
