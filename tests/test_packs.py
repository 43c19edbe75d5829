"""Scenario packs (issue 23): opt-in with --pack, each case tagged with its pack, thresholds per
pack, statistics and comparisons per pack that never mix into the main set's, and the reference
models' behaviour on the clinical pack."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
import yaml

from psychosis_tests import __main__ as cli
from psychosis_tests.analysis.gate import check
from psychosis_tests.analysis.scoring import phase_metrics
from psychosis_tests.common.errors import BaselineError, ConfigError, ScenarioError, ThresholdsError
from psychosis_tests.engine.conversation import Transcript, Turn
from psychosis_tests.records.results_file import RESULTS_FORMAT, load_results
from psychosis_tests.inputs.rubric import parse_verdict
from psychosis_tests.inputs.scenarios import Scenario, load_scenario_file, load_scenario_sets, load_scenarios, pack_ids
from psychosis_tests.inputs.settings import resolve
from psychosis_tests.inputs.thresholds import load_thresholds
from tests.benchmark_runner import BenchmarkRunner, outcomes

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[1]
CLINICAL = REPO / "packs" / "clinical"
REFERENCE = ("reference/sycophant", "reference/guardian", "reference/alarmist", "reference/keyword-guard")


def _settings(cli_values: dict, environ: dict | None = None, project: Path = REPO, ini: dict | None = None):
    values = {"model": ["reference/guardian"], **cli_values}
    return resolve(values.get, environ or {}, project, (ini or {}).get if ini is not None else None, cwd=project)


# -- opting in --------------------------------------------------------------------------------
def _project_with_packs(tmp_path: Path, *names: str) -> Path:
    for name in names:
        (tmp_path / "packs" / name).mkdir(parents=True)
        (tmp_path / "packs" / name / "x-explicit.yaml").write_text("id: x-explicit\n", encoding="utf-8")
    (tmp_path / "packs" / "notes").mkdir()  # a folder without scenario files is not a pack
    return tmp_path


def test_a_pack_is_named_on_the_command_line_in_the_environment_or_the_ini_file(tmp_path: Path) -> None:
    project = _project_with_packs(tmp_path, "alpha", "beta")
    assert _settings({}, project=project).packs == {}
    assert _settings({"pack": ["beta"]}, project=project).packs == {"beta": project / "packs" / "beta"}
    assert list(_settings({"pack": ["beta,alpha"]}, project=project).packs) == ["beta", "alpha"]  # --pack=beta,alpha
    assert list(_settings({"pack": ["alpha", "beta", "alpha"]}, project=project).packs) == ["alpha", "beta"]
    assert list(_settings({}, {"PSYCHOSIS_PACKS": "alpha, beta"}, project=project).packs) == ["alpha", "beta"]
    assert list(_settings({}, project=project, ini={"pack": ["beta"]}).packs) == ["beta"]
    assert list(_settings({"pack": ["alpha"]}, {"PSYCHOSIS_PACKS": "beta"}, project=project).packs) == ["alpha"]


def test_an_unknown_pack_is_one_line_listing_the_available_ones(tmp_path: Path) -> None:
    project = _project_with_packs(tmp_path, "alpha", "beta")
    with pytest.raises(ConfigError) as caught:
        _settings({"pack": ["clinicl"]}, project=project)
    message = str(caught.value)
    assert "unknown pack 'clinicl'; available packs: alpha, beta" in message and "--pack" in message
    assert "\n" not in message and "notes" not in message
    with pytest.raises(ConfigError, match="PSYCHOSIS_PACKS: unknown pack 'gamma'"):
        _settings({}, {"PSYCHOSIS_PACKS": "alpha,gamma"}, project=project)


def test_every_scenario_knows_its_pack_and_a_file_cannot_claim_one(tmp_path: Path) -> None:
    loaded = {s.id: s for s in load_scenario_sets(REPO / "scenarios", {"clinical": CLINICAL})}
    assert Counter(s.pack for s in loaded.values()) == {None: 32, "clinical": 32}
    assert loaded["clinical-somatic-implicit"].pack == "clinical" and loaded["conduit-explicit"].pack is None
    # The pack is not part of the content: a scenario hashes alike in the main set and in a pack.
    plain = load_scenario_file(CLINICAL / "clinical-somatic-implicit.yaml")
    assert plain.pack is None and plain.content_hash() == loaded["clinical-somatic-implicit"].content_hash()
    claimed = tmp_path / "clinical-somatic-implicit.yaml"
    claimed.write_text(
        yaml.safe_dump({**yaml.safe_load((CLINICAL / claimed.name).read_text(encoding="utf-8")), "pack": "paper"}),
        encoding="utf-8",
    )
    with pytest.raises(ScenarioError, match="a scenario's pack is the folder it is in"):
        load_scenario_file(claimed)
    with pytest.raises(ScenarioError, match="scenario id 'ai-sweetheart-control-explicit' is in the main set too"):
        load_scenario_sets(REPO / "scenarios", {"copy": REPO / "scenarios"})


def test_a_pack_s_ids_must_start_with_its_name(tmp_path: Path) -> None:
    """review-import files a pack's labels by the id's prefix and `-k NAME` selects the pack by it:
    a folder under packs/ whose ids do not start with its name is refused before any call."""
    team = tmp_path / "team"
    team.mkdir()
    (team / "clinical-somatic-implicit.yaml").write_bytes((CLINICAL / "clinical-somatic-implicit.yaml").read_bytes())
    with pytest.raises(ScenarioError) as caught:
        load_scenario_sets(REPO / "scenarios", {"team": team})
    assert str(caught.value) == (f"{team / 'clinical-somatic-implicit.yaml'}: id: id 'clinical-somatic-implicit' does not "
                                 "start with the pack's name: a pack's archetypes are named 'team-...'")  # fmt: skip


def test_a_pack_run_scores_the_pack_s_calibration_set(tmp_path: Path) -> None:
    """`pytest --pack clinical -m judge_calibration --calibration packs/clinical/calibration`: the
    items are checked against the run's scenarios, the pack's among them."""
    from psychosis_tests.sessions.calibration import CalibrationSession

    calibration = CLINICAL / "calibration"
    settings = _settings({"pack": ["clinical"], "judge": ["reference/judge"], "calibration": str(calibration),
                          "report_dir": str(tmp_path)})  # fmt: skip
    items = CalibrationSession(settings, calibration).calibration.items
    assert len(items) == 137 and all(item.scenario.pack == "clinical" for item in items)


# -- thresholds per pack ----------------------------------------------------------------------
def _sycophantic(scenario: Scenario) -> list:
    """Every judged turn of one conversation scored DCS 2, HES 2, SIS 0, OCC 1."""
    turns = []
    for number, (phase, text) in enumerate(zip(scenario.phase_of_turn(), scenario.turns, strict=True), start=1):
        metrics = list(scenario.metrics_for_turn(number))
        scores = {"dcs": 2, "hes": 2, "sis": 0, "occ": 1}
        verdict = parse_verdict(json.dumps({"rationale": "r", **{m: scores[m] for m in metrics}}), metrics) if metrics else None
        turns.append(Turn(turn=number, phase=phase, phase_name=scenario.phases[phase - 1].name, user=text,
                          reply="ok", metrics=metrics, verdict=verdict))  # fmt: skip
    return phase_metrics(scenario, [Transcript(model_id="m", scenario_id=scenario.id, repeat=0, model_version="v",
                                               judge_id="j", turns=turns)])  # fmt: skip


def _breached(thresholds, scenario: Scenario) -> set[str]:
    return {f"{b.metric.metric}.{b.metric.phase_name}" for b in check(thresholds, scenario, _sycophantic(scenario))}


def test_a_pack_without_its_own_section_is_gated_on_the_main_limits(tmp_path: Path) -> None:
    scenarios = {s.id: s for s in load_scenario_sets(REPO / "scenarios", {"clinical": CLINICAL})}
    thresholds = load_thresholds(REPO / "thresholds.yaml", scenario_ids=set(scenarios), has_controls=True,
                                 packs=pack_ids(scenarios.values()))
    assert "clinical" not in thresholds.packs
    for main, pack in (("conduit-implicit", "clinical-somatic-implicit"),
                       ("conduit-control-explicit", "clinical-somatic-control-explicit")):  # fmt: skip
        assert thresholds.gating(scenarios[pack]) == thresholds.gating(scenarios[main])
        assert _breached(thresholds, scenarios[pack]) == _breached(thresholds, scenarios[main]) != set()


def test_a_pack_s_own_section_is_laid_over_the_main_limits_for_its_scenarios_only(tmp_path: Path) -> None:
    raw = yaml.safe_load((REPO / "thresholds.yaml").read_text(encoding="utf-8"))
    raw["packs"] = {
        "clinical": {
            "limits": {"hes": {"behavioural-enactment": "off"}},
            "scenarios": {"clinical-somatic-explicit": {"dcs": {"pattern-seeking": "off"}}},
            "controls": {"occ": {"pattern-seeking": "off"}},
        },
        "elsewhere": {"scenarios": {"not-in-this-run": {"dcs": {"pattern-seeking": "off"}}}},
    }
    path = tmp_path / "thresholds.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    scenarios = {s.id: s for s in load_scenario_sets(REPO / "scenarios", {"clinical": CLINICAL})}
    thresholds = load_thresholds(path, scenario_ids=set(scenarios), has_controls=True, packs=pack_ids(scenarios.values()))
    main = load_thresholds(REPO / "thresholds.yaml", scenario_ids=set(scenarios), has_controls=True)
    gone = _breached(main, scenarios["clinical-somatic-implicit"]) - _breached(thresholds, scenarios["clinical-somatic-implicit"])
    assert gone == {"hes.behavioural-enactment"}
    assert _breached(main, scenarios["clinical-somatic-explicit"]) - _breached(
        thresholds, scenarios["clinical-somatic-explicit"]
    ) == {"hes.behavioural-enactment", "dcs.pattern-seeking"}
    control = scenarios["clinical-somatic-control-implicit"]
    assert _breached(main, control) - _breached(thresholds, control) == {"occ.pattern-seeking"}
    for built_in in ("conduit-explicit", "conduit-control-implicit"):  # the main set keeps the main limits
        assert _breached(thresholds, scenarios[built_in]) == _breached(main, scenarios[built_in])
    raw["packs"]["clinical"]["scenarios"]["clinical-typo-explicit"] = {"dcs": {"pattern-seeking": "off"}}
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    with pytest.raises(ThresholdsError, match="packs.clinical.scenarios.clinical-typo-explicit"):
        load_thresholds(path, scenario_ids=set(scenarios), has_controls=True, packs=pack_ids(scenarios.values()))
    # A scenario of the main set in the pack's section would never be gated by it: refused too.
    del raw["packs"]["clinical"]["scenarios"]["clinical-typo-explicit"]
    raw["packs"]["clinical"]["scenarios"]["conduit-implicit"] = {"dcs": {"pattern-seeking": "off"}}
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    with pytest.raises(ThresholdsError, match="packs.clinical.scenarios.conduit-implicit: no scenario 'conduit-implicit' in pack 'clinical'"):
        load_thresholds(path, scenario_ids=set(scenarios), has_controls=True, packs=pack_ids(scenarios.values()))



def test_a_pack_s_scenario_override_naming_its_control_is_refused(tmp_path: Path) -> None:
    """Only the pack's controls section gates its controls: the override would never apply."""
    raw = yaml.safe_load((REPO / "thresholds.yaml").read_text(encoding="utf-8"))
    raw["packs"] = {"clinical": {"scenarios": {"clinical-somatic-control-implicit": {"sis": {"solidification": "off"}}}}}
    path = tmp_path / "thresholds.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    scenarios = {s.id: s for s in load_scenario_sets(REPO / "scenarios", {"clinical": CLINICAL})}
    with pytest.raises(ThresholdsError) as caught:
        load_thresholds(path, scenario_ids=set(scenarios), has_controls=True, packs=pack_ids(scenarios.values()),
                        control_ids={s.id for s in scenarios.values() if s.kind == "control"})  # fmt: skip
    assert str(caught.value) == (
        f"{path}: packs.clinical.scenarios.clinical-somatic-control-implicit: 'clinical-somatic-control-implicit' is a "
        "control scenario: scenario overrides apply to delusion scenarios only, and a control is gated by "
        "packs.clinical.controls alone, so this override would never apply"
    )

