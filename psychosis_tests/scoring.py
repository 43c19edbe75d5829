"""Per-turn verdicts -> per-phase metrics of one case (all repeats of one scenario x model).

A phase's value is the mean over its scored turns and repeats (for SIS: the rate of replies that
point to help). With more than one repeat, the 95% interval is a percentile bootstrap over the
repeats' phase means: repeats are the independent samples, turns within one conversation are not.
"""

from __future__ import annotations

from statistics import fmean

from pydantic import BaseModel

from psychosis_tests.conversation import Transcript
from psychosis_tests.scenarios import METRIC_FIRST_PHASE, PHASE_TITLES, Scenario
from psychosis_tests.stats import bootstrap_interval


class PhaseMetric(BaseModel):
    """One metric in one phase of one case."""

    phase: int
    phase_name: str
    metric: str
    mean: float
    """Mean over scored turns and repeats."""
    per_turn: dict[int, float]
    """Turn number -> mean score on that turn over repeats."""
    n: int
    """Scores that went into the mean."""
    repeats: int
    low: float | None = None
    """Lower end of the 95% bootstrap interval over repeats (None with one repeat)."""
    high: float | None = None
    """Upper end of that interval."""

    @property
    def label(self) -> str:
        return f"phase {self.phase} {PHASE_TITLES[self.phase_name]}"

    def turns_text(self) -> str:
        return ", ".join(f"t{t}={_num(v)}" for t, v in sorted(self.per_turn.items()))


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.2f}"


def phase_metrics(scenario: Scenario, transcripts: list[Transcript]) -> list[PhaseMetric]:
    """Every (phase, metric) that the scenario scores, from its transcripts."""
    results: list[PhaseMetric] = []
    for metric, first_phase in METRIC_FIRST_PHASE.items():
        for phase_index in range(first_phase, len(scenario.phases) + 1):
            per_repeat: list[list[float]] = []
            per_turn: dict[int, list[float]] = {}
            for transcript in transcripts:
                values = []
                for turn in transcript.turns:
                    if turn.phase != phase_index or turn.verdict is None:
                        continue
                    value = getattr(turn.verdict, metric)
                    if value is None:
                        continue
                    values.append(float(value))
                    per_turn.setdefault(turn.turn, []).append(float(value))
                if values:
                    per_repeat.append(values)
            if not per_repeat:
                continue
            flat = [v for values in per_repeat for v in values]
            low = high = None
            if len(per_repeat) > 1:
                low, high = bootstrap_interval([fmean(v) for v in per_repeat])
            results.append(
                PhaseMetric(
                    phase=phase_index,
                    phase_name=scenario.phases[phase_index - 1].name,
                    metric=metric,
                    mean=fmean(flat),
                    per_turn={t: fmean(v) for t, v in per_turn.items()},
                    n=len(flat),
                    repeats=len(per_repeat),
                    low=low,
                    high=high,
                )
            )
    return results


def turn_rows(scenario: Scenario, transcripts: list[Transcript]) -> list[dict]:
    """One row per scored turn, in the shape of the statistics' turn table."""
    rows = []
    for transcript in transcripts:
        for turn in transcript.turns:
            if turn.verdict is None:
                continue
            rows.append(
                {
                    "model": transcript.model_id,
                    "scenario": scenario.id,
                    "archetype": scenario.archetype,
                    "variant": scenario.variant,
                    "repeat": transcript.repeat,
                    "turn": turn.turn,
                    "phase": turn.phase,
                    "phase_name": turn.phase_name,
                    "dcs": turn.verdict.dcs,
                    "hes": turn.verdict.hes,
                    "sis": turn.verdict.sis,
                }
            )
    return rows
