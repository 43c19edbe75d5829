"""What the simulated user costs: its calls' usage per turn, per case and per run under the role
"user", priced and counted against --max-cost, and `--estimate` planning the run's real length
and the user model's calls."""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from psychosis_tests import __main__ as cli
from psychosis_tests.engine.user_sim import SCRIPT_AUTHOR, simulate_user_turn
from psychosis_tests.inputs.models import builtin_models
from psychosis_tests.inputs.scenarios import load_scenarios
from psychosis_tests.inputs.usage import Usage
from psychosis_tests.servers.reference_server import ReferenceServer
from tests.benchmark_runner import SCENARIOS, BenchmarkRunner, outcomes

pytest_plugins = ["pytester"]
CONDUIT = next(s for s in load_scenarios(SCENARIOS) if s.id == "conduit-implicit")
ESTIMATE_ROW = re.compile(r"^(\S+)\s+(target|judge|user)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\S+)$")
TWO_CASES = ["-k", "conduit and not control"]
PATIENT_16 = ["--user-model", "reference/patient", "--turns", "16", "--judge", "reference/judge", "-rA"]


def _cases(run_dir: Path) -> list[dict]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted((run_dir / "cases").glob("*.json"))]


def _summary_rows(run_dir: Path) -> dict[tuple[str, str], dict]:
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    return {(r["model"], r["role"]): r for r in summary["usage"]}


def _results_calls(run_dir: Path) -> Counter[tuple[str, str]]:
    """Calls per (model, role) as results.json's cases record them."""
    results = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
    named = {"target": None, "judge": results["run"]["judge"], "user": results["run"]["user_model"]}
    calls: Counter[tuple[str, str]] = Counter()
    for case in results["cases"]:
        for role, used in case["usage"].items():
            calls[(named[role] or case["model"], role)] += used["calls"]
    return calls


def _estimate_rows(result: pytest.RunResult) -> dict[tuple[str, str], tuple[int, int, int, str]]:
    return {
        (m.group(1), m.group(2)): (int(m.group(3)), int(m.group(4)), int(m.group(5)), m.group(6))
        for line in result.outlines
        if (m := ESTIMATE_ROW.match(line.strip()))
    }


# -- the user simulator's own record ----------------------------------------------------------
@dataclass
class _Answers:
    """Answers user-simulator calls from a list, each reporting 10 prompt and 3 completion tokens."""

    texts: list[str]
    asked: int = 0
    kwargs: list[dict] = field(default_factory=list)

    async def chat(self, spec, messages, **kwargs):  # noqa: ANN001, ANN003
        self.asked += 1
        self.kwargs.append(kwargs)

        @dataclass
        class _Completion:
            text: str
            usage: Usage
            model_version: str = "scripted"
            cached: bool = False
            finish_reason: str | None = "stop"

        return _Completion(self.texts[self.asked - 1], Usage(calls=1, prompt_tokens=10, completion_tokens=3))


def test_a_re_asked_user_turn_counts_every_call_and_only_the_first_checks_the_budget() -> None:
    provider = _Answers(["As an AI, I cannot do that.", "numbers again tonight, 9 and 17"])
    used: list[Usage] = []
    patient = builtin_models()["reference/patient"]
    text = asyncio.run(
        simulate_user_turn(provider, patient, CONDUIT, CONDUIT.plan_turns(16)[0], 16, [],  # type: ignore[arg-type]
                           call_label="m conduit-implicit repeat 0 turn 1", starts_conversation=True, usage=used)
    )
    assert text == "numbers again tonight, 9 and 17"
    assert used == [Usage(calls=1, prompt_tokens=10, completion_tokens=3)] * 2
    assert [k["starts_conversation"] for k in provider.kwargs] == [True, False]


# -- whole runs -------------------------------------------------------------------------------
def test_user_calls_are_recorded_per_turn_case_and_run_and_replayed_as_cache_hits(benchmark_runner: BenchmarkRunner) -> None:
    first, first_dir = benchmark_runner.run_creating_one_folder("--model", "reference/sycophant", *PATIENT_16, *TWO_CASES)
    assert set(outcomes(first).values()) == {"FAILED"} and len(outcomes(first)) == 2
    for case in _cases(first_dir):
        (transcript,) = case["transcripts"]
        simulated = [t for t in transcript["turns"] if t["author"] == "user-model:reference/patient"]
        assert len(simulated) == len(transcript["turns"]) == 16  # adaptive: the patient writes every turn
        assert all(t["usage"]["user"]["calls"] == 1 and t["usage"]["user"]["prompt_tokens"] > 0 for t in simulated)
        # The patient reads the whole conversation, so its prompt grows turn by turn.
        prompts = [t["usage"]["user"]["prompt_tokens"] for t in simulated]
        assert prompts == sorted(prompts) and prompts[-1] > prompts[0]
    assert _results_calls(first_dir)[("reference/patient", "user")] == 2 * 16
    row = _summary_rows(first_dir)[("reference/patient", "user")]
    assert (row["calls"], row["cache_hits"], row["cost_usd"]) == (32, 0, None)  # the built-in patient has no price
    assert any(line.split()[:4] == ["reference/patient", "user", "32", "0"] for line in first.outlines)
    assert "| `reference/patient` | user | 32 | 0 |" in (first_dir / "summary.md").read_text(encoding="utf-8")

    second, second_dir = benchmark_runner.run_creating_one_folder("--model", "reference/sycophant", *PATIENT_16, *TWO_CASES,
                                                                  "--cache-mode", "replay")
    assert outcomes(second) == outcomes(first)
    again = _summary_rows(second_dir)[("reference/patient", "user")]
    assert (again["calls"], again["cache_hits"]) == (32, 32)
    assert again["prompt_tokens"] == again["hit_prompt_tokens"] == row["prompt_tokens"]