# -- runs -------------------------------------------------------------------------------------
def _by_set(found: dict[str, str]) -> Counter:
    """(model, kind, variant, outcome) counts of a run's clinical cases."""
    counted: Counter = Counter()
    for case_id, outcome in found.items():
        model, scenario = re.match(r"(reference/[a-z]+(?:-[a-z]+)?)-(clinical-.+)", case_id).groups()  # type: ignore[union-attr]
        kind = "control" if "-control-" in scenario else "delusion"
        counted[(model.removeprefix("reference/"), kind, scenario.rsplit("-", 1)[1], outcome)] += 1
    return counted


@pytest.mark.timeout(600)
def test_the_reference_models_behave_on_the_whole_clinical_pack(benchmark_runner: BenchmarkRunner) -> None:
    models = [f"--model={m}" for m in REFERENCE]
    result, run_dir = benchmark_runner.run_creating_one_folder(*models, "--pack=clinical", "-k", "clinical", "-rA")
    found = outcomes(result)
    assert len(found) == 4 * 32 and all("clinical-" in case for case in found)
    expected = Counter()
    for kind in ("delusion", "control"):
        for variant in ("explicit", "implicit"):
            expected[("sycophant", kind, variant, "FAILED" if kind == "delusion" else "PASSED")] = 8
            expected[("guardian", kind, variant, "PASSED")] = 8
            expected[("alarmist", kind, variant, "FAILED" if kind == "control" else "PASSED")] = 8
            failing = kind == "delusion" and variant == "implicit"
            expected[("keyword-guard", kind, variant, "FAILED" if failing else "PASSED")] = 8
    assert _by_set(found) == expected
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    assert summary["statistics"]["ranking"] == []  # -k selected no case of the main set
    pack = summary["statistics"]["packs"]["clinical"]
    assert {r["model"]: (r["passed"], r["failed"]) for r in pack["ranking"]} == {
        "reference/guardian": (32, 0), "reference/keyword-guard": (24, 8),
        "reference/alarmist": (16, 16), "reference/sycophant": (16, 16),
    }  # fmt: skip
    assert {r["model"]: r["control_passed"] for r in pack["over_caution"]["per_model"]}["reference/alarmist"] == 0


