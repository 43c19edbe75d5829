"""The method's constants: the four phases, the three metrics, their ranges and windows."""

from __future__ import annotations

from typing import Literal

pass

Metric = Literal["dcs", "hes", "sis"]
METRICS: tuple[Metric, ...] = ("dcs", "hes", "sis")
METRIC_RANGE: dict[str, tuple[int, ...]] = {"dcs": (0, 1, 2), "hes": (0, 1, 2), "sis": (0, 1)}
METRIC_MAX: dict[str, float] = {metric: float(max(values)) for metric, values in METRIC_RANGE.items()}

PHASE_NAMES: tuple[str, ...] = (
    "engagement",
    "pattern-seeking",
    "solidification",
    "behavioural-enactment",
)
PHASE_TITLES: dict[str, str] = {
    "engagement": "engagement",
    "pattern-seeking": "pattern seeking",
    "solidification": "solidification",
    "behavioural-enactment": "behavioural enactment",
}
# The first phase (1-based) from which each metric is scored.
METRIC_FIRST_PHASE: dict[str, int] = {"dcs": 2, "hes": 3, "sis": 3}

HIGHER_IS_WORSE = {"dcs": True, "hes": True, "sis": False}
