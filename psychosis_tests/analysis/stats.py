"""Benchmark statistics over judged turns: pure functions, no I/O, no pytest.

Two input tables (pandas DataFrames):

* the turn table, one row per judged turn: ``model``, ``scenario``, ``archetype``, ``variant``
  ("explicit"/"implicit"), ``repeat`` (0-based), ``turn`` (1-based), ``phase`` (1-4), ``phase_name``,
  and the scores ``dcs`` (0-2), ``hes`` (0-2), ``sis`` (0/1), each NaN on turns where it was not scored.
  A *conversation* is (model, scenario, repeat); a *case* is (model, scenario).
* the case table, one row per case: ``model``, ``scenario``, ``archetype``, ``variant``, ``outcome``
  ("passed"/"failed"/"error").

Conventions:

* Table functions return DataFrames with one row per group, wide form (one column per metric and
  statistic, e.g. ``dcs_mean``), so a row maps straight onto a markdown table row and a JSON record.
  Undefined numbers are NaN inside DataFrames; :func:`frame_records` turns them into ``None``.
* Grouping functions take ``by``; an empty ``by`` pools every row into a single group.
* Every function sorts its input first, so results do not depend on the row order of the tables.
* A test statistic that is undefined for the data at hand (too few pairs, constant input) comes back
  as ``None`` next to a ``*_note`` saying why, never as NaN and never as an exception.
* scipy is imported inside the functions that need it: pytest-xdist workers import this module at
  start-up and most of them never compute a test statistic.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Final

import numpy as np
import pandas as pd

from psychosis_tests.analysis.paired_tests import is_constant, paired_tests
from psychosis_tests.inputs.method import METRIC_MAX, METRICS

OUTCOMES: Final[tuple[str, ...]] = ("passed", "failed", "error")
"""Valid values of the case table's ``outcome`` column."""

CONVERSATION: Final[tuple[str, ...]] = ("model", "scenario", "repeat")
"""Columns identifying one conversation."""

_TURN_KEY: Final[tuple[str, ...]] = (*CONVERSATION, "turn")
_CASE_KEY: Final[tuple[str, ...]] = ("model", "scenario")


# ---------------------------------------------------------------------------------------------------
# Input checks and small helpers


def _require(frame: pd.DataFrame, columns: Sequence[str], table: str) -> None:
    missing = [column for column in columns if column not in frame.columns]
    if missing:
        raise ValueError(
            f"{table} lacks column(s) {missing}; it has {list(frame.columns)}. "
            f"Build it with one row per {'judged turn' if table == 'turn table' else 'case'} "
            "as described in psychosis_tests/stats.py."
        )


def _prepared_turns(turns: pd.DataFrame, extra: Sequence[str] = ()) -> pd.DataFrame:
    """Check the turn table and return a copy sorted by conversation and turn."""
    _require(turns, [*_TURN_KEY, *METRICS, *extra], "turn table")
    duplicated = turns.duplicated(list(_TURN_KEY), keep=False)
    if duplicated.any():
        first = turns.loc[duplicated, list(_TURN_KEY)].iloc[0].to_dict()
        raise ValueError(
            f"turn table has {int(duplicated.sum())} rows sharing (model, scenario, repeat, turn), "
            f"e.g. {first}; each judged turn must appear exactly once."
        )
    for metric in METRICS:
        values = pd.to_numeric(turns[metric], errors="coerce")
        bad = turns[metric].notna() & (values.isna() | (values < 0) | (values > METRIC_MAX[metric]))
        if bad.any():
            raise ValueError(
                f"turn table column {metric!r} has {int(bad.sum())} value(s) outside 0..{METRIC_MAX[metric]:g}, "
                f"e.g. {turns.loc[bad, metric].iloc[0]!r}; use NaN for turns that were not scored."
            )
    prepared = turns.astype({metric: float for metric in METRICS})
    return prepared.sort_values(list(_TURN_KEY), kind="stable", ignore_index=True)


def _prepared_cases(cases: pd.DataFrame) -> pd.DataFrame:
    """Check the case table and return a copy sorted by case."""
    _require(cases, [*_CASE_KEY, "outcome"], "case table")
    bad = ~cases["outcome"].isin(OUTCOMES)
    if bad.any():
        raise ValueError(
            f"case table column 'outcome' has {cases.loc[bad, 'outcome'].iloc[0]!r}; "
            f"expected one of {list(OUTCOMES)}."
        )
    return cases.sort_values(list(_CASE_KEY), kind="stable", ignore_index=True)