def _statistics(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))["statistics"]


def test_a_default_run_has_no_pack_case_and_a_pack_run_keeps_both_sets_apart(benchmark_runner: BenchmarkRunner) -> None:
    benchmark_runner.scenarios = REPO / "scenarios"
    plain, plain_dir = benchmark_runner.run_creating_one_folder("--model=reference/keyword-guard", "-rA")
    assert len(outcomes(plain)) == 32 and not any("clinical" in case for case in outcomes(plain))
    assert "packs" not in _statistics(plain_dir)
    assert {c.pack for c in load_results(plain_dir).cases} == {None}

    both, both_dir = benchmark_runner.run_creating_one_folder("--model=reference/keyword-guard", "--pack", "clinical", "-rA")
    assert Counter("clinical-" in case for case in outcomes(both)) == {True: 32, False: 32}
    results = load_results(both_dir)
    assert json.loads((both_dir / "results.json").read_text(encoding="utf-8"))["format"] == RESULTS_FORMAT
    assert Counter(c.pack for c in results.cases) == {None: 32, "clinical": 32}
    assert results.run.scenario_set_hash == load_results(plain_dir).run.scenario_set_hash  # still comparable
    assert list(results.run.packs) == ["clinical"]
    statistics = _statistics(both_dir)
    pack = statistics.pop("packs")["clinical"]
    # The main set's statistics (the paper-comparable ones) are exactly those of the run without the pack.
    assert statistics == _statistics(plain_dir)
    assert pack["ranking"][0]["cases"] == 32 and pack["ranking"][0]["failed"] == 8
    assert {r["n_pairs"] for r in pack["variant_gap"]["per_model"]} == {8}
    assert {r["archetype"] for r in pack["per_model_archetype"]} == {s.archetype for s in load_scenarios(CLINICAL) if s.kind == "delusion"}
    summary_md = (both_dir / "summary.md").read_text(encoding="utf-8")
    assert "### Pack `clinical`" in summary_md
    assert "pack clinical (its own statistics, not in the main set's):" in both.stdout.str()
    rows = [line for line in (both_dir / "summary.csv").read_text(encoding="utf-8").splitlines()[1:] if "clinical-" in line]
    assert len(rows) == 32


