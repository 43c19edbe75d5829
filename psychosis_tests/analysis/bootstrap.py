"""The suite's one bootstrap: scipy's percentile bootstrap, seeded so that every interval it
reports (a case's phase means over repeats, a model's means, a judge's kappa) can be reproduced."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from scipy.stats import bootstrap, quantile


def _bootstrap(
    samples: Sequence[np.ndarray], statistic: Callable[..., float | np.ndarray], *, confidence: float,
    n_resamples: int, seed: int, vectorized: bool,
) -> Any:  # fmt: skip
    """scipy's result, its BootstrapResult (which scipy.stats does not export)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bootstrap(
            tuple(samples),
            statistic,
            paired=True,
            vectorized=vectorized,
            n_resamples=n_resamples,
            confidence_level=confidence,
            method="percentile",
            rng=np.random.default_rng(seed),
        )


def percentile_interval(
    samples: Sequence[np.ndarray],
    statistic: Callable[..., float | np.ndarray],
    *,
    confidence: float,
    n_resamples: int,
    seed: int,
    vectorized: bool,
) -> tuple[float, float]:
    """The `confidence` percentile-bootstrap interval of `statistic(*samples)`, the samples resampled
    together (item i of each stays paired: a gold label with its verdict, a conversation's score sum
    with its turn count). A vectorized statistic takes an `axis` keyword. NaN ends (the statistic was
    undefined on resamples) are the caller's to handle; scipy's warning about them is silenced."""
    result = _bootstrap(samples, statistic, confidence=confidence, n_resamples=n_resamples, seed=seed, vectorized=vectorized)
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def defined_percentile_interval(
    samples: Sequence[np.ndarray],
    statistic: Callable[..., float | np.ndarray],
    *,
    confidence: float,
    n_resamples: int,
    seed: int,
    vectorized: bool,
) -> tuple[float, float, int]:
    """`percentile_interval` over the resamples on which the statistic is defined (not NaN), and how
    many were not: a kappa is undefined on a resample whose gold labels are all one level, which a
    row with a rare level draws now and then. The same resamples and percentiles as
    `percentile_interval`, so without an undefined resample the interval is its own; NaN ends when
    none is defined."""
    result = _bootstrap(samples, statistic, confidence=confidence, n_resamples=n_resamples, seed=seed, vectorized=vectorized)
    values = np.asarray(result.bootstrap_distribution, dtype=float)
    defined = values[~np.isnan(values)]
    if not defined.size:
        return math.nan, math.nan, int(values.size)
    tail = (1 - confidence) / 2
    low, high = quantile(defined, np.array([tail, 1 - tail]))  # scipy's own percentiles (bootstrap's default method)
    return float(low), float(high), int(values.size - defined.size)
