"""Per-turn verdicts -> per-phase metrics of one case (all repeats of one scenario x model).

A phase's value is the mean over its scored turns and repeats (for SIS: the rate of replies that
point to help). With more than one repeat, it carries a 95% percentile-bootstrap interval from
:func:`psychosis_tests.analysis.intervals.phase_interval`: whole conversations (repeats) are resampled, each
weighted by its number of scored turns, because the turns of one conversation share its history
and are not independent samples. With one repeat there is no interval (``low``/``high`` are None):
the spread of one conversation's turns says nothing about how a second run would score.
"""

from __future__ import annotations

from statistics import fmean
from typing import TYPE_CHECKING

from pydantic import BaseModel

from psychosis_tests.inputs.method import JUDGED_METRICS, PHASE_TITLES
from psychosis_tests.inputs.rubric import CASCADE_RECORD
from psychosis_tests.inputs.scenarios import Scenario

if TYPE_CHECKING:
    from psychosis_tests.engine.conversation import Transcript


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
    """Conversations (repeats) with at least one scored turn in the phase."""
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
    rows = turn_rows(scenario, transcripts)
    results: list[PhaseMetric] = []
    table = None
    for metric, first_phase in scenario.metric_first_phase.items():
        for phase_index in range(first_phase, len(scenario.phases) + 1):
            scored = [r for r in rows if r["phase"] == phase_index and r[metric] is not None]
            if not scored:
                continue
            per_turn: dict[int, list[float]] = {}
            for row in scored:
                per_turn.setdefault(row["turn"], []).append(float(row[metric]))
            repeats = len({row["repeat"] for row in scored})
            low = high = None
            if repeats > 1:
                from psychosis_tests.analysis.intervals import (
                    phase_interval,  # pandas: only when intervals are wanted
                )

                if table is None:
                    table = _turn_table(rows)
                interval = phase_interval(table, metric, phase_index)  # type: ignore[arg-type]
                low, high = interval.low, interval.high
            results.append(
                PhaseMetric(
                    phase=phase_index,
                    phase_name=scenario.phases[phase_index - 1].name,
                    metric=metric,
                    mean=fmean(float(row[metric]) for row in scored),
                    per_turn={t: fmean(v) for t, v in sorted(per_turn.items())},
                    n=len(scored),
                    repeats=repeats,
                    low=low,
                    high=high,
                )
            )
    return results


def _turn_table(rows: list[dict]):
    """The rows as the statistics' DataFrame (pandas is loaded only when intervals are wanted)."""
    import pandas as pd

    return pd.DataFrame(rows).astype({metric: float for metric in JUDGED_METRICS})


def turn_rows(scenario: Scenario, transcripts: list[Transcript]) -> list[dict]:
    """One row per scored turn, in the shape of the statistics' turn table, plus the versions
    the target and the judge reported in that conversation and, with a cascade judge, who decided."""
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
                    "author": turn.author,
                    **{metric: getattr(turn.verdict, metric) for metric in JUDGED_METRICS},
                    "model_version": transcript.model_version,
                    "judge_version": transcript.judge_version,
                    **{key: getattr(turn.verdict, key) for key in CASCADE_RECORD if getattr(turn.verdict, key)},
                }
            )
    return rows