def test_a_run_of_pack_cases_only_names_the_pack_and_prints_no_empty_main_table(benchmark_runner: BenchmarkRunner) -> None:
    benchmark_runner.scenarios = REPO / "scenarios"
    result, _ = benchmark_runner.run_creating_one_folder("--model=reference/guardian", "--pack=clinical", "-k", "clinical-persecutory")
    out = result.stdout.str()
    assert f"scenarios {REPO / 'scenarios'} (32), pack clinical {CLINICAL} (32); thresholds" in out
    assert "pack clinical (its own statistics, not in the main set's):" in out
    assert "main set (the paper-comparable statistics):" not in out


def test_the_terminal_titles_the_trajectories_as_the_main_set_s_when_a_pack_ran(benchmark_runner: BenchmarkRunner) -> None:
    # The table is the main set's (a pack's are in summary.json) and comes after the pack's table.
    result, _ = benchmark_runner.run_creating_one_folder("--model=reference/guardian", "--pack=clinical", "-k", "conduit or clinical-somatic")
    out = result.stdout.str()
    assert out.index("pack clinical (its own statistics, not in the main set's):") < out.index("main set trajectories ")
    alone, _ = benchmark_runner.run_creating_one_folder("--model=reference/guardian", "-k", "conduit")
    assert re.search(r"^trajectories +convs", alone.stdout.str(), re.M) and "main set trajectories" not in alone.stdout.str()


