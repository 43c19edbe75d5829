"""Control scenarios below the plugin: the scenario kind, the over-caution gate, the judge request,
the over-caution statistics and the tables that show them."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from psychosis_tests.analysis.gate import check
from psychosis_tests.analysis.outcome import CaseOutcome
from psychosis_tests.analysis.over_caution import delusion_turns, over_caution, over_caution_summary
from psychosis_tests.analysis.scoring import phase_metrics
from psychosis_tests.engine.conversation import Transcript, Turn
from psychosis_tests.inputs.method import PHASE_NAMES
from psychosis_tests.inputs.rubric import CONTROL_RUBRIC, RUBRIC, build_judge_messages, parse_verdict
from psychosis_tests.inputs.scenarios import Scenario, load_scenario_file
from psychosis_tests.inputs.thresholds import load_thresholds
from psychosis_tests.reports.tables import markdown_summary, terminal_table

REPO = Path(__file__).resolve().parents[1]
CONTROL = load_scenario_file(REPO / "scenarios" / "conduit-control-explicit.yaml")
DELUSION = load_scenario_file(REPO / "scenarios" / "conduit-explicit.yaml")
THRESHOLDS = load_thresholds(REPO / "thresholds.yaml", scenario_ids=set(), has_controls=True)


def test_kind_defaults_to_delusion_and_a_control_id_says_control() -> None:
    assert DELUSION.kind == "delusion" and CONTROL.kind == "control"
    data = CONTROL.model_dump()
    with pytest.raises(ValueError, match="id must be 'conduit-control-explicit' \\(archetype-control-variant\\)"):
        Scenario.model_validate({**data, "id": "conduit-explicit"})
    with pytest.raises(ValueError, match="kind"):
        Scenario.model_validate({**data, "kind": "baseline"})


def test_only_control_turns_are_asked_over_caution() -> None:
    assert [CONTROL.metrics_for_turn(t) for t in (1, 4, 7)] == [(), ("dcs", "occ"), ("dcs", "hes", "sis", "occ")]
    assert [DELUSION.metrics_for_turn(t) for t in (1, 4, 7)] == [(), ("dcs",), ("dcs", "hes", "sis")]
    assert CONTROL.judged_turns == DELUSION.judged_turns == 9


def test_the_over_caution_paragraph_goes_only_to_control_turns() -> None:
    conversation = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    (system, _), (control_system, _) = (
        build_judge_messages(conversation, ["dcs"], "harm"),
        build_judge_messages(conversation, ["dcs", "occ"], "None (control)"),
    )
    assert system["content"] == RUBRIC
    assert control_system["content"] == RUBRIC + CONTROL_RUBRIC
    assert parse_verdict('{"rationale": "fine", "dcs": 1, "occ": 0}', ["dcs", "occ"]).occ == 0
    with pytest.raises(ValueError, match="expected metrics"):
        parse_verdict('{"rationale": "fine", "dcs": 1}', ["dcs", "occ"])


def test_a_delusion_hashes_as_before_kind_existed() -> None:
    """Baselines recorded before controls stay comparable: the default kind is not hashed. The
    value is what the code before `kind` existed (the parent of commit ec651a1) gave this scenario."""
    phases = [{"name": name, "turns": [f"{name} turn {n}" for n in (1, 2, 3)]} for name in PHASE_NAMES]
    fields = {"title": "Pinned", "archetype": "pinned", "variant": "explicit", "theme": "a theme",
              "harm_type": "a harm", "harm_description": "a description", "phases": phases}  # fmt: skip
    delusion = Scenario.model_validate({"id": "pinned-explicit", **fields})
    assert delusion.content_hash() == "31a7e293888d157d"
    control = Scenario.model_validate({"id": "pinned-control-explicit", "kind": "control", **fields})
    assert control.content_hash() != delusion.content_hash()  # a control's kind is hashed
    assert CONTROL.content_hash() != load_scenario_file(
        REPO / "scenarios" / "conduit-control-implicit.yaml"
    ).content_hash()


def _transcript(scenario: Scenario, sis: int, occ: int) -> Transcript:
    turns = []
    for number, (phase, text) in enumerate(zip(scenario.phase_of_turn(), scenario.turns, strict=True), start=1):
        metrics = list(scenario.metrics_for_turn(number))
        verdict = None
        if metrics:
            scores = {"dcs": 1, "hes": 2, "sis": sis, "occ": occ}
            verdict = parse_verdict(
                '{"rationale": "r", ' + ", ".join(f'"{m}": {scores[m]}' for m in metrics) + "}", metrics
            )
        turns.append(Turn(turn=number, phase=phase, phase_name=scenario.phases[phase - 1].name, user=text,
                          reply="ok", metrics=metrics, verdict=verdict))  # fmt: skip
    return Transcript(model_id="m", scenario_id=scenario.id, repeat=0, model_version="v", judge_id="j", turns=turns)


@pytest.mark.parametrize(
    ("sis", "occ", "breached"),
    [
        (0, 0, []),
        (1, 0, ["SIS phase 3", "SIS phase 4"]),
        (0, 1, ["OCC phase 2", "OCC phase 3", "OCC phase 4"]),
    ],
    ids=["helpful-passes", "over-referral-fails", "over-caution-fails"],
)
def test_controls_are_gated_on_referral_and_over_caution_as_maxima(sis: int, occ: int, breached: list[str]) -> None:
    metrics = phase_metrics(CONTROL, [_transcript(CONTROL, sis, occ)])
    breaches = check(THRESHOLDS, CONTROL, metrics)
    assert sorted(f"{b.metric.metric.upper()} phase {b.metric.phase}" for b in breaches) == breached
    assert all(b.higher_is_worse and " > " in b.message() for b in breaches)


def test_gate_bound_checks_a_control_s_upper_end_for_referral_and_over_caution(tmp_path: Path) -> None:
    """Both limits of a control are maxima, so its SIS is gated on the upper end of the interval,
    where a delusion scenario's SIS is gated on the lower one (docs/regressions.md)."""
    bound = tmp_path / "thresholds.yaml"
    bound.write_text((REPO / "thresholds.yaml").read_text(encoding="utf-8").replace("gate: mean ", "gate: bound "), encoding="utf-8")
    thresholds = load_thresholds(bound, scenario_ids=set(), has_controls=True)
    # Each case's SIS (and a control's OCC) mean meets its limits; the interval's one end breaks them, the other meets them.
    for scenario, sis, shown, expected in ((CONTROL, 0, 0.9, {"sis", "occ"}), (DELUSION, 1, 0.1, {"sis"})):
        metrics = [m.model_copy(update={"low": 0.1, "high": 0.9}) if m.metric in expected else m
                   for m in phase_metrics(scenario, [_transcript(scenario, sis, 0)])]  # fmt: skip
        breaches = [b for b in check(thresholds, scenario, metrics) if b.metric.metric in expected]
        assert {b.metric.metric for b in breaches} == expected
        assert all(b.value == shown and "(95% bound; mean " in b.message() for b in breaches)


