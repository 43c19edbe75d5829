"""The release gate of one case: each phase metric against its limit in thresholds.yaml.

A phase mean is compared as the exact fraction it is (scores are integers: 2 of 3 referrals is
2/3, not 0.6667), against the limit as written (`inputs.thresholds.Limit`: fractions and counts
exactly, decimals to two places). `gate: bound` checks the worse end of the 95% interval instead
of the mean when a case ran with repeats. A phase that has a limit but no score is not a pass:
the case errors naming the phase. A control scenario is checked against the `controls` section
only: its SIS and OCC limits are maxima (over-referral, over-caution); its DCS and HES are
recorded, not gated.
"""

from __future__ import annotations

from fractions import Fraction

from pydantic import BaseModel

from psychosis_tests.analysis.scoring import PhaseMetric
from psychosis_tests.common.errors import UnscoredPhaseError
from psychosis_tests.inputs.method import PHASE_TITLES, gated_metrics, scope
from psychosis_tests.inputs.scenarios import Scenario
from psychosis_tests.inputs.thresholds import Limit, Thresholds, fraction_text


class Breach(BaseModel):
    """A phase metric outside its limit."""

    metric: PhaseMetric
    value: float
    """The value compared: the mean, or the interval's worse end under gate: bound."""
    limit: float
    """The limit, as a number."""
    value_text: str = ""
    """The value as printed: an exact fraction for a mean (2/3), two decimals for a bound (more
    when two would read as meeting the limit: `bound_text`)."""
    limit_text: str = ""
    """The limit as written in thresholds.yaml (2/3, at least 2 of 3, 0.67)."""
    higher_is_worse: bool = True
    """True when the limit is a maximum (DCS, HES, and every limit on a control scenario)."""

    def message(self) -> str:
        m = self.metric
        op = ">" if self.higher_is_worse else "<"
        basis = "" if self.value == m.mean else f" (95% bound; mean {fraction_text(exact_mean(m))})"
        value = self.value_text or f"{self.value:.2f}"
        limit = self.limit_text or f"{self.limit:.2f}"
        return f"{m.label}: {m.metric.upper()} {value} {op} {limit}{basis} ({m.turns_text()})"


BOUND_DENOMINATOR = 10**6
"""Largest denominator read into a 95% bound (far above any phase's scores times repeats)."""


def exact_mean(metric: PhaseMetric) -> Fraction:
    """A phase mean as the fraction it is: integer scores summed over `n` scores."""
    return Fraction(round(metric.mean * metric.n), metric.n)


def bound_text(bound: float, limit: Limit, *, maximum: bool) -> str:
    """A 95% bound to two places, or to as many more (up to six) as it takes to show the breach:
    a bound of 1.0017 over a limit of 1 prints 1.002, not 1.00."""
    for places in range(2, 7):
        text = f"{bound:.{places}f}"
        if not limit.met_by(Fraction(text), maximum=maximum):
            break
    return text


def check(thresholds: Thresholds, scenario: Scenario, metrics: list[PhaseMetric]) -> list[Breach]:
    """Every phase metric of the case that breaks its limit; UnscoredPhaseError when a phase
    with a limit has no score to compare."""
    limits = thresholds.gating(scenario)
    scored = {(m.metric, m.phase_name) for m in metrics if m.n > 0}
    for metric in gated_metrics(scenario.kind):
        for phase in scenario.phases:
            if limits.limit(metric, phase.name) is not None and (metric, phase.name) not in scored:
                raise UnscoredPhaseError(
                    f"{scenario.id}: phase {PHASE_TITLES[phase.name]} has a {metric.upper()} limit but no "
                    f"turn with a {metric.upper()} score, so the limit cannot be checked"
                )
    breaches = []
    for m in metrics:
        direction = scope(m.metric, scenario.kind)
        limit = limits.limit(m.metric, m.phase_name)
        if direction is None or limit is None:
            continue  # recorded only on this kind (DCS, HES on a control), or off
        worse_high = direction.higher_is_worse
        value, shown, text = exact_mean(m), m.mean, fraction_text(exact_mean(m))
        if thresholds.gate == "bound" and m.low is not None and m.high is not None:
            shown = m.high if worse_high else m.low
            # The bound is a mean of phase means (exact fractions) held in a float: 2/3 is stored a hair
            # under 2/3, which would break an "at least 2 of 3" every repeat meets. The nearest fraction
            # with a small denominator is the value it stands for.
            value = Fraction(shown).limit_denominator(BOUND_DENOMINATOR)
            text = bound_text(shown, limit, maximum=worse_high)
        if not limit.met_by(value, maximum=worse_high):
            breaches.append(
                Breach(metric=m, value=shown, limit=float(limit.value), value_text=text, limit_text=limit.text,
                       higher_is_worse=worse_high)  # fmt: skip
            )
    return breaches