def test_scripted_mode_counts_user_calls_only_on_the_turns_the_user_model_writes(benchmark_runner: BenchmarkRunner) -> None:
    result, run_dir = benchmark_runner.run_creating_one_folder(
        "--model", "reference/guardian", "--user-model", "reference/patient", "--user-mode", "scripted",
        "--turns", "18", "-k", "conduit-explicit",
    )
    result.assert_outcomes(passed=1)
    (case,) = _cases(run_dir)
    turns = case["transcripts"][0]["turns"]
    assert [t["author"] == SCRIPT_AUTHOR for t in turns] == ["user" not in t["usage"] for t in turns]
    assert sum(t["usage"].get("user", {}).get("calls", 0) for t in turns) == 18 - 12
    assert _results_calls(run_dir)[("reference/patient", "user")] == 6


def test_a_priced_user_model_is_costed_and_spends_the_budget(benchmark_runner: BenchmarkRunner, loopback: ReferenceServer) -> None:
    """The user model is the only priced model and has one slot: the conversation that gets it
    first spends more than --max-cost on its first user turn, so no other conversation starts."""
    models = benchmark_runner.write_models_file([
        {"id": "priced-patient", "model": "patient", "base_url": loopback.url, "max_concurrency": 1,
         "price": {"input_per_mtok": 1000, "output_per_mtok": 1000}},
    ])
    before = loopback.request_count
    result, run_dir = benchmark_runner.run_creating_one_folder(
        f"--models-file={models}", "--model", "reference/guardian", "--user-model", "priced-patient",
        "-k", "(conduit or medical) and not control", "--max-cost=0.05", "-rA",
    )
    result.assert_outcomes(passed=1, errors=3)
    assert loopback.request_count - before == 12  # the one conversation that started: its 12 user turns
    result.stdout.fnmatch_lines(["*turn 1 user: not started: the run has spent $*, more than --max-cost $0.05*"])
    row = _summary_rows(run_dir)[("priced-patient", "user")]
    assert row["calls"] == 12
    assert row["cost_usd"] == pytest.approx((row["prompt_tokens"] + row["completion_tokens"]) * 1000 / 1e6, abs=1e-6)
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    assert summary["run"]["spent_usd"] == pytest.approx(row["cost_usd"], abs=1e-6) and row["cost_usd"] > 0.05
    assert _summary_rows(run_dir)[("reference/guardian", "target")]["cost_usd"] is None


# -- --estimate -------------------------------------------------------------------------------
@pytest.mark.parametrize(("mode", "user_calls"), [("adaptive", 24), ("scripted", 12)])
def test_estimate_plans_the_runs_turns_and_the_user_models_calls(benchmark_runner: BenchmarkRunner, mode: str, user_calls: int) -> None:
    # The cue-list judge asked over HTTP (kind chat): the built-in one scores in-process and makes no call to count.
    models = benchmark_runner.write_models_file([{"id": "reference/judge", "model": "judge"}])
    result = benchmark_runner.run(f"--models-file={models}", "--model", "reference/guardian", "--judge", "reference/judge",
                                  "--user-model", "reference/patient", "--user-mode", mode, "--turns", "24", "-k",
                                  "conduit-explicit", "--estimate")  # fmt: skip
    assert result.ret == pytest.ExitCode.OK
    rows = _estimate_rows(result)
    assert set(rows) == {("reference/guardian", "target"), ("reference/judge", "judge"), ("reference/patient", "user")}
    assert rows[("reference/guardian", "target")][0] == 24
    assert rows[("reference/judge", "judge")][0] == 24 - 6  # DCS from phase 2: the first 6 of 24 turns are not judged
    assert rows[("reference/patient", "user")][0] == user_calls
    result.stdout.fnmatch_lines([f"user turns: 24 per conversation, written by reference/patient ({mode} mode)"])
    assert not benchmark_runner.report_dir.exists()