def test_a_failed_control_quotes_the_over_cautious_reply_not_the_helpful_one() -> None:
    """Every reply helps with the ordinary request (HES 2); one in solidification pathologises
    the user. That one broke the limit, so that one is quoted."""
    transcript = _transcript(CONTROL, 0, 0)
    for turn in transcript.turns:
        turn.reply = "Sure, here is how to do it."
    worried = next(t for t in transcript.turns if t.phase == 3)
    worried.reply = "This sounds like a crisis; please call a helpline now."
    worried.verdict = worried.verdict.model_copy(update={"occ": 1})  # type: ignore[union-attr]
    second = next(t for t in transcript.turns if t.phase == 3 and t is not worried)
    second.verdict = second.verdict.model_copy(update={"occ": 1})  # type: ignore[union-attr]
    metrics = phase_metrics(CONTROL, [transcript])
    breaches = check(THRESHOLDS, CONTROL, metrics)
    assert [(b.metric.metric, b.metric.phase) for b in breaches] == [("occ", 3)]
    outcome = CaseOutcome(key_model="m", key_scenario=CONTROL.id, kind="control", archetype=CONTROL.archetype,
                          variant=CONTROL.variant, transcripts=[transcript], phase_metrics=metrics,
                          breaches=breaches, seconds=0.0)  # fmt: skip
    last = outcome.failure_message().splitlines()[-1]
    assert last == f"  worst reply (t{worried.turn}, OCC=1): 'This sounds like a crisis; please call a helpline now.'"
    # The same turns on a delusion scenario quote the most harm-enabling reply, as before.
    as_delusion = outcome.model_copy(update={"kind": "delusion"})
    assert "HES=2" in as_delusion.failure_message().splitlines()[-1]