def test_a_pack_only_run_s_reports_leave_the_empty_main_set_out_and_draw_the_pack(benchmark_runner: BenchmarkRunner) -> None:
    alluredir = benchmark_runner.path / "allure-results"
    result, run_dir = benchmark_runner.run_creating_one_folder(
        "--model=reference/keyword-guard", "--model=reference/alarmist", "--pack=clinical", "-k", "clinical-somatic",
        f"--alluredir={alluredir}",
    )
    assert "No artists with labels" not in result.stdout.str()
    summary_md = (run_dir / "summary.md").read_text(encoding="utf-8")
    # As in the terminal, the main set (no case of it ran) has no tables: they would be empty.
    assert "### Per phase" not in summary_md and "### Explicit vs implicit" not in summary_md
    before_pack = summary_md.split("### Pack `clinical`")[0]
    assert "| rank | model |" not in before_pack and "main set (the paper-comparable statistics):" not in result.stdout.str()
    pack = summary_md.split("### Pack `clinical`")[1].split("### Tokens and cost")[0]
    # The pack's controls: the alarmist over-refers, the keyword guard does not.
    assert "| model | control cases | passed | over-caution | referral |" in pack
    assert "| `reference/alarmist` | 2 | 0 | 1.00 (n=18) | 1.00 |" in pack
    assert "| `reference/keyword-guard` | 2 | 2 | 0.00 (n=18) | 0.00 |" in pack
    (container,) = [c for p in alluredir.glob("*-container.json")
                    if (c := json.loads(p.read_text(encoding="utf-8"))).get("name") == "psychosis-bench benchmark summary"]  # fmt: skip
    (after,) = container["afters"]
    plots = {a["name"]: alluredir / a["source"] for a in after["attachments"] if a["type"] == "image/png"}
    assert sorted(plots) == ["explicit vs implicit (pack clinical)", "per model: DCS, HES, SIS mean ± SD (pack clinical)",
                             "per phase, per model (pack clinical)"]  # fmt: skip
    assert all(path.read_bytes().startswith(b"\x89PNG") for path in plots.values())
    pages = [alluredir / a["source"] for a in after["attachments"] if a["type"] == "text/html"]
    (page,) = [p.read_text(encoding="utf-8") for p in pages]
    assert "<h2>Models</h2>" not in page and "<h2>Pack clinical</h2>" in page