def _plain(value: object) -> object:
    """A JSON-ready Python value: numpy scalars unwrapped, NaN/NA/inf as None."""
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _groups(frame: pd.DataFrame, by: Sequence[str]) -> Iterator[tuple[dict[str, object], pd.DataFrame]]:
    """Yield (group key as a dict, rows) in sorted key order; an empty ``by`` yields one group."""
    if not by:
        yield {}, frame
        return
    for key, rows in frame.groupby(list(by), sort=True, dropna=False):
        yield {column: _plain(value) for column, value in zip(by, key, strict=True)}, rows


def _mean_or_nan(values: pd.Series) -> float:
    return float(values.mean()) if len(values) else math.nan


def frame_records(frame: pd.DataFrame) -> list[dict[str, object]]:
    """Rows of a table as JSON-ready dicts (plain ints/floats/strings, ``None`` for NaN)."""
    return [
        {str(column): _plain(value) for column, value in zip(frame.columns, row, strict=True)}
        for row in frame.itertuples(index=False, name=None)
    ]


# ---------------------------------------------------------------------------------------------------
# Descriptive tables


def pooled_metrics(turns: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    """Mean, sample SD and count of each metric over scored turns, per group.

    Pooling over turns (not over conversation means) is what the paper's "mean +- SD" reports, so
    the numbers are comparable with it. Columns: the ``by`` columns, then ``<metric>_mean``,
    ``<metric>_sd`` (ddof=1; NaN with fewer than 2 scored turns) and ``<metric>_n`` (scored turns)
    for dcs, hes, sis. Groups where a metric is never scored (e.g. phase 1) keep the row, with n 0.
    """
    frame = _prepared_turns(turns, by)
    rows: list[dict[str, object]] = []
    for key, group in _groups(frame, by):
        row: dict[str, object] = dict(key)
        for metric in METRICS:
            scored = group[metric].dropna()
            row[f"{metric}_mean"] = _mean_or_nan(scored)
            row[f"{metric}_sd"] = float(scored.std(ddof=1)) if len(scored) > 1 else math.nan
            row[f"{metric}_n"] = len(scored)
        rows.append(row)
    columns = [*by, *(f"{metric}_{stat}" for metric in METRICS for stat in ("mean", "sd", "n"))]
    return pd.DataFrame(rows, columns=columns)


def no_intervention_share(turns: pd.DataFrame, by: Sequence[str] = ("model",)) -> pd.DataFrame:
    """Share of conversations in which no reply pointed the user to real help (no SIS of 1).

    The paper's headline: 39.8% of runs had no safety intervention at all. Only conversations with at
    least one scored SIS turn count; a conversation that never reached a scored SIS turn (e.g. it
    errored early) says nothing about interventions and is counted in ``unscored_conversations``.
    Columns: the ``by`` columns, ``conversations``, ``without_intervention``, ``share``
    (NaN when no conversation was scored), ``unscored_conversations``.
    """
    frame = _prepared_turns(turns, by)
    rows: list[dict[str, object]] = []
    for key, group in _groups(frame, by):
        per_conversation = group.groupby(list(CONVERSATION), sort=True)["sis"].agg(["count", "max"])
        scored = per_conversation[per_conversation["count"] > 0]
        without = int((scored["max"] < 1).sum())
        rows.append(
            {
                **key,
                "conversations": len(scored),
                "without_intervention": without,
                "share": without / len(scored) if len(scored) else math.nan,
                "unscored_conversations": len(per_conversation) - len(scored),
            }
        )
    columns = [*by, "conversations", "without_intervention", "share", "unscored_conversations"]
    return pd.DataFrame(rows, columns=columns)


# ---------------------------------------------------------------------------------------------------
# Tests of the explicit/implicit gap and the DCS-HES association


def variant_gap(turns: pd.DataFrame, by: Sequence[str] = ("model",)) -> pd.DataFrame:
    """How much worse (or better) each metric is on implicit scenarios than on explicit ones.

    Each (model, archetype) with both variants scored is one pair: the mean of the metric over all
    scored turns of the explicit scenario (pooled over repeats) against the same for the implicit one.
    With ``by=("model",)`` a model's pairs are its archetypes; with ``by=()`` the pairs of all models
    are pooled, as in the paper's "implicit significantly worse" claim.

    The Wilcoxon signed-rank test (``wilcoxon_p``) is the primary test: the scores are ordinal and
    bounded and there are few pairs (8 archetypes per model), so no normality can be assumed. The
    paired t-test (``ttest_p``) is reported for comparability with the paper. Both are two-sided;
    zero differences are dropped by the Wilcoxon test (``zero_method="wilcox"``).

    Columns: the ``by`` columns, ``metric``, ``n_pairs``, ``mean_explicit``, ``mean_implicit``,
    ``mean_difference`` (implicit - explicit; positive means implicit is higher: worse for DCS and
    HES, better for SIS), ``wilcoxon_p``, ``wilcoxon_note``, ``ttest_p``, ``ttest_note``
    (a note says why its p-value is None).
    """
    frame = _prepared_turns(turns, [*by, "archetype", "variant"])
    pair_key = ["model", "archetype"]
    rows: list[dict[str, object]] = []
    for key, group in _groups(frame, by):
        for metric in METRICS:
            scored = group.dropna(subset=[metric])
            means = scored.groupby([*pair_key, "variant"], sort=True)[metric].mean().unstack("variant")
            if {"explicit", "implicit"} <= set(means.columns):
                pairs = means[["explicit", "implicit"]].dropna()
            else:
                pairs = pd.DataFrame(columns=["explicit", "implicit"], dtype=float)
            explicit = pairs["explicit"].to_numpy(dtype=float)
            implicit = pairs["implicit"].to_numpy(dtype=float)
            # Rounding removes float noise of averaging, so equal means give an exact zero difference.
            differences = np.round(implicit - explicit, 12)
            rows.append(
                {
                    **key,
                    "metric": metric,
                    "n_pairs": len(pairs),
                    "mean_explicit": float(explicit.mean()) if len(pairs) else math.nan,
                    "mean_implicit": float(implicit.mean()) if len(pairs) else math.nan,
                    "mean_difference": float(differences.mean()) if len(pairs) else math.nan,
                    **paired_tests(differences),
                }
            )
    columns = [
        *by, "metric", "n_pairs", "mean_explicit", "mean_implicit", "mean_difference",
        "wilcoxon_p", "wilcoxon_note", "ttest_p", "ttest_note",
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=columns)


def dcs_hes_spearman(turns: pd.DataFrame, by: Sequence[str] = ("model",)) -> pd.DataFrame:
    """Spearman rank correlation between DCS and HES over turns where both are scored.

    The paper reports r_s = 0.77 pooled over all models (``by=()``). Turns of one conversation are
    not independent, so ``p`` overstates the evidence; ``r_s`` is the comparable figure.
    Columns: the ``by`` columns, ``n`` (turns scored on both), ``r_s``, ``p``, ``note`` (why r_s and p
    are None: fewer than 3 turns, or one of the scores constant).
    """
    frame = _prepared_turns(turns, by)
    rows: list[dict[str, object]] = []
    for key, group in _groups(frame, by):
        both = group.dropna(subset=["dcs", "hes"])
        dcs = both["dcs"].to_numpy(dtype=float)
        hes = both["hes"].to_numpy(dtype=float)
        r_s: object = None
        p: object = None
        if len(both) < 3:
            note: str | None = f"needs at least 3 turns scored on both DCS and HES, got {len(both)}"
        elif is_constant(dcs) or is_constant(hes):
            constant = "DCS" if is_constant(dcs) else "HES"
            note = f"{constant} is constant over the {len(both)} turns: rank correlation undefined"
        else:
            from scipy import stats

            result = stats.spearmanr(dcs, hes)
            r_s, p = _plain(float(result.statistic)), _plain(float(result.pvalue))
            note = None if r_s is not None and p is not None else "scipy returned a non-finite result"
        rows.append({**key, "n": len(both), "r_s": r_s, "p": p, "note": note})
    return pd.DataFrame(rows, columns=[*by, "n", "r_s", "p", "note"])


# ---------------------------------------------------------------------------------------------------
# Ranking


def _ranking_key(row: Mapping[str, object]) -> tuple[float, ...]:
    """Sort key, smaller is better: pass rate, passes, DCS + HES, SIS; undefined values sort last."""

    def number(name: str) -> float:
        value = row[name]
        return float(value) if isinstance(value, int | float) and math.isfinite(value) else math.nan

    def worst_last(value: float) -> float:
        return math.inf if math.isnan(value) else value

    return (
        worst_last(-number("pass_rate")),
        -number("passed"),
        worst_last(number("dcs_mean") + number("hes_mean")),
        worst_last(-number("sis_mean")),
    )


def model_ranking(cases: pd.DataFrame, turns: pd.DataFrame) -> pd.DataFrame:
    """Models ordered best first, with a ``rank`` column (tied models share the better rank).

    Order: higher pass rate (passed / all cases, so an errored case counts against a model: a failed
    call is never a pass), then more passed cases, then lower mean DCS + mean HES, then higher mean
    SIS, then model name. The pass rate leads rather than the raw pass count so that models run on
    different numbers of cases compare fairly; with equal case counts both give the same order.
    Means are pooled over scored turns. Columns: ``rank``, ``model``, ``cases``, ``passed``,
    ``failed``, ``error``, ``pass_rate``, ``dcs_mean``, ``hes_mean``, ``sis_mean``.
    """
    case_frame = _prepared_cases(cases)
    means = pooled_metrics(turns, ["model"]).set_index("model")
    models = sorted(set(case_frame["model"]) | set(means.index))
    rows: list[dict[str, object]] = []
    for model in models:
        outcomes = case_frame.loc[case_frame["model"] == model, "outcome"]
        counts = {outcome: int((outcomes == outcome).sum()) for outcome in OUTCOMES}
        row: dict[str, object] = {
            "model": model,
            "cases": len(outcomes),
            **counts,
            "pass_rate": counts["passed"] / len(outcomes) if len(outcomes) else math.nan,
        }
        for metric in METRICS:
            row[f"{metric}_mean"] = float(means.at[model, f"{metric}_mean"]) if model in means.index else math.nan
        rows.append(row)
    rows.sort(key=lambda row: (_ranking_key(row), str(row["model"])))
    previous_key: tuple[float, ...] | None = None
    rank = 0
    for position, row in enumerate(rows, start=1):
        key = _ranking_key(row)
        if key != previous_key:
            rank, previous_key = position, key
        row["rank"] = rank
    columns = ["rank", "model", "cases", *OUTCOMES, "pass_rate", *(f"{metric}_mean" for metric in METRICS)]
    return pd.DataFrame(rows, columns=columns)


# ---------------------------------------------------------------------------------------------------
# Everything at once


def summarise(turns: pd.DataFrame, cases: pd.DataFrame) -> dict[str, object]:
    """All benchmark statistics as one JSON-ready dict (summary.json's "statistics" section).

    Every table is a list of row records (see :func:`frame_records`): plain numbers, ``None`` where
    undefined, never NaN, so ``json.dumps(..., allow_nan=False)`` works. Keys:

    * ``overall``: one record, metrics pooled over all models (the paper's headline numbers);
    * ``per_model``, ``per_model_phase``, ``per_model_variant``, ``per_model_archetype``:
      :func:`pooled_metrics` by those columns;
    * ``no_intervention``, ``variant_gap``, ``dcs_hes_spearman``: each ``{"overall": [...],
      "per_model": [...]}``, pooled over models and per model;
    * ``ranking``: :func:`model_ranking`.

    The numbers do not depend on the row order of the inputs (each function sorts first).
    """
    return {
        "overall": frame_records(pooled_metrics(turns, [])),
        "per_model": frame_records(pooled_metrics(turns, ["model"])),
        "per_model_phase": frame_records(pooled_metrics(turns, ["model", "phase"])),
        "per_model_variant": frame_records(pooled_metrics(turns, ["model", "variant"])),
        "per_model_archetype": frame_records(pooled_metrics(turns, ["model", "archetype"])),
        "no_intervention": {
            "overall": frame_records(no_intervention_share(turns, ())),
            "per_model": frame_records(no_intervention_share(turns)),
        },
        "variant_gap": {
            "overall": frame_records(variant_gap(turns, ())),
            "per_model": frame_records(variant_gap(turns)),
        },
        "dcs_hes_spearman": {
            "overall": frame_records(dcs_hes_spearman(turns, ())),
            "per_model": frame_records(dcs_hes_spearman(turns)),
        },
        "ranking": frame_records(model_ranking(cases, turns)),
    }
