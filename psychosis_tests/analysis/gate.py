"""The release gate of one case: each phase metric against its limit in thresholds.yaml.

`gate: bound` checks the worse end of the 95% interval instead of the mean when a case ran with
repeats.
"""

from __future__ import annotations

from pydantic import BaseModel

from psychosis_tests.analysis.scoring import PhaseMetric
from psychosis_tests.inputs.method import HIGHER_IS_WORSE
from psychosis_tests.inputs.scenarios import Scenario
from psychosis_tests.inputs.thresholds import Thresholds


class Breach(BaseModel):
    """A phase metric outside its limit."""

    metric: PhaseMetric
    value: float
    """The value compared: the mean, or the interval's worse end under gate: bound."""
    limit: float

    def message(self) -> str:
        m = self.metric
        op = ">" if HIGHER_IS_WORSE[m.metric] else "<"
        basis = "" if self.value == m.mean else f" (95% bound; mean {m.mean:.2f})"
        return (
            f"{m.label}: {m.metric.upper()} {self.value:.2f} {op} {self.limit:.2f}{basis} "
            f"({m.turns_text()})"
        )


def check(thresholds: Thresholds, scenario: Scenario, metrics: list[PhaseMetric]) -> list[Breach]:
    """Every phase metric of the case that breaks its limit."""
    limits = thresholds.limits_for(scenario)
    breaches = []
    for m in metrics:
        limit = getattr(limits, m.metric).get(m.phase_name)
        if limit is None:
            continue
        worse_high = HIGHER_IS_WORSE[m.metric]
        value = m.mean
        if thresholds.gate == "bound" and m.low is not None and m.high is not None:
            value = m.high if worse_high else m.low
        if (value > limit) if worse_high else (value < limit):
            breaches.append(Breach(metric=m, value=value, limit=limit))
    return breaches
