"""A cascade escalates exactly the doubtful turns whose scores could still decide their case.

`decisive` is checked against brute force on the suite's real gate (thresholds.yaml through
`evaluate_case`): a doubtful turn matters when some levels of the case's doubtful scores and some
other level of one of its own scores give different pass/fail outcomes. Then whole runs: which
turns went to the escalation judge, what the others record, and when the cascade goes turn by turn.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import pytest

from psychosis_tests import __main__ as cli
from psychosis_tests.analysis.outcome import evaluate_case
from psychosis_tests.engine.case_escalation import NOT_DECISIVE, decisive
from psychosis_tests.engine.conversation import Transcript, Turn
from psychosis_tests.engine.plan import Plan
from psychosis_tests.inputs.method import METRIC_SPEC, scope
from psychosis_tests.inputs.rubric import Verdict
from psychosis_tests.inputs.settings import resolve
from psychosis_tests.reports.html import escape
from psychosis_tests.reports.html_summary import summary_html
from psychosis_tests.servers.reference_server import ReferenceServer
from tests.benchmark_runner import BenchmarkRunner

pytest_plugins = ["pytester"]
REPO = Path(__file__).resolve().parents[1]


def _plan(tmp_path: Path, **values) -> Plan:  # noqa: ANN003
    chosen = {"model": ["reference/mixed"], "judge": ["trained"], "escalate_to": ["reference/judge"],
              "report_dir": str(tmp_path)} | values  # fmt: skip
    return Plan.load(resolve(chosen.get, {}, REPO))


def _level(metric: str, kind: str, rng: random.Random) -> int:
    """Mostly the safe level, so that cases sit near their limits rather than far past them."""
    levels = METRIC_SPEC[metric].levels
    direction = scope(metric, kind)
    safe = min(levels) if direction is None or direction.higher_is_worse else max(levels)
    return safe if rng.random() < 0.7 else rng.choice(levels)


def _transcript(plan: Plan, scenario_id: str, rng: random.Random, repeat: int = 0) -> Transcript:
    scenario = plan.scenarios[scenario_id]
    turns = []
    for planned in scenario.plan_turns():
        verdict = (
            Verdict(rationale="r", **{m: _level(m, scenario.kind, rng) for m in planned.metrics})
            if planned.metrics
            else None
        )
        turns.append(Turn(turn=planned.turn, phase=planned.phase, phase_name=planned.phase_name, user="u", reply="r",
                          metrics=list(planned.metrics), verdict=verdict))  # fmt: skip
    return Transcript(model_id="reference/mixed", scenario_id=scenario_id, repeat=repeat, model_version="v",
                      judge_id="casc", turns=turns)  # fmt: skip


def _brute_force(transcripts: list[Transcript], free: dict, passes) -> set:  # noqa: ANN001
    """Every doubtful turn for which some assignment of all doubtful scores and another level of
    one of its own scores flip the outcome."""
    slots = [(key, metric) for key, metrics in free.items() for metric in metrics]

    def outcome(levels: tuple[int, ...]) -> bool:
        chosen = dict(zip(slots, levels, strict=True))
        copies = []
        for t in transcripts:
            turns = []
            for turn in t.turns:
                update = {m: chosen[((t.repeat, turn.turn), m)] for m in free.get((t.repeat, turn.turn), [])}
                turns.append(turn.model_copy(update={"verdict": turn.verdict.model_copy(update=update)}) if update else turn)
            copies.append(t.model_copy(update={"turns": turns}))
        return passes(copies)

    ranges = [METRIC_SPEC[metric].levels for _, metric in slots]
    results = {levels: outcome(levels) for levels in itertools.product(*ranges)}
    found = set()
    for levels, passed in results.items():
        for i, (key, _) in enumerate(slots):
            for other in ranges[i]:
                changed = (*levels[:i], other, *levels[i + 1 :])
                if results[changed] != passed:
                    found.add(key)
    return found


@pytest.mark.parametrize("scenario_id", ["conduit-explicit", "conduit-implicit", "conduit-control-explicit"])
def test_the_decisive_turns_are_exactly_those_brute_force_finds_on_the_real_gate(tmp_path: Path, scenario_id: str) -> None:
    plan = _plan(tmp_path)
    key = next(k for k in plan.cases() if k.scenario_id == scenario_id)
    kind = plan.scenarios[scenario_id].kind

    def passes(transcripts: list[Transcript]) -> bool:
        return evaluate_case(plan, key, transcripts, 0.0).gate_failure() is None

    rng = random.Random(7)
    seen = {True: 0, False: 0}
    for _ in range(30):
        transcripts = [_transcript(plan, scenario_id, rng)]
        scored = [(0, t.turn, t.metrics) for t in transcripts[0].turns if t.metrics]
        free = {}
        for _, turn, metrics in rng.sample(scored, rng.randint(1, 4)):
            doubtful = rng.sample(metrics, rng.randint(1, min(2, len(metrics))))
            free[(0, turn)] = doubtful
        expected = _brute_force(transcripts, free, passes)
        assert decisive(transcripts, free, kind, passes) == expected, free
        seen[bool(expected)] += 1
    assert seen[True] and seen[False]  # the draws covered cases with and without decisive turns


def test_with_repeats_the_phase_pools_the_conversations(tmp_path: Path) -> None:
    plan = _plan(tmp_path, repeats=2)
    key = next(k for k in plan.cases() if k.scenario_id == "conduit-explicit")

    def passes(transcripts: list[Transcript]) -> bool:
        return evaluate_case(plan, key, transcripts, 0.0).gate_failure() is None

    rng = random.Random(11)
    for _ in range(10):
        transcripts = [_transcript(plan, "conduit-explicit", rng, repeat=r) for r in range(2)]
        free = {(r, turn): ["sis"] for r, turn in rng.sample([(r, t) for r in range(2) for t in (10, 11, 12)], 3)}
        assert decisive(transcripts, free, "delusion", passes) == _brute_force(transcripts, free, passes)


def test_the_case_by_case_choice_is_off_where_its_reasoning_does_not_hold(tmp_path: Path) -> None:
    assert _plan(tmp_path).case_by_case
    earlier = tmp_path / "earlier" / "results.json"
    earlier.parent.mkdir()
    earlier.write_text(json.dumps({"format": "psychosis-bench-results/1", "run": {"run_id": "r", "judge": "trained>reference/judge",
                                   "scenario_set_hash": "x"}, "cases": []}), encoding="utf-8")  # fmt: skip
    assert _plan(tmp_path, baseline=str(earlier), force_baseline=True).case_by_case  # a baseline changes no escalation
    trajectory = tmp_path / "thresholds.yaml"
    text = (REPO / "thresholds.yaml").read_text(encoding="utf-8")
    trajectory.write_text(text + "\ntrajectory: {earliest_validation_turn: 6}\n", encoding="utf-8")
    assert not _plan(tmp_path, thresholds=str(trajectory)).case_by_case
    bound = tmp_path / "bound.yaml"
    bound.write_text(text.replace("gate: mean ", "gate: bound "), encoding="utf-8")
    assert _plan(tmp_path, thresholds=str(bound)).case_by_case  # one repeat: the bound is the mean
    assert not _plan(tmp_path, thresholds=str(bound), repeats=3).case_by_case
    own = tmp_path / "pack.yaml"  # a pack's own limits have no gate of their own: the file's gate is theirs
    own.write_text(text + "\npacks: {clinical: {controls: {occ: {pattern-seeking: 'off'}}}}\n", encoding="utf-8")
    assert _plan(tmp_path, thresholds=str(own), pack=["clinical"]).case_by_case
    bound_own = tmp_path / "bound-pack.yaml"
    bound_own.write_text(own.read_text(encoding="utf-8").replace("gate: mean ", "gate: bound "), encoding="utf-8")
    assert not _plan(tmp_path, thresholds=str(bound_own), pack=["clinical"], repeats=3).case_by_case


def _verdicts(run_dir: Path) -> list[dict]:
    return [
        turn["verdict"]
        for case_file in sorted((run_dir / "cases").glob("*.json"))
        for transcript in json.loads(case_file.read_text(encoding="utf-8"))["transcripts"]
        for turn in transcript["turns"]
        if turn["verdict"] is not None
    ]


def test_a_run_escalates_only_decisive_turns_and_the_others_say_why_they_stood(
    benchmark_runner: BenchmarkRunner, loopback: ReferenceServer
) -> None:
    models = benchmark_runner.write_models_file([{"id": "expensive", "model": "judge", "base_url": loopback.url}])
    args = (f"--models-file={models}", "--model=reference/mixed", "--model=reference/sycophant", "--judge=trained",
            "--escalate-to=expensive", "--escalate-threshold=0.9", "-k", "conduit")  # fmt: skip
    _, run_dir = benchmark_runner.run_creating_one_folder(*args)
    verdicts = _verdicts(run_dir)
    escalated = [v for v in verdicts if v.get("escalated")]
    kept = [v for v in verdicts if v.get("kept")]
    # At 0.9 most turns are doubtful; some decided their case and some could not.
    assert escalated and kept
    assert loopback.requests_for("judge") == len(escalated)
    assert all(v["decided_by"] == "expensive" and "kept" not in v for v in escalated)
    assert all(v["decided_by"] == "trained" and v["kept"].endswith(NOT_DECISIVE) and " < 0.90" in v["kept"] for v in kept)
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))["escalation"]
    assert summary["escalated_turns"] == len(escalated) and summary["kept_doubtful_turns"] == len(kept)
    rows = [t for case in json.loads((run_dir / "results.json").read_text(encoding="utf-8"))["cases"] for t in case["turns"]]
    assert sorted(r.get("decided_by") for r in rows) == sorted(v["decided_by"] for v in verdicts)
    assert sum(bool(r.get("escalated")) for r in rows) == len(escalated)
    assert sum(bool(r.get("kept")) for r in rows) == len(kept)
    assert json.loads((run_dir / "results.json").read_text(encoding="utf-8"))["run"]["escalation"] == summary
    line = f"cascade trained>expensive: escalated {len(escalated)} of {len(verdicts)} judged turns"
    assert f"({len(kept)} more were doubtful but could not change their case's outcome)" in (run_dir / "summary.md").read_text(encoding="utf-8")
    assert escape(line) in summary_html(json.loads((run_dir / "summary.json").read_text(encoding="utf-8")))  # Allure's summary


def test_the_outcomes_equal_those_of_escalating_every_doubtful_turn(
    benchmark_runner: BenchmarkRunner, loopback: ReferenceServer
) -> None:
    """What the cascade skips cannot change a case: the same run with the choice off (a trajectory
    limit no case can break turns it off) gives the same outcomes, with more turns escalated."""
    models = benchmark_runner.write_models_file([{"id": "expensive", "model": "judge", "base_url": loopback.url}])
    thresholds = benchmark_runner.path / "every-doubt.yaml"
    thresholds.write_text((REPO / "thresholds.yaml").read_text(encoding="utf-8") + "\ntrajectory: {earliest_validation_turn: 1}\n",
                          encoding="utf-8")  # fmt: skip
    args = (f"--models-file={models}", "--model=reference/mixed", "--model=reference/guardian", "--model=reference/sycophant",
            "--judge=trained", "--escalate-to=expensive", "--escalate-threshold=0.8", "-k", "conduit")  # fmt: skip
    outcomes, escalated = {}, {}
    for name, extra in (("case", ()), ("turn", (f"--thresholds={thresholds}",))):
        _, run_dir = benchmark_runner.run_creating_one_folder(*args, *extra)
        results = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
        outcomes[name] = {(c["model"], c["scenario"]): c["outcome"] for c in results["cases"]}
        escalated[name] = sum(bool(v.get("escalated")) for v in _verdicts(run_dir))
    assert outcomes["case"] == outcomes["turn"]
    assert 0 < escalated["case"] < escalated["turn"]


def test_estimate_plans_a_cascade_from_the_rate_its_last_run_measured(
    benchmark_runner: BenchmarkRunner, loopback: ReferenceServer
) -> None:
    models = benchmark_runner.write_models_file([{"id": "expensive", "model": "judge", "base_url": loopback.url}])
    args = (f"--models-file={models}", "--model=reference/mixed", "--judge=trained", "--escalate-to=expensive",
            "--escalate-threshold=0.9", "-k", "conduit-explicit")  # fmt: skip
    values = {"model": ["reference/mixed"], "judge": ["trained"], "escalate_to": ["expensive"],
              "escalate_threshold": "0.9", "models_file": str(models), "report_dir": str(benchmark_runner.report_dir)}  # fmt: skip
    before = Plan.load(resolve(values.get, {}, REPO))
    assert before.escalation(before.panel.judges[0])[1].startswith("no measured rate")
    _, run_dir = benchmark_runner.run_creating_one_folder(*args)
    measured = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))["escalation"]["rate"]
    after = Plan.load(resolve(values.get, {}, REPO))
    assert after.escalation(after.panel.judges[0]) == (measured, f"measured by run {run_dir.name}")
    other = Plan.load(resolve((values | {"escalate_threshold": "0.8"}).get, {}, REPO))  # another cascade
    assert other.escalation(other.panel.judges[0])[1].startswith("no measured rate")


def test_estimate_of_a_cascade_that_escalates_every_doubtful_turn_counts_a_past_runs_doubtful_turns(
    benchmark_runner: BenchmarkRunner, loopback: ReferenceServer
) -> None:
    """A run that settled its cases alone escalated only its decisive turns; in a panel, or with
    trajectory limits, the same cascade escalates every doubtful one, so it is planned on those."""
    models = benchmark_runner.write_models_file([
        {"id": "expensive", "model": "judge", "base_url": loopback.url},
        {"id": "cascade", "kind": "cascade", "first": "trained", "escalate_to": "expensive", "thresholds": {"dcs": 0.9, "hes": 0.9}},
    ])  # fmt: skip
    args = (f"--models-file={models}", "--model=reference/mixed", "-k", "conduit and not control")
    _, alone = benchmark_runner.run_creating_one_folder(*args, "--judge=cascade")
    measured = json.loads((alone / "summary.json").read_text(encoding="utf-8"))["escalation"]
    doubtful = (measured["escalated_turns"] + measured["kept_doubtful_turns"]) / measured["judged_turns"]
    assert measured["kept_doubtful_turns"] and measured["rate"] < doubtful

    def planned(**values: object) -> float:
        chosen = {"model": ["reference/mixed"], "judge": ["cascade"], "models_file": str(models),
                  "report_dir": str(benchmark_runner.report_dir)} | values  # fmt: skip
        plan = Plan.load(resolve(chosen.get, {}, REPO))
        return plan.escalation(plan.panel.judges[0])[0]

    trajectory = benchmark_runner.path / "trajectory.yaml"
    trajectory.write_text((REPO / "thresholds.yaml").read_text(encoding="utf-8") + "\ntrajectory: {max_drift: 1}\n", encoding="utf-8")
    assert planned() == pytest.approx(measured["rate"])
    assert planned(judge=["cascade", "reference/judge"]) == pytest.approx(doubtful)
    assert planned(thresholds=str(trajectory)) == pytest.approx(doubtful)
    _, in_panel = benchmark_runner.run_creating_one_folder(*args, "--judge=cascade", "--judge=reference/judge")
    assert json.loads((in_panel / "summary.json").read_text(encoding="utf-8"))["escalation"]["rate"] == pytest.approx(doubtful)


def test_a_baseline_changes_no_escalation_and_an_identical_run_shows_no_regression(
    benchmark_runner: BenchmarkRunner, loopback: ReferenceServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """The regression check compares verdicts chosen by one rule on both sides; a cascade with other
    thresholds scores the same replies differently and is refused as a baseline, unless forced."""
    models = benchmark_runner.write_models_file([{"id": "expensive", "model": "judge", "base_url": loopback.url}])
    args = (f"--models-file={models}", "--model=reference/mixed", "--judge=trained", "--escalate-to=expensive",
            "--escalate-threshold=0.9", "-k", "conduit and not control")  # fmt: skip
    _, first = benchmark_runner.run_creating_one_folder(*args)
    _, second = benchmark_runner.run_creating_one_folder(*args, f"--baseline={first}")
    assert _verdicts(second) == _verdicts(first)
    assert any(v.get("kept") for v in _verdicts(first)) and any(v.get("escalated") for v in _verdicts(first))
    cases = {c["scenario"]: c for c in json.loads((second / "results.json").read_text(encoding="utf-8"))["cases"]}
    earlier = {c["scenario"]: c for c in json.loads((first / "results.json").read_text(encoding="utf-8"))["cases"]}
    assert len(cases) == 2 and all(c["comparisons"] and not c["regressions"] and not c["improvements"] for c in cases.values())
    assert {k: c["outcome"] for k, c in cases.items()} == {k: c["outcome"] for k, c in earlier.items()}
    assert cli.main(["compare", str(first), str(second)]) == 0
    assert "0 regression(s)" in capsys.readouterr().out

    other = (*args[:4], "--escalate-threshold=0.95", *args[5:])
    refused, folder = benchmark_runner.run_adding_folder(*other, f"--baseline={first}")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR and folder is None
    refused.stderr.fnmatch_lines(["*judge 'trained>expensive' with other settings: cascade thresholds dcs 0.9 to 0.95, hes 0.9 to 0.95*--force-baseline*"])
    _, third = benchmark_runner.run_creating_one_folder(*other)
    assert cli.main(["compare", str(first), str(third)]) == 2
    assert "cascade thresholds dcs 0.9 to 0.95" in capsys.readouterr().err
    assert cli.main(["compare", str(first), str(third), "--force"]) in (0, 1)
    assert "compared although not comparable: judge 'trained&gt;expensive' with other settings" in capsys.readouterr().out  # markdown

    # A comment edited and the file laid out anew change no limit: the baseline still matches (the
    # hash was of the file's bytes, so a cascade's baselines had to be recorded again).
    commented = benchmark_runner.path / "commented-limits.yaml"
    commented.write_text("# reviewed for the next release\n" + (REPO / "thresholds.yaml").read_text(encoding="utf-8")
                         .replace("\n\n", "\n").replace("{dcs: 0.25, hes: 0.25", "{hes: 0.25, dcs: 0.25"), encoding="utf-8")  # fmt: skip
    _, fifth = benchmark_runner.run_creating_one_folder(*args, f"--thresholds={commented}", f"--baseline={first}")
    assert _verdicts(fifth) == _verdicts(first)
    compared = json.loads((fifth / "results.json").read_text(encoding="utf-8"))["cases"]
    assert len(compared) == 2 and all(c["comparisons"] and not c["regressions"] for c in compared)

    # The same cascade gated by another thresholds file escalates other turns: refused as well.
    limits = benchmark_runner.path / "other-limits.yaml"
    limits.write_text((REPO / "thresholds.yaml").read_text(encoding="utf-8").replace("gate: mean ", "gate: bound "), encoding="utf-8")
    refused, folder = benchmark_runner.run_adding_folder(*args, f"--thresholds={limits}", f"--baseline={first}")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR and folder is None
    refused.stderr.fnmatch_lines(["*thresholds file * in the baseline, * now (a cascade escalates the turns*--force-baseline*"])
    _, fourth = benchmark_runner.run_creating_one_folder(*args, f"--thresholds={limits}")
    assert cli.main(["compare", str(first), str(fourth)]) == 2
    assert "a cascade escalates the turns that can tip a case" in capsys.readouterr().err


def test_merge_refuses_to_gate_a_cascades_shards_with_other_limits(
    benchmark_runner: BenchmarkRunner, capsys: pytest.CaptureFixture[str]
) -> None:
    """The shards escalated what their limits made decisive; other limits could be decided by scores they kept."""
    args = ("--model=reference/mixed", "--judge=trained", "--escalate-to=reference/judge", "--escalate-threshold=0.9", "-k", "conduit")
    shards = [benchmark_runner.run_creating_one_folder(*args, f"--shard={k}/2")[1] for k in (1, 2)]
    other = benchmark_runner.path / "other-limits.yaml"
    other.write_text((REPO / "thresholds.yaml").read_text(encoding="utf-8").replace("gate: mean ", "gate: bound "), encoding="utf-8")
    common = ["merge", *map(str, shards), f"--scenarios={benchmark_runner.scenarios}"]
    assert cli.main([*common, "--out", str(benchmark_runner.path / "refused"), f"--thresholds={other}"]) == 2
    err = capsys.readouterr().err
    assert "is not the thresholds file the shards gated with, and their judge 'trained>reference/judge' is a cascade" in err
    assert not (benchmark_runner.path / "refused").exists()
    assert cli.main([*common, "--out", str(benchmark_runner.path / "merged"), f"--thresholds={benchmark_runner.thresholds}"]) in (0, 1)
    assert (benchmark_runner.path / "merged" / "results.json").exists()


def test_the_newest_run_measures_the_rate_whatever_its_folder_is_called(tmp_path: Path) -> None:
    """A merged run's folder is named by --out ("merged"), which sorted after every timestamped run
    folder: an older merged run's rate was taken over a newer run's."""
    import os

    from psychosis_tests.records.past_runs import measured_escalation

    def run(folder: str, rate: float, written: float) -> None:
        results = tmp_path / folder / "results.json"
        results.parent.mkdir()
        run = {"run_id": folder, "judge_fingerprint": {"hash": "f"}, "escalation": {"judged_turns": 10, "rate": rate}}
        results.write_text(json.dumps({"run": run}), encoding="utf-8")
        os.utime(results, (written, written))

    run("merged", 0.5, 1_000)
    run("20261129-090000-abcd", 0.0, 2_000)
    assert measured_escalation(tmp_path, "f") == (0.0, "20261129-090000-abcd")


def test_a_cascade_runs_items_for_train_judge_are_its_escalated_turns_only(
    benchmark_runner: BenchmarkRunner, loopback: ReferenceServer
) -> None:
    """train-judge --from-run distils the paid judge: the turns the trained first judge decided
    itself are not labels of it, and training on them taught the judge its own verdicts."""
    from psychosis_tests.analysis.run_items import items_from_run
    from psychosis_tests.inputs.scenarios import load_scenarios
    from psychosis_tests.records.results_file import load_results

    models = benchmark_runner.write_models_file([{"id": "expensive", "model": "judge", "base_url": loopback.url}])
    _, run_dir = benchmark_runner.run_creating_one_folder(
        f"--models-file={models}", "--model=reference/mixed", "--judge=trained", "--escalate-to=expensive",
        "--escalate-threshold=0.9", "-k", "conduit-explicit",
    )  # fmt: skip
    verdicts = _verdicts(run_dir)
    escalated = [v for v in verdicts if v.get("escalated")]
    assert escalated and len(escalated) < len(verdicts)
    items, notes = items_from_run(run_dir, load_results(run_dir), {s.id: s for s in load_scenarios(REPO / "scenarios")})
    assert len(items) == len(escalated)
    assert notes == [f"reference/mixed / conduit-explicit: {len(verdicts) - len(escalated)} turn(s) decided by the cascade's "
                     "first judge (not escalated); skipped"]  # fmt: skip
