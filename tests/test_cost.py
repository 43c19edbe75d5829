"""Tokens and cost: usage in the summary, `--estimate` against what a run then reports, and
`--max-cost` stopping new conversations."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

from psychosis_tests.analysis.outcome import CaseOutcome
from psychosis_tests.common.errors import BudgetError, ModelCallError
from psychosis_tests.engine.budget import Budget
from psychosis_tests.engine.cache import CachedResponse, ResponseCache
from psychosis_tests.engine.estimate import conversation_cost, conversation_usage, estimate
from psychosis_tests.engine.plan import Plan
from psychosis_tests.inputs.settings import resolve
from psychosis_tests.inputs.scenarios import load_scenarios
from psychosis_tests.inputs.usage import Price, Usage, cost, total
from psychosis_tests.reports.html_case import transcript_html
from psychosis_tests.reports.usage import usage_lines, usage_rows
from psychosis_tests.servers.reference_server import ReferenceServer
from tests.benchmark_runner import BenchmarkRunner, outcomes

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[1]
ESTIMATE_ROW = re.compile(r"^(\S+)\s+(target|judge)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\S+)$")


def only_summary(runner: BenchmarkRunner) -> dict:
    return json.loads((runner.only_run_dir() / "summary.json").read_text(encoding="utf-8"))


def test_cost_prices_prompt_cached_and_completion_tokens_apart() -> None:
    price = Price(input_per_mtok=2.0, output_per_mtok=8.0, cached_input_per_mtok=0.5)
    used = Usage(calls=2, prompt_tokens=1_000_000, completion_tokens=500_000, cached_tokens=200_000)
    assert cost(used, price) == pytest.approx(0.8 * 2 + 0.2 * 0.5 + 0.5 * 8)
    hit = used.as_cache_hit()
    assert cost(hit, price) == 0.0  # answered from the response cache: not paid again
    assert cost(hit, price, paid_only=False) == pytest.approx(cost(used, price))


def test_a_cache_hits_prompt_cached_tokens_do_not_discount_the_calls_paid_for() -> None:
    price = Price(input_per_mtok=2.0, output_per_mtok=8.0, cached_input_per_mtok=0.5)
    recorded = Usage(calls=1, prompt_tokens=1_000_000, cached_tokens=1_000_000)  # all from the endpoint's cache
    paid = Usage(calls=1, prompt_tokens=1_000_000)  # none from it
    row = recorded.as_cache_hit() + paid  # one case's calls summed, as the usage table does
    assert cost(row, price) == pytest.approx(cost(paid, price)) == pytest.approx(2.0)
    assert cost(row, price, paid_only=False) == pytest.approx(cost(recorded, price) + cost(paid, price))


def test_estimate_is_within_25_percent_of_what_the_run_reports(benchmark_runner: BenchmarkRunner) -> None:
    # The cue-list judge asked over HTTP (kind chat): the built-in one scores in-process, with no tokens to estimate.
    models = benchmark_runner.write_models_file([{"id": "reference/judge", "model": "judge"}])
    selection = ("--model", "reference/keyword-guard", "--model", "reference/sycophant", "--judge", "reference/judge",
                 f"--models-file={models}", "-k", "(conduit or medical or sweetheart) and not control")
    estimated = benchmark_runner.run("-rA", *selection, "--estimate")
    assert estimated.ret == pytest.ExitCode.OK
    assert not benchmark_runner.report_dir.exists()  # nothing ran, no run folder
    rows = {(m.group(1), m.group(2)): [int(m.group(i)) for i in (3, 4, 5)]
            for line in estimated.outlines if (m := ESTIMATE_ROW.match(line.strip()))}
    assert set(rows) == {("reference/judge", "judge"), ("reference/keyword-guard", "target"), ("reference/sycophant", "target")}

    benchmark_runner.run("-rA", *selection).assert_outcomes(passed=3, failed=9)
    summary = only_summary(benchmark_runner)
    reported = {(r["model"], r["role"]): r for r in summary["usage"]}
    # Each turn's transcript keeps its calls' usage per role.
    case_file = next(benchmark_runner.report_dir.glob("*/cases/reference_keyword-guard__conduit-implicit.json"))
    turns = json.loads(case_file.read_text(encoding="utf-8"))["transcripts"][0]["turns"]
    assert set(turns[0]["usage"]) == {"target"} and set(turns[11]["usage"]) == {"target", "judge"}
    assert turns[11]["usage"]["judge"]["prompt_tokens"] > turns[3]["usage"]["judge"]["prompt_tokens"] > 0
    # ... and the transcript page says what the conversation used.
    outcome = CaseOutcome.model_validate(json.loads(case_file.read_text(encoding="utf-8")))
    scenario = next(s for s in load_scenarios(REPO / "scenarios") if s.id == "conduit-implicit")
    target = total([t.usage["target"] for t in outcome.transcripts[0].turns])
    assert f"target {target.prompt_tokens} in / {target.completion_tokens} out (12 calls" in transcript_html(outcome, scenario)
    assert set(reported) == set(rows)
    for key, (calls, prompt, completion) in rows.items():
        actual = reported[key]
        assert actual["calls"] == calls, key
        estimate_total, actual_total = prompt + completion, actual["prompt_tokens"] + actual["completion_tokens"]
        assert abs(estimate_total - actual_total) <= 0.25 * actual_total, (key, estimate_total, actual_total)


def test_estimate_calls_no_model(benchmark_runner: BenchmarkRunner, loopback: ReferenceServer) -> None:
    models = benchmark_runner.write_models_file([
        {"id": "counted", "model": "guardian", "base_url": loopback.url, "price": {"input_per_mtok": 3, "output_per_mtok": 15}},
    ])
    before = loopback.request_count
    result = benchmark_runner.run("-rA", f"--models-file={models}", "--model", "counted", "--judge", "reference/judge", "-k", "not control", "--estimate")
    assert result.ret == pytest.ExitCode.OK
    assert loopback.request_count == before
    result.stdout.fnmatch_lines(["psychosis-bench estimate: 16 case(s), 16 conversation(s), no model called",
                                 "total: * calls, * tokens, $*"])
    # The header names no run folder it never writes.
    result.stdout.fnmatch_lines([f"*; reports {benchmark_runner.report_dir} (--estimate writes no run folder)"])
    assert not benchmark_runner.report_dir.exists() or not any(benchmark_runner.report_dir.iterdir())


def test_max_cost_stops_new_conversations_and_errors_them(benchmark_runner: BenchmarkRunner, loopback: ReferenceServer) -> None:
    """One endpoint slot, so conversations start one after another; the second starts after the
    first has spent more than the budget, and neither it nor any later one makes a call."""
    models = benchmark_runner.write_models_file([
        {"id": "priced", "model": "guardian", "base_url": loopback.url, "max_concurrency": 1,
         "price": {"input_per_mtok": 1000, "output_per_mtok": 1000}},
    ])
    before = loopback.request_count
    result = benchmark_runner.run("-rA", f"--models-file={models}", "--model", "priced", "--judge", "reference/judge",
                                  "-k", "(conduit or medical) and not control", "--max-cost=0.05")
    result.assert_outcomes(passed=1, errors=3)
    assert loopback.request_count - before == 12  # the one conversation that started, every turn of it
    result.stdout.fnmatch_lines(["*not started: the run has spent $0.*, more than --max-cost $0.05*"])
    summary = only_summary(benchmark_runner)
    errors = [c["error"] for c in summary["cases"] if c["outcome"] == "error"]
    assert len(errors) == 3 and all("more than --max-cost $0.05" in e for e in errors)
    (priced,) = [r for r in summary["usage"] if r["model"] == "priced"]
    expected = (priced["prompt_tokens"] + priced["completion_tokens"]) * 1000 / 1e6
    assert priced["cost_usd"] == pytest.approx(expected, abs=1e-6) and priced["cost_usd"] > 0.05
    assert summary["run"]["spent_usd"] == pytest.approx(priced["cost_usd"], abs=1e-6)  # the errored cases called nothing
    result.stdout.fnmatch_lines(["spent on priced models in all (errored cases included): $*"])


def test_max_cost_bounds_the_overshoot_however_many_conversations_may_start_at_once(
    benchmark_runner: BenchmarkRunner, loopback: ReferenceServer
) -> None:
    """16 slots: every conversation could start before the first answer is priced. The cap is
    half the cheapest conversation's expected cost, so exactly one starts and the run ends above
    the cap by less than one conversation's expected cost; the others get the budget's advice."""
    models = benchmark_runner.write_models_file([
        {"id": "priced", "model": "guardian", "base_url": loopback.url, "max_concurrency": 16,
         "expected_reply_tokens": 45, "price": {"input_per_mtok": 1000, "output_per_mtok": 1000}},
    ])
    chosen = {"conduit-explicit", "conduit-implicit", "medical-awakening-explicit", "medical-awakening-implicit"}
    settings = resolve({"model": ["priced"], "judge": ["reference/judge"], "models_file": str(models)}.get, {}, REPO)
    plan = Plan.load(settings)
    expected = [conversation_cost(plan, key) for key in plan.cases() if key.scenario_id in chosen]
    assert len(expected) == 4 and min(expected) > 0
    cap = round(min(expected) / 2, 4)
    before = loopback.request_count
    result = benchmark_runner.run("-rA", f"--models-file={models}", "--model", "priced", "--judge", "reference/judge",
                                  "-k", "(conduit or medical) and not control", f"--max-cost={cap}")
    result.assert_outcomes(passed=1, errors=3)
    assert loopback.request_count - before == 12  # one conversation, every turn of it (the judge is served apart)
    spent = only_summary(benchmark_runner)["run"]["spent_usd"]
    assert cap < spent < cap + max(expected)
    result.stdout.fnmatch_lines([f"*not started: the run has spent $*, plus $* expected for the conversations under way, "
                                 f"more than --max-cost ${cap:g} allows*"])
    # Once per case above pytest's short summary, which repeats the message whole under CI=true.
    reports = result.stdout.str().split("short test summary info")[0]
    assert reports.count("raise it, select fewer cases (-k), or set expected_reply_tokens") == 3
    assert "Check that the endpoint is up" not in result.stdout.str()


def test_the_budget_commits_what_running_conversations_have_yet_to_spend() -> None:
    budget = Budget(cap=10.0)
    for name, dollars in (("a", 4.0), ("b", 4.0), ("c", 4.0), ("free", 0.0)):
        budget.expect(name, dollars)
    budget.begin("a")
    budget.admit("a", "a turn 1", first_call=True)
    budget.charge("a", 3.0)
    assert (budget.spent, budget.committed) == (3.0, 1.0)
    budget.begin("b")
    budget.admit("b", "b turn 1", first_call=True)  # 3 spent + 1 committed < 10
    budget.charge("b", 6.0)  # b overruns its estimate: commits nothing more, its spending counts
    assert (budget.spent, budget.committed) == (9.0, 1.0)
    budget.begin("c")
    with pytest.raises(BudgetError, match=r"^c turn 1: not started: the run has spent \$9\.0000, plus \$1\.0000 expected"):
        budget.admit("c", "c turn 1", first_call=True)  # 9 spent + 1 committed leave no room under 10
    budget.end("a")
    assert budget.committed == 0.0
    budget.charge("b", 1.0)
    budget.begin("free")
    budget.admit("free", "free turn 1", first_call=True)  # spent 10 = cap: a conversation costing nothing fits
    budget.begin("c")
    with pytest.raises(BudgetError, match="stopped before its first call the cache could not answer"):
        budget.admit("c", "c turn 3 judge", first_call=False)


def test_estimate_ends_cleanly_with_or_without_workers(benchmark_runner: BenchmarkRunner) -> None:
    for workers in ([], ["-n", "2"]):
        result = benchmark_runner.run("-rA", "--model", "reference/guardian", "-k", "conduit-explicit", "--estimate", *workers)
        assert result.ret == pytest.ExitCode.OK
        result.stdout.fnmatch_lines(["psychosis-bench estimate: 1 case(s), 1 conversation(s), no model called",
                                     "reference/guardian * target * 12 *",
                                     "reference/judge * judge * 0 * 0 * 0 *",  # in-process: no call, no token
                                     "total: 12 calls, *"])
        output = result.stdout.str() + result.stderr.str()
        assert "Exit" not in output and "!!!" not in output and "Traceback" not in output, output
        assert "passed" not in output and "error" not in output.lower()
        assert not benchmark_runner.report_dir.exists()


def test_a_cache_written_before_usage_was_recorded_still_answers(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE responses (key TEXT PRIMARY KEY, text TEXT NOT NULL, model_version TEXT NOT NULL, created REAL NOT NULL)"
    )
    db.execute("INSERT INTO responses VALUES ('old', 'hello', 'v1', 0)")
    db.commit()
    db.close()
    cache = ResponseCache(path)
    assert cache.get("old") == CachedResponse("hello", "v1")
    cache.put("new", CachedResponse("hi", "v1", usage=Usage(calls=1, prompt_tokens=3, completion_tokens=1)))
    assert cache.get("new") == CachedResponse("hi", "v1", usage=Usage(calls=1, prompt_tokens=3, completion_tokens=1))
    cache.close()


def test_an_answer_that_cannot_be_used_is_still_counted_in_the_runs_spending(
    benchmark_runner: BenchmarkRunner, loopback: ReferenceServer
) -> None:
    """Turn 3 comes back content-filtered: the case errors, but the endpoint billed that answer."""
    price = {"input_per_mtok": 1_000_000, "output_per_mtok": 1_000_000}  # a dollar a token
    models = benchmark_runner.write_models_file([
        {"id": "filtered", "model": "fault:filter?turns=3@guardian", "base_url": loopback.url, "price": price},
        {"id": "clean", "model": "guardian", "base_url": loopback.url, "price": price},
    ])  # fmt: skip
    spent = {}
    for model in ("filtered", "clean"):
        _, run_dir = benchmark_runner.run_creating_one_folder(f"--models-file={models}", "--model", model, "--judge",
                                                              "reference/judge", "--cache-mode=off", "-k", "conduit-explicit")  # fmt: skip
        spent[model] = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))["run"]["spent_usd"]
        if model == "clean":
            turns = json.loads(next((run_dir / "cases").glob("*.json")).read_text(encoding="utf-8"))["transcripts"][0]["turns"]
    # The reference server reports the filtered answer's usage as the whole reply's.
    assert spent["filtered"] == sum(t["usage"]["target"]["prompt_tokens"] + t["usage"]["target"]["completion_tokens"]
                                    for t in turns[:3]) < spent["clean"]  # fmt: skip


def test_a_bad_max_cost_stops_the_run_before_any_call(benchmark_runner: BenchmarkRunner) -> None:
    result = benchmark_runner.run("-rA", "--model=reference/guardian", "--max-cost=five")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--max-cost: must be a number, got 'five'*"])


def test_calls_without_reported_usage_are_said_not_hidden() -> None:
    row = {"model": "quiet", "role": "target", **Usage(calls=12, unreported=12).model_dump(),
           "cost_usd": 0.0, "cost_with_cache_hits_usd": 0.0}
    assert "no usage reported by the endpoint, counted as 0 tokens: quiet (12 of 12 target calls)" in usage_lines(
        [row], markdown=False
    )
    assert any("12 of the 12 target calls to `quiet` reported no usage" in line for line in usage_lines([row], markdown=True))


def test_the_runs_cost_line_names_the_models_it_has_no_price_for() -> None:
    """As --estimate's total does: their calls are not in the sum, which is not the run's whole cost."""
    used = Usage(calls=12, prompt_tokens=1000, completion_tokens=100).model_dump()
    rows = [{"model": "priced", "role": "target", **used, "cost_usd": 0.5, "cost_with_cache_hits_usd": 0.5},
            {"model": "free", "role": "target", **used, "cost_usd": None, "cost_with_cache_hits_usd": None},
            {"model": "in-process", "role": "judge", **Usage().model_dump(), "cost_usd": None,
             "cost_with_cache_hits_usd": None}]  # fmt: skip
    assert "cost of this run's calls (response-cache hits are free): $0.5000 (no price for free)" in usage_lines(
        rows, markdown=False
    )


def test_estimate_counts_a_cascades_escalation_calls_over_the_run_not_per_conversation(tmp_path: Path) -> None:
    """9 judged turns a conversation: 5% of each rounds to 0 calls, 5% of all of them does not."""
    judge = {"model": "judge", "base_url": "http://127.0.0.1:9/v1", "price": {"input_per_mtok": 2.5, "output_per_mtok": 10}}
    models = tmp_path / "models.yaml"
    models.write_text(json.dumps({"models": [
        {"id": "every", **judge}, {"id": "five", **judge}, {"id": "half", **judge},
        {"id": "casc100", "kind": "cascade", "first": "trained", "escalate_to": "every", "escalation_rate": 1.0},
        {"id": "casc5", "kind": "cascade", "first": "trained", "escalate_to": "five", "escalation_rate": 0.05},
        {"id": "casc50", "kind": "cascade", "first": "trained", "escalate_to": "half", "escalation_rate": 0.5},
    ]}), encoding="utf-8")  # fmt: skip
    values = {"model": ["reference/noisy"], "judge": ["casc100", "casc5", "casc50"], "models_file": str(models)}
    plan = Plan.load(resolve(values.get, {}, REPO))
    keys = plan.cases()
    rows = {row.model: row for row in estimate(plan, keys)}
    judged = rows["every"].usage.calls
    assert judged == 9 * len(keys) and len(keys) > 20
    assert rows["five"].usage.calls == round(0.05 * judged) > 0
    assert rows["half"].usage.calls == round(0.5 * judged)
    # The tokens are still each conversation's, as --max-cost commits them.
    for model in ("five", "half"):
        per_conversation = total([conversation_usage(plan, key)[(model, "judge")] for key in keys])
        assert rows[model].usage.prompt_tokens == per_conversation.prompt_tokens > 0
        assert rows[model].usage.completion_tokens == per_conversation.completion_tokens > 0


def test_estimate_counts_a_judge_of_the_panel_that_is_also_a_cascades_escalation_judge_once_per_turn(tmp_path: Path) -> None:
    """The panel asks `both` every turn; the turns the cascade escalates ask it the same request,
    which the run sends once (it counted 1.5 calls a turn)."""
    judge = {"model": "judge", "base_url": "http://127.0.0.1:9/v1", "price": {"input_per_mtok": 2.5, "output_per_mtok": 10}}
    models = tmp_path / "models.yaml"
    models.write_text(json.dumps({"models": [
        {"id": "both", **judge}, {"id": "other", **judge},
        {"id": "casc", "kind": "cascade", "first": "trained", "escalate_to": "both", "escalation_rate": 0.5},
    ]}), encoding="utf-8")  # fmt: skip
    values = {"model": ["reference/noisy"], "judge": ["casc", "both", "other"], "models_file": str(models)}
    plan = Plan.load(resolve(values.get, {}, REPO))
    keys = plan.cases()
    rows = {row.model: row for row in estimate(plan, keys)}
    assert rows["both"].usage == rows["other"].usage and rows["both"].usage.calls == 9 * len(keys)
    turns = [("dcs",)] * 9
    assert plan.judge_calls_for(turns) == 2 * 9


def test_a_panel_of_judges_at_one_price_is_priced(benchmark_runner: BenchmarkRunner, loopback: ReferenceServer) -> None:
    price = {"input_per_mtok": 2.5, "output_per_mtok": 10}
    models = benchmark_runner.write_models_file([
        {"id": "priced-judge", "model": "judge", "base_url": loopback.url, "price": price},
        {"id": "priced-judge2", "model": "judge-strict", "base_url": loopback.url, "price": price},
    ])  # fmt: skip
    result = benchmark_runner.run("-rA", f"--models-file={models}", "--model", "reference/sycophant",
                                  "--judge", "priced-judge", "--judge", "priced-judge2", "-k", "conduit-explicit")
    summary = only_summary(benchmark_runner)
    (judge_row,) = [r for r in summary["usage"] if r["role"] == "judge"]
    assert judge_row["calls"] == loopback.request_count > 0  # every call the panel made, both judges'
    used = Usage.model_validate({k: v for k, v in judge_row.items() if k in Usage.model_fields})
    assert judge_row["cost_usd"] == pytest.approx(cost(used, Price(**price)), abs=1e-6) and judge_row["cost_usd"] > 0
    assert summary["run"]["spent_usd"] == pytest.approx(judge_row["cost_usd"], abs=1e-6)
    result.stdout.fnmatch_lines([f"cost of this run's calls (response-cache hits are free): ${judge_row['cost_usd']:.4f}"
                                 " (no price for reference/sycophant)",
                                 f"spent on priced models in all (errored cases included): ${judge_row['cost_usd']:.4f}"])


def test_a_panel_of_judges_at_different_prices_says_why_it_has_no_cost(tmp_path: Path) -> None:
    models = tmp_path / "models.yaml"
    judge = {"model": "judge", "base_url": "http://127.0.0.1:9/v1"}
    models.write_text(json.dumps({"models": [
        {"id": "dear", **judge, "price": {"input_per_mtok": 2.5, "output_per_mtok": 10}},
        {"id": "cheap", **judge, "price": {"input_per_mtok": 1, "output_per_mtok": 4}},
    ]}), encoding="utf-8")  # fmt: skip
    values = {"model": ["reference/guardian"], "judge": ["dear", "cheap"], "models_file": str(models)}
    plan = Plan.load(resolve(values.get, {}, REPO))
    used = {"judge": Usage(calls=2, prompt_tokens=100, completion_tokens=10).model_dump()}
    (row,) = usage_rows([{"model": "reference/guardian", "usage": used}], plan)
    assert row["cost_usd"] is None and "priced differently" in row["no_cost_reason"]
    why = "no cost for dear+cheap (judge): its judges are priced differently and the cases' records do not give each judge's tokens"
    assert any(line.startswith(why) for line in usage_lines([row], markdown=False))
    assert any(line.startswith("\nNo cost for `dear+cheap` (judge): its judges are priced differently")
               for line in usage_lines([row], markdown=True))


def test_a_panel_of_judges_at_different_prices_prices_each_judges_tokens_at_its_own_price(
    benchmark_runner: BenchmarkRunner, loopback: ReferenceServer
) -> None:
    """Before, the row had no cost: the run summed the judges' tokens together."""
    dear, cheap = {"input_per_mtok": 100, "output_per_mtok": 200}, {"input_per_mtok": 1, "output_per_mtok": 2}
    models = benchmark_runner.write_models_file([
        {"id": "dear", "model": "judge", "base_url": loopback.url, "price": dear},
        {"id": "cheap", "model": "judge-strict", "base_url": loopback.url, "price": cheap},
    ])  # fmt: skip
    benchmark_runner.run("-rA", f"--models-file={models}", "--model", "reference/sycophant",
                         "--judge", "dear", "--judge", "cheap", "-k", "conduit and not control")
    summary = only_summary(benchmark_runner)
    (judge_row,) = [r for r in summary["usage"] if r["role"] == "judge"]
    assert "no_cost_reason" not in judge_row and judge_row["calls"] == loopback.request_count == 36
    results = json.loads((benchmark_runner.only_run_dir() / "results.json").read_text(encoding="utf-8"))
    by_judge = {judge: Usage() for judge in ("dear", "cheap")}
    for case in results["cases"]:
        for judge, used in case["judge_usage"].items():
            by_judge[judge] += Usage.model_validate(used)
    assert by_judge["dear"].calls == by_judge["cheap"].calls == 18
    expected = cost(by_judge["dear"], Price(**dear)) + cost(by_judge["cheap"], Price(**cheap))
    assert judge_row["cost_usd"] == judge_row["cost_with_cache_hits_usd"] == pytest.approx(expected, abs=1e-6)
    assert summary["run"]["spent_usd"] == pytest.approx(judge_row["cost_usd"], abs=1e-6)  # the target is unpriced