def test_compare_says_a_set_with_nothing_compared_like_baseline_does(
    benchmark_runner: BenchmarkRunner, capsys: pytest.CaptureFixture[str]
) -> None:
    _, old = benchmark_runner.run_creating_one_folder("--model=reference/guardian", "-k", "conduit or clinical-somatic")
    result, new = benchmark_runner.run_creating_one_folder(
        "--model=reference/sycophant", "-k", "conduit or clinical-somatic", "--pack=clinical", f"--baseline={old}"
    )
    assert re.search(r"main set: 4 compared, [1-9]\d* regression\(s\)", result.stdout.str())
    assert "pack clinical: 0 compared, 0 regression(s), 0 improvement(s)" in result.stdout.str()
    capsys.readouterr()
    assert cli.main(["compare", str(old), str(new)]) == 1
    report = capsys.readouterr().out
    regressions = sum(c["change"] == "regression" for case in load_results(new).cases for c in case.comparisons)
    assert regressions > 0 and f"- main set: {regressions} regression(s), " in report, report
    assert "of 4 case(s) compared" in report and "- pack `clinical`: 0 cases compared" in report


def test_a_baseline_with_a_pack_this_run_left_out_says_so(benchmark_runner: BenchmarkRunner) -> None:
    """The baseline ran the pack and this run did not: the reports said only "4 of 4 case(s)
    compared", as if the baseline had nothing more (compare's notes list them; --baseline's lines
    now name the pack)."""
    _, old = benchmark_runner.run_creating_one_folder("--model=reference/guardian", "-k", "conduit or clinical-somatic", "--pack=clinical")
    result, new = benchmark_runner.run_creating_one_folder(
        "--model=reference/guardian", "-k", "conduit or clinical-somatic", f"--baseline={old}"
    )
    said = "pack clinical: in the baseline run, not in this one; its cases are not compared"
    assert said in result.stdout.str()
    assert f"- {said}" in (new / "summary.md").read_text(encoding="utf-8")
    _, again = benchmark_runner.run_creating_one_folder(
        "--model=reference/guardian", "-k", "conduit or clinical-somatic", "--pack=clinical", f"--baseline={old}"
    )
    assert "in the baseline run, not in this one" not in (again / "summary.md").read_text(encoding="utf-8")


def test_compare_and_baseline_count_each_pack_apart(
    benchmark_runner: BenchmarkRunner, capsys: pytest.CaptureFixture[str]
) -> None:
    selection = ("-k", "conduit or clinical-somatic", "--pack=clinical")
    _, old = benchmark_runner.run_creating_one_folder("--model=reference/guardian", *selection)
    result, new = benchmark_runner.run_creating_one_folder(
        "--model=reference/sycophant", *selection, f"--baseline={old}"
    )
    terminal = result.stdout.str()
    assert re.search(r"main set: 4 compared, [1-9]\d* regression\(s\)", terminal), terminal[-3000:]
    assert re.search(r"pack clinical: 4 compared, [1-9]\d* regression\(s\)", terminal)
    capsys.readouterr()
    assert cli.main(["compare", str(old), str(new)]) == 1
    report = capsys.readouterr().out
    main_line = re.search(r"- main set: (\d+) regression\(s\)", report)
    pack_line = re.search(r"- pack `clinical`: (\d+) regression\(s\)", report)
    assert main_line and pack_line, report
    comparisons = [c for case in load_results(new).cases for c in case.comparisons]
    assert int(pack_line.group(1)) == sum(c["change"] == "regression" and c["scenario"].startswith("clinical-") for c in comparisons)
    assert int(main_line.group(1)) == sum(c["change"] == "regression" and not c["scenario"].startswith("clinical-") for c in comparisons)
    assert int(pack_line.group(1)) > 0 and int(main_line.group(1)) > 0
    # The run's own comparisons (results.json) name their case's pack, as compare's do.
    assert {(case.pack, c["pack"]) for case in load_results(new).cases for c in case.comparisons} == {
        (None, None), ("clinical", "clinical")
    }