def test_the_same_helpful_replies_fail_a_delusion_scenario() -> None:
    """DCS 1, HES 2, SIS 0 throughout: fine for an ordinary user, a failure for a user at risk."""
    metrics = phase_metrics(DELUSION, [_transcript(DELUSION, 0, 0)])
    assert {b.metric.metric for b in check(THRESHOLDS, DELUSION, metrics)} == {"dcs", "hes", "sis"}


def _turns(rows: list[tuple[str, str, str, float, float]]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"model": m, "scenario": s, "archetype": "a", "variant": "explicit", "kind": k, "repeat": 0,
             "turn": i + 7, "phase": 3, "phase_name": "solidification", "dcs": 1, "hes": 2, "sis": sis,
             "occ": occ if k == "control" else math.nan}
            for i, (m, s, k, sis, occ) in enumerate(rows)
        ]  # fmt: skip
    )


def test_over_caution_rates_per_model_from_control_turns_only() -> None:
    turns = _turns(
        [
            ("a", "x-control-explicit", "control", 1, 1),
            ("a", "x-control-explicit", "control", 0, 1),
            ("a", "x-explicit", "delusion", 1, math.nan),
            ("b", "x-control-explicit", "control", 0, 0),
        ]
    )
    cases = pd.DataFrame(
        [
            {"model": "a", "scenario": "x-control-explicit", "kind": "control", "outcome": "failed"},
            {"model": "a", "scenario": "x-explicit", "kind": "delusion", "outcome": "passed"},
            {"model": "b", "scenario": "x-control-explicit", "kind": "control", "outcome": "passed"},
        ]
    )
    table = over_caution(turns, cases).set_index("model")
    assert table.loc["a", ["control_cases", "control_passed", "occ_rate", "occ_n", "sis_rate"]].tolist() == [1, 0, 1.0, 2, 0.5]
    assert table.loc["b", ["control_cases", "control_passed", "occ_rate", "sis_rate"]].tolist() == [1, 1, 0.0, 0.0]
    assert list(delusion_turns(turns)["scenario"]) == ["x-explicit"]
    overall = over_caution_summary(turns, cases)["overall"]
    assert overall == [{"control_cases": 2, "control_passed": 1, "occ_rate": 2 / 3, "occ_n": 3, "sis_rate": 1 / 3, "sis_n": 3}]


def test_no_controls_give_empty_tables_and_no_column_values() -> None:
    turns = _turns([("a", "x-explicit", "delusion", 1, math.nan)]).drop(columns=["kind", "occ"])
    cases = pd.DataFrame([{"model": "a", "scenario": "x-explicit", "outcome": "passed"}])
    assert over_caution_summary(turns, cases) == {"per_model": [], "overall": []}
    assert len(delusion_turns(turns)) == 1


def _summary(over: list[dict]) -> dict:
    per_model = [{"model": "m", "dcs_mean": 0.5, "dcs_sd": 0.1, "hes_mean": 0.0, "hes_sd": 0.0, "sis_mean": 1.0, "sis_sd": 0.0}]
    return {
        "run": {"run_id": "r", "judge": "j", "scenario_set_hash": "h", "thresholds_hash": "t", "repeats": 1,
                "package_version": "0"},  # fmt: skip
        "statistics": {
            "per_model": per_model,
            "ranking": [{"rank": 1, "model": "m", "passed": 1, "failed": 1, "error": 0}],
            "per_model_phase": [],
            "variant_gap": {"per_model": []},
            "no_intervention": {"per_model": []},
            "dcs_hes_spearman": {"per_model": [], "overall": []},
            "over_caution": {"per_model": over, "overall": []},
        },
        "cases": [],
    }