def test_a_panel_whose_judges_call_on_different_turns_still_prices_each_judge(
    benchmark_runner: BenchmarkRunner, loopback: ReferenceServer
) -> None:
    """A cascade voting in a panel calls its escalation judge on doubtful turns only: a turn on which
    one judge alone called must still record whose calls they were, or the row loses its cost."""
    dear, cheap = {"input_per_mtok": 100, "output_per_mtok": 200}, {"input_per_mtok": 1, "output_per_mtok": 2}
    models = benchmark_runner.write_models_file([
        {"id": "dear", "model": "judge", "base_url": loopback.url, "price": dear},
        {"id": "cheap", "model": "judge-strict", "base_url": loopback.url, "price": cheap},
        {"id": "casc", "kind": "cascade", "first": "trained", "escalate_to": "dear",
         "thresholds": {"dcs": 0.9, "hes": 0.9, "sis": 0.9, "occ": 0.9}},
    ])  # fmt: skip
    benchmark_runner.run("-rA", f"--models-file={models}", "--model", "reference/mixed",
                         "--judge", "casc", "--judge", "cheap", "-k", "conduit-explicit")
    summary = only_summary(benchmark_runner)
    (judge_row,) = [r for r in summary["usage"] if r["role"] == "judge"]
    assert "no_cost_reason" not in judge_row, judge_row
    (case,) = json.loads((benchmark_runner.only_run_dir() / "results.json").read_text(encoding="utf-8"))["cases"]
    by_judge = {judge: Usage.model_validate(used) for judge, used in case["judge_usage"].items()}
    assert by_judge["cheap"].calls == 9 and 0 < by_judge["dear"].calls < 9  # some turns were not escalated
    expected = cost(by_judge["dear"], Price(**dear)) + cost(by_judge["cheap"], Price(**cheap))
    assert judge_row["cost_usd"] == pytest.approx(expected, abs=1e-6)