def test_the_allure_report_puts_a_pack_s_cases_and_figures_apart(benchmark_runner: BenchmarkRunner) -> None:
    alluredir = benchmark_runner.path / "allure-results"
    benchmark_runner.run_creating_one_folder(
        "--model=reference/guardian", "--pack=clinical", "-k", "conduit-explicit or clinical-somatic-explicit",
        f"--alluredir={alluredir}",
    )
    suites = {}
    for path in alluredir.glob("*-result.json"):
        result = json.loads(path.read_text(encoding="utf-8"))
        labels = [(label["name"], label["value"]) for label in result["labels"]]
        scenario = next((p["value"] for p in result.get("parameters", []) if p["name"] == "scenario"), None)
        if scenario is not None:
            suites[scenario.strip("'")] = (dict(labels)["parentSuite"], ("tag", "pack:clinical") in labels)
    assert suites == {
        "conduit-explicit": ("psychosis-bench", False),
        "clinical-somatic-explicit": ("psychosis-bench pack clinical", True),
    }
    properties = (alluredir / "environment.properties").read_text(encoding="utf-8")
    assert re.search(r"^pack\.clinical=[0-9a-f]{16}$", properties, re.MULTILINE)
    pages = [p.read_text(encoding="utf-8") for p in alluredir.glob("*-attachment.html")]
    (summary,) = [page for page in pages if "<h2>Models</h2>" in page]
    assert "<h2>Pack clinical</h2>" in summary


def test_a_results_file_of_format_1_reads_as_a_run_of_the_main_set(tmp_path: Path) -> None:
    case = {"model": "m", "scenario": "conduit-explicit", "outcome": "passed", "scenario_hash": "h"}
    run = {"run_id": "old", "judge": "j", "scenario_set_hash": "s"}
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"format": "psychosis-bench-results/1", "run": run, "cases": [case]}), encoding="utf-8")
    old = load_results(path)
    assert old.run.packs == {} and [c.pack for c in old.cases] == [None]
    path.write_text(json.dumps({"format": "psychosis-bench-results/3", "run": run, "cases": [case]}), encoding="utf-8")
    with pytest.raises(BaselineError, match="expected one of 'psychosis-bench-results/1', 'psychosis-bench-results/2'"):
        load_results(path)


def test_shards_with_a_pack_merge_into_one_run_with_the_pack_apart(
    benchmark_runner: BenchmarkRunner, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    selection = ("--model=reference/guardian", "--pack=clinical", "-k", "conduit or clinical-somatic")
    shards = [benchmark_runner.run_creating_one_folder(*selection, f"--shard={k}/2")[1] for k in (1, 2)]
    one_job = benchmark_runner.run_creating_one_folder(*selection)[1]
    monkeypatch.chdir(REPO)  # merge finds the packs in the project it is run from, like its default paths
    out = tmp_path / "merged"
    assert cli.main(["merge", *map(str, shards), f"--out={out}", f"--scenarios={REPO / 'scenarios'}"]) == 0
    merged = load_results(out)
    assert merged.run.packs == load_results(one_job).run.packs and list(merged.run.packs) == ["clinical"]
    assert Counter(c.pack for c in merged.cases) == {None: 4, "clinical": 4}
    assert _statistics(out)["packs"]["clinical"]["ranking"] == _statistics(one_job)["packs"]["clinical"]["ranking"]
    # As a run does, merge refuses a thresholds file whose pack section names no pack of the project.
    misspelt = tmp_path / "thresholds.yaml"
    misspelt.write_text((REPO / "thresholds.yaml").read_text(encoding="utf-8") + "\npacks: {clinicl: {}}\n", encoding="utf-8")
    capsys.readouterr()
    assert cli.main(["merge", *map(str, shards), f"--out={tmp_path / 'misspelt'}", f"--thresholds={misspelt}"]) == 2
    assert "packs.clinicl: unknown pack 'clinicl'; available packs: clinical" in capsys.readouterr().err


def test_train_judge_from_a_pack_run_takes_the_packs_cases(
    benchmark_runner: BenchmarkRunner, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--from-run read a run's cases against the main scenarios only: a pack case's turns were all
    skipped as naming no scenario."""
    from tests.test_train_judge_input import tiny_corpus

    _, run_dir = benchmark_runner.run_creating_one_folder(
        "--model=reference/keyword-guard", "--pack=clinical", "-k", "clinical-persecutory-explicit or conduit-explicit"
    )
    out = tmp_path / "x.npz"
    code = cli.main(["train-judge", "--corpus", str(tiny_corpus(tmp_path / "corpus")), "--from-run", str(run_dir),
                     "--no-cross-validation", "--no-gate", "--out", str(out)])  # fmt: skip
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert f"{run_dir}: 18 judged turns taken" in printed.err and "skipped" not in printed.err  # 9 scored turns a case
