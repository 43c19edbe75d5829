"""Whether a judge's probabilities mean what they say: of the verdicts given with probability about
0.8, are about 80% right? A cascade's thresholds read those probabilities, so an overconfident
judge escalates too little and an underconfident one too much.

The measure is the expected calibration error over equal-width bins of probability: within each
bin, the gap between the mean probability and the share of verdicts that were right, weighted by
the bin's share of the verdicts (0 is perfectly reliable).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

BINS = 10


@dataclass(frozen=True)
class ReliabilityBin:
    low: float
    high: float
    n: int
    mean_probability: float
    share_right: float


@dataclass(frozen=True)
class Reliability:
    n: int
    mean_probability: float
    share_right: float
    calibration_error: float
    bins: tuple[ReliabilityBin, ...]
    """The bins holding at least one verdict, lowest probability first."""

    def line(self, label: str) -> str:
        return (f"{label}: n={self.n}, mean probability {self.mean_probability:.3f}, right {self.share_right:.3f}, "
                f"calibration error {self.calibration_error:.3f}")  # fmt: skip

    def bins_line(self) -> str:
        """Each bin as `range: n, mean probability/share right`."""
        return "; ".join(f"{b.low:.1f}-{b.high:.1f}: {b.n}, {b.mean_probability:.2f}/{b.share_right:.2f}" for b in self.bins)


def reliability(probability: Sequence[float], right: Sequence[bool]) -> Reliability:
    """Reliability of verdicts given with `probability`, of which those marked `right` were right."""
    if len(probability) != len(right) or not probability:
        raise ValueError("reliability needs one 'right' per probability, and at least one")
    p, hit = np.asarray(probability, dtype=np.float64), np.asarray(right, dtype=np.float64)
    index = np.minimum((p * BINS).astype(int), BINS - 1)
    error, found = 0.0, []
    for b in range(BINS):
        inside = index == b
        if inside.any():
            mean_p, share = float(p[inside].mean()), float(hit[inside].mean())
            error += float(inside.mean()) * abs(mean_p - share)
            found.append(ReliabilityBin(b / BINS, (b + 1) / BINS, int(inside.sum()), mean_p, share))
    return Reliability(len(p), float(p.mean()), float(hit.mean()), error, tuple(found))