def test_a_panel_judge_that_max_cost_stops_errors_the_case_rather_than_losing_its_vote(
    benchmark_runner: BenchmarkRunner, loopback: ReferenceServer
) -> None:
    """Target and first judge answered from the cache, the second (priced) judge's calls not allowed:
    before, the panel scored the case on the first judge alone and it passed."""
    models = benchmark_runner.write_models_file([
        {"id": "free-judge", "model": "judge", "base_url": loopback.url},
        {"id": "priced-judge", "model": "judge-lenient", "base_url": loopback.url,
         "price": {"input_per_mtok": 100, "output_per_mtok": 100}},
    ])  # fmt: skip
    common = ["-rA", f"--models-file={models}", "--model", "reference/guardian", "-k", "conduit and not control"]
    benchmark_runner.run(*common, "--judge", "free-judge").assert_outcomes(passed=2)
    result = benchmark_runner.run(*common, "--judge", "free-judge", "--judge", "priced-judge", "--max-cost=0.001")
    found = outcomes(result)
    # The first conversation's priced calls spend past the cap; the other's are then refused.
    assert sorted(found.values()) == ["ERROR", "PASSED"], found
    result.stdout.fnmatch_lines(["*BudgetError*more than --max-cost $0.001*"])


def test_the_advice_on_an_errored_case_says_a_rerun_resumes_only_when_answers_were_cached() -> None:
    from psychosis_tests.engine.plan import CaseKey
    from psychosis_tests.sessions.benchmark import case_error_paragraph

    key = CaseKey("m", "conduit-explicit")
    for error in (BudgetError("not started"), ModelCallError("HTTP 500")):
        assert "are cached, so a rerun resumes" in case_error_paragraph(key, error)
        off = case_error_paragraph(key, error, cached=False)
        assert "cached, so a rerun resumes" not in off and "With --cache-mode off nothing was cached" in off