def test_the_summary_shows_over_caution_next_to_the_metrics() -> None:
    row = {"model": "m", "control_cases": 2, "control_passed": 0, "occ_rate": 1.0, "occ_n": 18, "sis_rate": 1.0, "sis_n": 12}
    table = terminal_table(_summary([row]))
    assert table[0].split()[-4:] == ["DCS", "HES", "SIS", "over-caution"]
    assert table[2].endswith("1.00 (n=18)")
    markdown = "\n".join(markdown_summary(_summary([row])))
    assert "| rank | model | passed | failed | errors | DCS | HES | SIS | over-caution |" in markdown
    assert "| `m` | 2 | 0 | 1.00 (n=18) | 1.00 |" in markdown
    without = terminal_table(_summary([]))
    assert without[2].endswith("n/a")
    assert "Controls: over-caution" not in "\n".join(markdown_summary(_summary([])))


def test_control_limits_are_maxima_in_every_form(tmp_path: Path) -> None:
    import yaml

    from psychosis_tests.common.errors import ThresholdsError

    raw = yaml.safe_load((REPO / "thresholds.yaml").read_text(encoding="utf-8"))
    path = tmp_path / "thresholds.yaml"
    for value, problem in (("at least 1 of 3", "a controls limit is a maximum; write 'at most K of N'"),
                           ("3/2", "outside 0..1")):  # fmt: skip
        raw["controls"]["occ"]["solidification"] = value
        path.write_text(yaml.safe_dump(raw), encoding="utf-8")
        with pytest.raises(ThresholdsError, match=problem):
            load_thresholds(path, scenario_ids=set(), has_controls=True)
    del raw["controls"]["occ"]["solidification"]
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    assert load_thresholds(path, scenario_ids=set()).controls.limit("occ", "solidification") is None
    with pytest.raises(ThresholdsError, match="no limit for occ.solidification"):
        load_thresholds(path, scenario_ids=set(), has_controls=True)


def test_a_per_metric_judge_tells_every_call_of_a_control_turn_that_it_is_a_control() -> None:
    """Before, only the OCC call of a control turn got the control paragraph: its SIS (gated on
    controls as over-referral) was asked as if the user had a delusion."""
    import asyncio
    import json
    from dataclasses import dataclass, field
    from typing import Any

    from psychosis_tests.engine.judge import judge_reply
    from psychosis_tests.engine.providers import Completion, Provider
    from psychosis_tests.inputs.judge_identity import rubric_hash
    from psychosis_tests.inputs.models import ModelSpec
    from psychosis_tests.inputs.rubric import read_judge_request

    @dataclass
    class Recording(Provider):
        systems: dict[str, str] = field(default_factory=dict)

        async def chat(self, spec: Any, messages: list[dict[str, str]], **kwargs: Any) -> Completion:
            (metric,) = read_judge_request(messages).metrics
            self.systems[metric] = messages[0]["content"]
            return Completion(json.dumps({"rationale": "r", metric: 0}), "rec", cached=False)

    judge = ModelSpec(id="per-metric-judge", model="judge", base_url="http://127.0.0.1:9/v1", judge_mode="per-metric")
    conversation = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    for metrics, rubric in ((["dcs", "hes", "sis", "occ"], RUBRIC + CONTROL_RUBRIC), (["dcs", "hes", "sis"], RUBRIC)):
        provider = Recording(cache=None, cache_mode="off")
        asyncio.run(judge_reply(provider, judge, conversation, metrics, "harm", call_label="t"))
        assert provider.systems == dict.fromkeys(metrics, rubric)
    # The change is in the fingerprint of per-metric judges only: combined judges' calibrations stand.
    assert rubric_hash("per-metric") != rubric_hash("combined") == rubric_hash()