def test_estimate_prices_the_user_model(benchmark_runner: BenchmarkRunner, loopback: ReferenceServer) -> None:
    models = benchmark_runner.write_models_file([
        {"id": "priced-patient", "model": "patient", "base_url": loopback.url,
         "price": {"input_per_mtok": 3, "output_per_mtok": 15}},
    ])
    before = loopback.request_count
    result = benchmark_runner.run(f"--models-file={models}", "--model", "reference/guardian", "--user-model", "priced-patient",
                                  *TWO_CASES, "--estimate")
    assert loopback.request_count == before
    calls, prompt, completion, money = _estimate_rows(result)[("priced-patient", "user")]
    assert calls == 2 * 12
    assert money == f"${(prompt * 3 + completion * 15) / 1e6:.4f}" and money != "$0.0000"
    # reference/judge scores in-process: a row of 0 calls, with nothing to price
    result.stdout.fnmatch_lines(["total: * calls, * tokens, $* (no price for reference/guardian)"])


def test_estimate_matches_the_calls_an_adaptive_run_records(benchmark_runner: BenchmarkRunner) -> None:
    selection = ("--model", "reference/keyword-guard", "--model", "reference/sycophant", *PATIENT_16, *TWO_CASES)
    estimated = _estimate_rows(benchmark_runner.run(*selection, "--estimate"))
    assert {role for _, role in estimated} == {"target", "judge", "user"}
    _, run_dir = benchmark_runner.run_creating_one_folder(*selection)
    recorded = _results_calls(run_dir)
    assert {key: row[0] for key, row in estimated.items()} == dict(recorded)
    summary = _summary_rows(run_dir)
    for key, (_, prompt, completion, _) in estimated.items():
        actual = summary[key]["prompt_tokens"] + summary[key]["completion_tokens"]
        assert abs(prompt + completion - actual) <= 0.25 * actual, (key, prompt + completion, actual)


def test_a_merge_of_adaptive_shards_keeps_the_user_side_and_its_usage(benchmark_runner: BenchmarkRunner, tmp_path: Path) -> None:
    shards = [benchmark_runner.run_creating_one_folder("--model", "reference/guardian", *PATIENT_16, *TWO_CASES,
                                                       f"--shard={k}/2")[1] for k in (1, 2)]
    out = tmp_path / "merged"
    assert cli.main(["merge", *map(str, shards), f"--out={out}", f"--scenarios={SCENARIOS}",
                     f"--thresholds={benchmark_runner.thresholds}"]) == 0
    run = json.loads((out / "results.json").read_text(encoding="utf-8"))["run"]
    assert (run["user_model"], run["user_mode"], run["turns"]) == ("reference/patient", "adaptive", 16)
    assert _summary_rows(out)[("reference/patient", "user")]["calls"] == 2 * 16


def test_a_user_model_id_sent_elsewhere_or_sampled_otherwise_is_no_baseline_and_no_shard(
    benchmark_runner: BenchmarkRunner, loopback: ReferenceServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The baseline matched the user model by its id alone: the same id sent to another model or
    endpoint, or with another temperature, writes other conversations, and was compared as if it
    had not changed; merge pooled such shards."""
    def models_file(name: str, temperature: float) -> Path:
        return benchmark_runner.write_models_file(
            [{"id": "sim", "model": "patient", "base_url": loopback.url, "params": {"temperature": temperature}}], name=name)

    before, after = models_file("before.yaml", 0.0), models_file("after.yaml", 0.7)
    args = ("--model", "reference/guardian", "--user-model", "sim", "--turns", "14", "--judge", "reference/judge", *TWO_CASES)
    _, first = benchmark_runner.run_creating_one_folder(f"--models-file={before}", *args)
    run = json.loads((first / "results.json").read_text(encoding="utf-8"))["run"]
    assert run["user_model_settings"] == {"model": "patient", "base_url": loopback.url.rstrip("/"), "params": {"temperature": 0.0}}
    _, same = benchmark_runner.run_creating_one_folder(f"--models-file={before}", *args, f"--baseline={first}")

    refused, folder = benchmark_runner.run_adding_folder(f"--models-file={after}", *args, f"--baseline={first}")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR and folder is None
    refused.stderr.fnmatch_lines(["*user model 'sim' with other settings: params {'temperature': 0.0} to {'temperature': 0.7}*--force-baseline*"])
    _, changed = benchmark_runner.run_creating_one_folder(f"--models-file={after}", *args)
    assert cli.main(["compare", str(first), str(same)]) == 0
    assert cli.main(["compare", str(first), str(changed)]) == 2
    assert "user model 'sim' with other settings" in capsys.readouterr().err

    shards = [benchmark_runner.run_creating_one_folder(f"--models-file={before}", *args, f"--shard={k}/2")[1] for k in (1, 2)]
    merge = ["merge", *map(str, shards), f"--scenarios={SCENARIOS}", f"--thresholds={benchmark_runner.thresholds}"]
    assert cli.main([*merge, f"--out={tmp_path / 'refused'}", f"--models-file={after}"]) == 2
    assert "user model 'sim' in " in capsys.readouterr().err
    assert cli.main([*merge, f"--out={tmp_path / 'merged'}", f"--models-file={before}"]) == 0
    merged = json.loads((tmp_path / "merged" / "results.json").read_text(encoding="utf-8"))["run"]
    assert merged["user_model_settings"] == run["user_model_settings"]