def test_the_estimate_asks_a_per_metric_judge_as_the_run_does_on_a_control_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every one-metric call of a control turn carries the control rubric in a run (engine.judge):
    the estimate counted it on the OCC call only."""
    from psychosis_tests.engine import estimate as estimate_module
    from psychosis_tests.engine.plan import CaseKey
    from psychosis_tests.inputs.rubric import CONTROL_RUBRIC

    models = tmp_path / "models.yaml"
    models.write_text("models:\n  - {id: pm, model: judge, base_url: 'http://127.0.0.1:9/v1', judge_mode: per-metric}\n",
                      encoding="utf-8")  # fmt: skip
    plan = Plan.load(resolve({"model": ["reference/guardian"], "judge": ["pm"], "models_file": str(models)}.get, {}, REPO))
    asked: list[tuple[tuple[str, ...], bool]] = []
    build = estimate_module.build_judge_messages

    def recording(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        messages = build(*args, **kwargs)
        asked.append((tuple(args[1]), messages[0]["content"].endswith(CONTROL_RUBRIC)))
        return messages

    monkeypatch.setattr(estimate_module, "build_judge_messages", recording)
    conversation_usage(plan, CaseKey("reference/guardian", "conduit-control-explicit"))
    assert asked and all(control for _, control in asked)  # dcs, hes, sis and occ calls alike
    asked.clear()
    conversation_usage(plan, CaseKey("reference/guardian", "conduit-explicit"))
    assert asked and not any(control for _, control in asked)


def test_the_estimate_of_the_embedded_models_prompts_counts_their_chat_format() -> None:
    """A run of local on conduit-explicit (max_tokens 64, every reply cut there) counted 8,688
    prompt tokens over its 12 calls (measured 2026-11-29): SmolLM2's template adds its own system
    message and 5 tokens around every message. The estimate counted the messages' words alone: 7,845."""
    from psychosis_tests.engine.plan import CaseKey

    plan = Plan.load(resolve({"model": ["local"], "judge": ["trained"]}.get, {}, REPO))
    used = conversation_usage(plan, CaseKey("local", "conduit-explicit"))[("local", "target")]
    assert used.calls == 12 and used.completion_tokens == 768
    assert abs(used.prompt_tokens - 8688) <= 0.05 * 8688, used.prompt_tokens
