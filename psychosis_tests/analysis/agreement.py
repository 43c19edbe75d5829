"""Agreement statistics between a judge and gold labels, or among raters, from kept libraries.

Cohen's kappa is scikit-learn's `cohen_kappa_score` (quadratic weights for the ordinal DCS and
HES, none for the binary SIS and OCC); Krippendorff's alpha is the `krippendorff` package (ordinal
for DCS and HES, nominal for SIS and OCC); the 95% intervals are scipy's `bootstrap` through
analysis.bootstrap (percentile method, items resampled in pairs, fixed seed so a result can be
reproduced; over the resamples on which kappa is defined, the others counted). Nothing here is
hand-written statistics: these functions only choose the right call and turn "undefined" into None.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import krippendorff
import numpy as np
import sklearn
from sklearn.metrics import cohen_kappa_score, confusion_matrix

from psychosis_tests.analysis.bootstrap import defined_percentile_interval
from psychosis_tests.records.calibration_result import MetricAgreement
from psychosis_tests.inputs.method import METRIC_RANGE, METRIC_SPEC

BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 20250914


def is_binary(metric: str) -> bool:
    """Two levels, no order to weight (SIS, OCC): not `MetricSpec.ordinal`."""
    return not METRIC_SPEC[metric].ordinal


def weighting(metric: str) -> str:
    """quadratic for the ordinal metrics (DCS, HES), none for the binary ones (SIS, OCC)."""
    return "none" if is_binary(metric) else "quadratic"


def _finite(value: float) -> float | None:
    return None if value is None or math.isnan(value) else float(value)


def kappa(gold: Sequence[int], judged: Sequence[int], metric: str) -> float | None:
    """Cohen's kappa of judge against gold on one metric; None when undefined: no items, or gold of
    one level only. On such items kappa is 0 whatever the judge answers (or undefined if it always
    agrees): they cannot show whether a judge tells the levels apart, so no number is made up."""
    if len(set(gold)) < 2:
        return None
    weights = None if weighting(metric) == "none" else "quadratic"
    with warnings.catch_warnings(), sklearn.config_context(skip_parameter_validation=True):
        warnings.simplefilter("ignore")
        value = cohen_kappa_score(
            gold, judged, labels=list(METRIC_RANGE[metric]), weights=weights, replace_undefined_by=np.nan
        )
    return _finite(value)


def kappa_interval(
    gold: Sequence[int], judged: Sequence[int], metric: str, *, resamples: int = BOOTSTRAP_RESAMPLES
) -> tuple[float | None, float | None, int]:
    """95% percentile-bootstrap interval of kappa, (None, None) when it cannot be had, and how many
    resamples were left out of it: those on which kappa is undefined (gold all one level, as when a
    rare level's few items are all left out). A resample missing some level is no problem otherwise:
    kappa is computed over every level."""
    if len(gold) < 2 or resamples < 1:
        return None, None, 0

    def statistic(g: np.ndarray, j: np.ndarray) -> float:
        value = kappa(list(g), list(j), metric)
        return np.nan if value is None else value

    low, high, undefined = defined_percentile_interval(
        (np.asarray(gold), np.asarray(judged)),
        statistic,
        confidence=0.95,
        n_resamples=resamples,
        seed=BOOTSTRAP_SEED,
        vectorized=False,
    )
    return _finite(low), _finite(high), undefined


def kappa_text(gold: Sequence[int], judged: Sequence[int], metric: str, *, resamples: int = 500) -> str:
    """E.g. "0.81 [0.76, 0.86]": kappa and its 95% bootstrap interval as the training and benchmark
    reports print them, with the resamples left out of it when kappa was undefined on some ("0.91
    [0.62, 1.00; 41 of 500 resamples undefined]"); "n/a" for an undefined kappa, no interval where
    none can be had."""
    value = kappa(gold, judged, metric)
    low, high, undefined = kappa_interval(gold, judged, metric, resamples=resamples)
    shown = "n/a" if value is None else f"{value:.2f}"
    if low is None or high is None:
        return shown
    left_out = f"; {undefined} of {resamples} resamples undefined" if undefined else ""
    return f"{shown} [{low:.2f}, {high:.2f}{left_out}]"


def alpha(ratings: Sequence[Sequence[float]], metric: str) -> float | None:
    """Krippendorff's alpha; `ratings` has one row per rater, one column per item, NaN where missing.
    None when undefined (fewer than two ratings on any item, or no variation at all)."""
    data = np.asarray(ratings, dtype=float)
    if data.ndim != 2 or data.shape[0] < 2 or not np.any(np.sum(~np.isnan(data), axis=0) >= 2):
        return None
    level = "nominal" if is_binary(metric) else "ordinal"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            value = krippendorff.alpha(
                reliability_data=data, level_of_measurement=level, value_domain=list(METRIC_RANGE[metric])
            )
        except ValueError:
            return None
    return _finite(value)


def agreement(
    gold: Sequence[int],
    judged: Sequence[int],
    metric: str,
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    detailed: bool = True,
    kind: str = "delusion",
) -> MetricAgreement:
    """Kappa, exact agreement and alpha of judge against gold; with `detailed`, the bootstrap
    interval and the confusion matrix too (breakdowns by group leave them out). `kind` says
    whether the items are on delusion or control scenarios (SIS is reported for each apart)."""
    levels = list(METRIC_RANGE[metric])
    n = len(gold)
    low = high = None
    undefined = 0
    confusion: list[list[int]] = []
    if detailed:
        low, high, undefined = kappa_interval(gold, judged, metric, resamples=resamples)
        if n:
            confusion = confusion_matrix(gold, judged, labels=levels).tolist()
        else:
            confusion = [[0] * len(levels) for _ in levels]
    return MetricAgreement(
        metric=metric,
        kind=kind,  # type: ignore[arg-type]
        n=n,
        kappa=kappa(gold, judged, metric),
        kappa_low=low,
        kappa_high=high,
        kappa_undefined=undefined,
        kappa_resamples=resamples if detailed and n >= 2 else 0,
        weighting=weighting(metric),  # type: ignore[arg-type]
        exact_agreement=float(np.mean(np.asarray(gold) == np.asarray(judged))) if n else 0.0,
        alpha=alpha([gold, judged], metric) if n else None,
        levels=levels,
        confusion=confusion,
    )
