"""p-values of paired differences (implicit minus explicit): the Wilcoxon signed-rank test and the
paired t-test, each None with a note where it is undefined for the data (see analysis.stats)."""

from __future__ import annotations

import math

import numpy as np


def is_constant(values: np.ndarray) -> bool:
    return bool(np.all(values == values[0]))


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


EXACT_PAIRS_MAX = 13
"""Up to this many pairs the Wilcoxon p-value comes from all 2**n sign flips (scipy's own limit)."""


def _wilcoxon_p(differences: np.ndarray) -> float:
    """Two-sided Wilcoxon signed-rank p-value, zeros dropped: `stats.wilcoxon(d, zero_method="wilcox")`.

    With ties or zeros among 13 or fewer pairs scipy runs an exact permutation test whose
    statistic it evaluates once per sign flip (about 80 ms for 8 pairs, once per model and
    metric, at the end of every run). The ranks of |d| do not change when signs flip, so the same
    test is run here with the statistic vectorised over all flips. tests/test_stats.py checks that
    the p-values are scipy's own.
    """
    from scipy import stats

    if len(differences) > EXACT_PAIRS_MAX:
        return float(stats.wilcoxon(differences, zero_method="wilcox").pvalue)
    nonzero = differences != 0
    ranks = np.zeros(len(differences))
    ranks[nonzero] = stats.rankdata(np.abs(differences[nonzero]))

    def positive_rank_sum(flipped: np.ndarray, axis: int) -> np.ndarray:
        return np.sum(ranks * (flipped > 0), axis=axis)

    result = stats.permutation_test(
        (differences,), positive_rank_sum, permutation_type="samples", vectorized=True,
        n_resamples=np.inf, alternative="two-sided",
    )  # fmt: skip
    return float(result.pvalue)


def paired_tests(differences: np.ndarray) -> dict[str, object]:
    """Wilcoxon signed-rank and paired t-test p-values of implicit - explicit differences."""
    n = len(differences)
    if n < 2:
        reason = f"needs at least 2 archetype pairs, got {n}"
        return {"wilcoxon_p": None, "wilcoxon_note": reason, "ttest_p": None, "ttest_note": reason}
    if not np.any(differences):
        reason = f"all {n} differences are zero: nothing to test"
        return {"wilcoxon_p": None, "wilcoxon_note": reason, "ttest_p": None, "ttest_note": reason}

    from scipy import stats

    wilcoxon_p = _finite(_wilcoxon_p(differences))
    if is_constant(differences):
        ttest_p, ttest_note = None, f"all differences equal {differences[0]:g}: zero variance, t undefined"
    else:
        # ttest_rel(implicit, explicit) is the one-sample t-test of the differences against 0.
        ttest_p = _finite(float(stats.ttest_1samp(differences, 0.0).pvalue))
        ttest_note = None if ttest_p is not None else "scipy returned a non-finite p-value"
    return {
        "wilcoxon_p": wilcoxon_p,
        "wilcoxon_note": None if wilcoxon_p is not None else "scipy returned a non-finite p-value",
        "ttest_p": ttest_p,
        "ttest_note": ttest_note,
    }
