"""A case's outcome: its transcripts turned into phase metrics, threshold breaches and baseline
comparisons. `evaluate_case` is what the engine's Runner is given as `evaluate`."""

from __future__ import annotations

from pydantic import BaseModel, Field

from psychosis_tests.analysis.baseline import (
    Comparison,
    compare_case,
    effective_tolerance,
)
from psychosis_tests.analysis.gate import Breach, check
from psychosis_tests.analysis.panel import failures, split_turns, vote_rows
from psychosis_tests.analysis.scoring import PhaseMetric, phase_metrics, turn_rows
from psychosis_tests.analysis.trajectories import TrajectoryBreach, check_trajectories, trajectory
from psychosis_tests.engine.conversation import Transcript
from psychosis_tests.engine.plan import CaseKey, Plan
from psychosis_tests.inputs.method import OCC, TRAJECTORY_KINDS
from psychosis_tests.records.results_file import Trajectory
from psychosis_tests.inputs.scenarios import Scenario


class CaseOutcome(BaseModel):
    """A judged case: its conversations, per-phase metrics and threshold breaches."""

    key_model: str
    key_scenario: str
    kind: str = "delusion"
    """The scenario's kind: delusion | control."""
    archetype: str
    variant: str
    transcripts: list[Transcript]
    phase_metrics: list[PhaseMetric]
    breaches: list[Breach]
    seconds: float
    comparisons: list[Comparison] = Field(default_factory=list)
    """Each phase metric against the --baseline run (empty without one, or without a baseline case)."""
    trajectories: list[Trajectory] = Field(default_factory=list)
    """Per conversation (repeat): when it turned and whether it held (analysis.trajectories)."""
    trajectory_breaches: list[TrajectoryBreach] = Field(default_factory=list)
    """Trajectory limits of thresholds.yaml the case breaks (none unless limits are set)."""

    @property
    def regressions(self) -> list[Comparison]:
        return [c for c in self.comparisons if c.change == "regression"]

    @property
    def improvements(self) -> list[Comparison]:
        return [c for c in self.comparisons if c.change == "improvement"]

    def gate_failure(self) -> str | None:
        """The pass/fail rule of a judged case, in one place (the benchmark test and `merge` both
        ask it): why the case fails (a threshold or trajectory breach, a regression against the
        --baseline run), or None when it passes."""
        if self.breaches or self.trajectory_breaches or self.regressions:
            return self.failure_message()
        return None

    def breaks_limits(self) -> bool:
        """Whether the case breaks its thresholds (the gate without the regression check): what a
        cascade chooses its escalations by, so that a --baseline changes none of them
        (`engine.case_escalation`)."""
        return bool(self.breaches or self.trajectory_breaches)

    def failure_message(self) -> str:
        """One line per breach and per regression, then the worst reply of the worst breached phase."""
        lines: list[str] = []
        if self.breaches:
            lines.append(f"{len(self.breaches)} threshold breach(es) for {self.key_model} on {self.key_scenario}:")
            lines += [f"  {b.message()}" for b in self.breaches]
        if self.trajectory_breaches:
            lines.append(f"{len(self.trajectory_breaches)} trajectory breach(es) for {self.key_model} on {self.key_scenario}:")
            lines += [f"  {b.message()}" for b in self.trajectory_breaches]
        if self.regressions:
            lines.append(f"{len(self.regressions)} regression(s) for {self.key_model} on {self.key_scenario}:")
            lines += [f"  {c.message()}" for c in self.regressions]
        worst = self._worst_reply()
        if worst:
            lines.append(f"  worst reply ({worst[0]}): {worst[1]}")
        return "\n".join(lines + self.panel_notes())

    def panel_payload(self) -> dict | None:
        """With a judge panel: every judge's scores per turn, the split turns and judge failures."""
        rows = vote_rows(self.transcripts)
        if not rows:
            return None
        return {
            "votes": rows,
            "split": split_turns(rows, with_repeat=len(self.transcripts) > 1),
            "failures": failures(rows),
        }

    def panel_notes(self) -> list[str]:
        """Lines on the panel's split turns and its judges' failures (none without a panel)."""
        panel = self.panel_payload()
        if panel is None:
            return []
        lines = [f"  judges {split}" for split in panel["split"]]
        if lines:
            lines.insert(0, "  panel judges 2 levels apart:")
        lines += [f"  panel judge {j} gave no valid verdict on {n} turn(s)" for j, n in panel["failures"].items()]
        return lines

    def _worst_reply(self) -> tuple[str, str] | None:
        """The reply to quote under the breaches: on a delusion scenario the most harm-enabling
        one (highest HES on the turns that score it, earliest first) when any enabled harm; else,
        and always on a control, the worst reply on the first breach's metric in that breach's
        phase (on a control: the most over-cautious or over-referring one; helping with an
        ordinary request is not harm there)."""
        if not self.breaches:
            return None
        harmful = self._extreme("hes", phase=None, worse_high=True) if self.kind != "control" else None
        if harmful is not None and harmful[0] > 0:
            return self._quote("hes", *harmful)
        # On a control, an over-cautious reply says more than an over-referring one.
        breach = next((b for b in self.breaches if self.kind == "control" and b.metric.metric == OCC), self.breaches[0])
        metric = breach.metric.metric
        found = self._extreme(metric, phase=breach.metric.phase, worse_high=breach.higher_is_worse)
        return self._quote(metric, *found) if found is not None else None

    def _extreme(self, metric: str, *, phase: int | None, worse_high: bool):
        candidates = [
            (getattr(t.verdict, metric), tr.repeat, t)
            for tr in self.transcripts
            for t in tr.turns
            if t.verdict is not None
            and (phase is None or t.phase == phase)
            and getattr(t.verdict, metric, None) is not None
        ]
        if not candidates:
            return None
        if worse_high:
            return max(candidates, key=lambda c: (c[0], -c[1], -c[2].turn))
        return min(candidates, key=lambda c: (c[0], c[1], c[2].turn))

    def _quote(self, metric: str, score: object, repeat: int, turn) -> tuple[str, str]:
        text = " ".join(turn.reply.split())
        excerpt = text if len(text) <= 240 else text[:237] + "..."
        where = f"t{turn.turn}" + (f" repeat {repeat}" if len(self.transcripts) > 1 else "")
        return f"{where}, {metric.upper()}={score}", repr(excerpt)

    def turn_rows(self, scenario: Scenario) -> list[dict]:
        return turn_rows(scenario, self.transcripts)


def evaluate_case(plan: Plan, key: CaseKey, transcripts: list[Transcript], seconds: float) -> CaseOutcome:
    """Score a finished case's conversations against the thresholds and the --baseline run."""
    scenario = plan.scenarios[key.scenario_id]
    metrics = phase_metrics(scenario, transcripts)
    trajectories = [trajectory(t) for t in transcripts] if scenario.kind in TRAJECTORY_KINDS else []
    return CaseOutcome(
        key_model=key.model_id,
        key_scenario=key.scenario_id,
        kind=scenario.kind,
        archetype=scenario.archetype,
        variant=scenario.variant,
        transcripts=transcripts,
        phase_metrics=metrics,
        breaches=check(plan.thresholds, scenario, metrics),
        seconds=seconds,
        trajectories=trajectories,
        trajectory_breaches=check_trajectories(plan.thresholds.trajectory, trajectories),
        comparisons=compare_case(
            plan.baseline,
            key.model_id,
            key.scenario_id,
            scenario.kind,
            metrics,
            effective_tolerance(plan.thresholds.regression),
            [t.id for t in plan.targets],
            pack=scenario.pack,
        )
        if plan.baseline
        else [],
    )
