"""Tests of psychosis_tests.analysis.stats on small tables whose answers are worked out by hand."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from psychosis_tests.analysis import intervals, paired_tests, stats

NAN = math.nan


def turn_row(
    model: str,
    scenario: str,
    repeat: int,
    turn: int,
    dcs: float = NAN,
    hes: float = NAN,
    sis: float = NAN,
) -> dict[str, object]:
    """One judged turn; scenario names are "<archetype>-<variant>", phases follow the 3-turn blocks."""
    archetype, variant = scenario.rsplit("-", 1)
    phase = (turn - 1) // 3 + 1
    return {
        "model": model,
        "scenario": scenario,
        "archetype": archetype,
        "variant": variant,
        "repeat": repeat,
        "turn": turn,
        "phase": phase,
        "phase_name": f"phase-{phase}",
        "dcs": dcs,
        "hes": hes,
        "sis": sis,
    }


def case_row(model: str, scenario: str, outcome: str) -> dict[str, object]:
    archetype, variant = scenario.rsplit("-", 1)
    return {"model": model, "scenario": scenario, "archetype": archetype, "variant": variant, "outcome": outcome}


def table(rows: list[dict[str, object]]) -> pd.DataFrame:
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------------
# pooled_metrics


def pooled_table() -> pd.DataFrame:
    return table(
        [
            turn_row("m", "conduit-explicit", 0, 1),  # phase 1: nothing scored
            turn_row("m", "conduit-explicit", 0, 4, dcs=2),
            turn_row("m", "conduit-explicit", 0, 5, dcs=2),
            turn_row("m", "conduit-explicit", 0, 6, dcs=1),
            turn_row("m", "conduit-explicit", 0, 7, dcs=0, hes=1, sis=0),
            turn_row("n", "conduit-explicit", 0, 1),
        ]
    )


def test_pooled_metrics_per_model_mean_sd_and_count() -> None:
    result = stats.pooled_metrics(pooled_table(), ["model"])
    assert list(result.columns) == [
        "model",
        *(f"{metric}_{stat}" for metric in ("dcs", "hes", "sis") for stat in ("mean", "sd", "n")),
    ]
    m = result.set_index("model").loc["m"]
    # DCS of m: 2, 2, 1, 0 -> mean 5/4 = 1.25; squared deviations 0.5625 + 0.5625 + 0.0625 + 1.5625 = 2.75;
    # sample variance 2.75 / 3 = 11/12; SD sqrt(11/12).
    assert m["dcs_mean"] == pytest.approx(1.25)
    assert m["dcs_sd"] == pytest.approx(math.sqrt(11 / 12))
    assert m["dcs_n"] == 4
    # HES of m: one scored turn (1) -> mean 1, SD undefined with ddof=1.
    assert m["hes_mean"] == 1.0
    assert math.isnan(m["hes_sd"])
    assert m["hes_n"] == 1
    assert m["sis_mean"] == 0.0
    n = result.set_index("model").loc["n"]
    assert n["dcs_n"] == 0 and math.isnan(n["dcs_mean"])


def test_pooled_metrics_per_phase_and_overall() -> None:
    result = stats.pooled_metrics(pooled_table(), ["model", "phase"])
    m = result[result["model"] == "m"].set_index("phase")
    assert list(m.index) == [1, 2, 3]
    assert m.loc[1, "dcs_n"] == 0
    # Phase 2 DCS: 2, 2, 1 -> mean 5/3; deviations 1/3, 1/3, -2/3; squares sum 6/9; variance (6/9)/2 = 1/3.
    assert m.loc[2, "dcs_mean"] == pytest.approx(5 / 3)
    assert m.loc[2, "dcs_sd"] == pytest.approx(math.sqrt(1 / 3))
    assert m.loc[3, "dcs_mean"] == 0.0 and m.loc[3, "dcs_n"] == 1

    overall = stats.pooled_metrics(pooled_table(), [])
    assert len(overall) == 1
    assert overall.loc[0, "dcs_mean"] == pytest.approx(1.25)  # model n adds no scored turns


def test_frame_records_turns_nan_into_none() -> None:
    records = stats.frame_records(stats.pooled_metrics(pooled_table(), ["model"]))
    m = records[0]
    assert m["model"] == "m"
    assert m["hes_sd"] is None
    assert type(m["dcs_n"]) is int and type(m["dcs_mean"]) is float


# ---------------------------------------------------------------------------------------------------
# no_intervention_share


def intervention_table() -> pd.DataFrame:
    return table(
        [
            # m, repeat 0: SIS 0, 0 -> no intervention
            turn_row("m", "conduit-explicit", 0, 7, sis=0),
            turn_row("m", "conduit-explicit", 0, 8, sis=0),
            # m, repeat 1: SIS 0, 1 -> intervened
            turn_row("m", "conduit-explicit", 1, 7, sis=0),
            turn_row("m", "conduit-explicit", 1, 8, sis=1),
            # m, other scenario: SIS 0 then unscored -> no intervention
            turn_row("m", "conduit-implicit", 0, 7, sis=0),
            turn_row("m", "conduit-implicit", 0, 8),
            # m, a conversation that never reached a scored SIS turn -> not counted
            turn_row("m", "romance-explicit", 0, 1),
            # n: one conversation with an intervention
            turn_row("n", "conduit-explicit", 0, 7, sis=1),
        ]
    )


def test_no_intervention_share_per_model() -> None:
    result = stats.no_intervention_share(intervention_table()).set_index("model")
    # m: 3 scored conversations, 2 without any SIS of 1 -> 2/3; 1 unscored conversation.
    assert result.loc["m", "conversations"] == 3
    assert result.loc["m", "without_intervention"] == 2
    assert result.loc["m", "share"] == pytest.approx(2 / 3)
    assert result.loc["m", "unscored_conversations"] == 1
    # n: 1 conversation, it intervened -> 0/1.
    assert result.loc["n", "share"] == 0.0


def test_no_intervention_share_pooled_and_undefined() -> None:
    pooled = stats.no_intervention_share(intervention_table(), ())
    # 2 of the 4 scored conversations across both models had no intervention.
    assert pooled.loc[0, "share"] == pytest.approx(0.5)
    unscored = stats.no_intervention_share(table([turn_row("m", "conduit-explicit", 0, 1)]))
    assert unscored.loc[0, "conversations"] == 0
    assert stats.frame_records(unscored)[0]["share"] is None


# ---------------------------------------------------------------------------------------------------
# variant_gap


def gap_table() -> pd.DataFrame:
    return table(
        [
            # archetype a1: explicit DCS 0 (repeat 0) and 1 (repeat 1) -> 0.5; implicit 2, 2 -> 2. Difference 1.5.
            turn_row("m", "a1-explicit", 0, 4, dcs=0),
            turn_row("m", "a1-explicit", 1, 4, dcs=1),
            turn_row("m", "a1-implicit", 0, 4, dcs=2),
            turn_row("m", "a1-implicit", 1, 4, dcs=2),
            # a2: explicit 0, implicit 1. Difference 1.
            turn_row("m", "a2-explicit", 0, 4, dcs=0),
            turn_row("m", "a2-implicit", 0, 4, dcs=1),
            # a3: explicit 1, implicit 1 and 2 -> 1.5. Difference 0.5.
            turn_row("m", "a3-explicit", 0, 4, dcs=1),
            turn_row("m", "a3-implicit", 0, 4, dcs=1),
            turn_row("m", "a3-implicit", 0, 5, dcs=2),
            # a4 has only an explicit scenario: no pair.
            turn_row("m", "a4-explicit", 0, 4, dcs=2),
        ]
    )


def test_variant_gap_means_and_p_values() -> None:
    result = stats.variant_gap(gap_table())
    dcs = result[(result["model"] == "m") & (result["metric"] == "dcs")].iloc[0]
    assert dcs["n_pairs"] == 3
    assert dcs["mean_explicit"] == pytest.approx((0.5 + 0 + 1) / 3)
    assert dcs["mean_implicit"] == pytest.approx((2 + 1 + 1.5) / 3)
    assert dcs["mean_difference"] == pytest.approx(1.0)
    # Differences 1.5, 1, 0.5: mean 1, sample SD sqrt((0.25 + 0 + 0.25) / 2) = 0.5,
    # t = 1 / (0.5 / sqrt(3)) = 2 sqrt(3) with 2 degrees of freedom. For 2 df the t CDF is
    # 1/2 + t / (2 sqrt(2 + t^2)), so the two-sided p is 1 - t / sqrt(2 + t^2) = 1 - sqrt(12/14).
    t = 2 * math.sqrt(3)
    assert dcs["ttest_p"] == pytest.approx(1 - t / math.sqrt(2 + t * t), rel=1e-9)
    assert dcs["ttest_p"] == pytest.approx(0.0741799, abs=1e-7)
    # Wilcoxon, exact: all 3 differences positive; P(all signs +) = 1/8, two-sided 2/8 = 0.25.
    assert dcs["wilcoxon_p"] == pytest.approx(0.25)
    record = stats.frame_records(result)[0]
    assert record["metric"] == "dcs"
    assert record["wilcoxon_note"] is None and record["ttest_note"] is None


def test_variant_gap_without_pairs_gives_none_with_reason() -> None:
    result = stats.variant_gap(gap_table())
    hes = result[result["metric"] == "hes"].iloc[0]
    assert hes["n_pairs"] == 0
    record = stats.frame_records(result[result["metric"] == "hes"])[0]
    assert record["mean_difference"] is None
    assert record["wilcoxon_p"] is None and "at least 2" in str(record["wilcoxon_note"])
    assert record["ttest_p"] is None and "at least 2" in str(record["ttest_note"])


def test_variant_gap_all_zero_differences() -> None:
    rows = [
        turn_row("m", "a1-explicit", 0, 4, dcs=1),
        turn_row("m", "a1-implicit", 0, 4, dcs=1),
        turn_row("m", "a2-explicit", 0, 4, dcs=2),
        turn_row("m", "a2-implicit", 0, 4, dcs=2),
    ]
    record = stats.frame_records(stats.variant_gap(table(rows)))[0]
    assert record["metric"] == "dcs" and record["n_pairs"] == 2
    assert record["mean_difference"] == 0.0
    assert record["wilcoxon_p"] is None and "zero" in str(record["wilcoxon_note"])
    assert record["ttest_p"] is None and "zero" in str(record["ttest_note"])


def test_variant_gap_constant_nonzero_differences() -> None:
    rows = [
        turn_row("m", "a1-explicit", 0, 4, dcs=0),
        turn_row("m", "a1-implicit", 0, 4, dcs=1),
        turn_row("m", "a2-explicit", 0, 4, dcs=1),
        turn_row("m", "a2-implicit", 0, 4, dcs=2),
    ]
    record = stats.frame_records(stats.variant_gap(table(rows)))[0]
    # Differences 1, 1: the t statistic divides by a zero SD; the Wilcoxon test is defined
    # (exact: both signs positive, 1/4, two-sided 1/2).
    assert record["ttest_p"] is None and "zero variance" in str(record["ttest_note"])
    assert record["wilcoxon_p"] == pytest.approx(0.5)


def test_variant_gap_pooled_pairs_every_model_archetype() -> None:
    other = [
        turn_row("k", "a1-explicit", 0, 4, dcs=0),
        turn_row("k", "a1-implicit", 0, 4, dcs=2),
    ]
    pooled = stats.variant_gap(pd.concat([gap_table(), table(other)], ignore_index=True), ())
    dcs = pooled[pooled["metric"] == "dcs"].iloc[0]
    # Pairs: m's three (differences 1.5, 1, 0.5) and k's one (difference 2) -> mean 5/4.
    assert dcs["n_pairs"] == 4
    assert dcs["mean_difference"] == pytest.approx(1.25)


# ---------------------------------------------------------------------------------------------------
# dcs_hes_spearman


def test_spearman_perfectly_monotone_and_reversed() -> None:
    rows = [
        turn_row("up", "a1-explicit", 0, 7, dcs=0, hes=0),
        turn_row("up", "a1-explicit", 0, 8, dcs=1, hes=1),
        turn_row("up", "a1-explicit", 0, 9, dcs=2, hes=2),
        turn_row("up", "a1-explicit", 0, 10, dcs=2, hes=2),
        turn_row("up", "a1-explicit", 0, 4, dcs=0),  # no HES: left out
        turn_row("down", "a1-explicit", 0, 7, dcs=0, hes=2),
        turn_row("down", "a1-explicit", 0, 8, dcs=1, hes=1),
        turn_row("down", "a1-explicit", 0, 9, dcs=2, hes=0),
    ]
    result = stats.dcs_hes_spearman(table(rows)).set_index("model")
    assert result.loc["up", "n"] == 4
    assert result.loc["up", "r_s"] == pytest.approx(1.0)
    assert result.loc["down", "r_s"] == pytest.approx(-1.0)
    notes = {record["model"]: record["note"] for record in stats.frame_records(stats.dcs_hes_spearman(table(rows)))}
    assert notes == {"up": None, "down": None}
    pooled = stats.frame_records(stats.dcs_hes_spearman(table(rows), ()))[0]
    assert pooled["n"] == 7
    assert isinstance(pooled["r_s"], float) and -1.0 < pooled["r_s"] < 1.0


def test_spearman_undefined_cases_give_none_with_reason() -> None:
    rows = [
        turn_row("flat", "a1-explicit", 0, 7, dcs=2, hes=0),
        turn_row("flat", "a1-explicit", 0, 8, dcs=2, hes=1),
        turn_row("flat", "a1-explicit", 0, 9, dcs=2, hes=2),
        turn_row("short", "a1-explicit", 0, 7, dcs=0, hes=0),
        turn_row("short", "a1-explicit", 0, 8, dcs=1, hes=1),
    ]
    records = {record["model"]: record for record in stats.frame_records(stats.dcs_hes_spearman(table(rows)))}
    assert records["flat"]["r_s"] is None and records["flat"]["p"] is None
    assert "DCS is constant" in str(records["flat"]["note"])
    assert records["short"]["r_s"] is None and "at least 3" in str(records["short"]["note"])


# ---------------------------------------------------------------------------------------------------
# model_ranking


def test_model_ranking_order_and_ties() -> None:
    cases = table(
        [
            case_row("x", "a1-explicit", "passed"),
            case_row("x", "a1-implicit", "passed"),
            case_row("w", "a1-explicit", "passed"),
            case_row("w", "a1-implicit", "failed"),
            case_row("y", "a1-explicit", "passed"),
            case_row("y", "a1-implicit", "failed"),
            case_row("u", "a1-explicit", "failed"),
            case_row("u", "a1-implicit", "passed"),
            case_row("z", "a1-explicit", "passed"),
            case_row("z", "a1-implicit", "error"),
        ]
    )
    turns = table(
        [
            turn_row("x", "a1-explicit", 0, 7, dcs=0, hes=0, sis=1),
            turn_row("w", "a1-explicit", 0, 7, dcs=1, hes=0, sis=1),
            turn_row("y", "a1-explicit", 0, 7, dcs=1, hes=0, sis=0),
            turn_row("u", "a1-explicit", 0, 7, dcs=1, hes=0, sis=0),
            turn_row("z", "a1-explicit", 0, 7, dcs=2, hes=2, sis=0),
            turn_row("q", "a1-explicit", 0, 7, dcs=0, hes=0, sis=1),  # no cases: pass rate undefined
        ]
    )
    result = stats.model_ranking(cases, turns)
    # x passes all; w, y, u, z pass half. Among those, z has the worst DCS + HES (4 vs 1);
    # w beats y and u on SIS; y and u tie on everything and share rank 3 (listed by name).
    assert list(result["model"]) == ["x", "w", "u", "y", "z", "q"]
    assert list(result["rank"]) == [1, 2, 3, 3, 5, 6]
    z = result.set_index("model").loc["z"]
    assert (z["cases"], z["passed"], z["failed"], z["error"]) == (2, 1, 0, 1)
    assert z["pass_rate"] == 0.5
    assert stats.frame_records(result)[-1]["pass_rate"] is None


def test_model_ranking_rejects_unknown_outcome() -> None:
    cases = table([case_row("x", "a1-explicit", "skipped")])
    with pytest.raises(ValueError, match="outcome.*'skipped'.*passed"):
        stats.model_ranking(cases, table([turn_row("x", "a1-explicit", 0, 7, dcs=0)]))


# ---------------------------------------------------------------------------------------------------
# bootstrap_interval and phase_interval


def test_bootstrap_interval_is_deterministic_and_contains_the_mean() -> None:
    values = [0.0, 1.0, 2.0, 2.0, 1.0, 0.0, 2.0]
    first = intervals.bootstrap_interval(values, seed=7)
    assert first == intervals.bootstrap_interval(values, seed=7)
    low, high = first
    mean = sum(values) / len(values)
    assert 0.0 <= low < mean < high <= 2.0
    narrow_low, narrow_high = intervals.bootstrap_interval(values, confidence=0.5, seed=7)
    assert low <= narrow_low and narrow_high <= high


def test_bootstrap_interval_on_two_values_matches_the_resampling_distribution() -> None:
    # Resampled means of [0, 1] are 0, 0.5, 1 with probability 1/4, 1/2, 1/4: the 2.5% and 97.5%
    # percentiles are 0 and 1, the 30% and 70% percentiles both 0.5.
    assert intervals.bootstrap_interval([0.0, 1.0]) == (0.0, 1.0)
    assert intervals.bootstrap_interval([0.0, 1.0], confidence=0.4) == (0.5, 0.5)


def test_bootstrap_interval_constant_and_invalid_input() -> None:
    assert intervals.bootstrap_interval([1.5]) == (1.5, 1.5)
    assert intervals.bootstrap_interval([0.1, 0.1, 0.1]) == (0.1, 0.1)
    with pytest.raises(ValueError, match="at least one value"):
        intervals.bootstrap_interval([])
    with pytest.raises(ValueError, match="NaN"):
        intervals.bootstrap_interval([1.0, NAN])
    with pytest.raises(ValueError, match="confidence"):
        intervals.bootstrap_interval([1.0, 2.0], confidence=1.0)


def test_phase_interval_resamples_whole_conversations() -> None:
    # Each repeat's phase-3 DCS averages 1 (0, 2, 1 and 2, 0, 1): resampling conversations finds no
    # run-to-run spread, so the interval collapses to the mean, where resampling turns would not.
    rows = [
        turn_row("m", "a1-implicit", repeat, turn, dcs=value)
        for repeat, values in ((0, (0, 2, 1)), (1, (2, 0, 1)))
        for turn, value in zip((7, 8, 9), values, strict=True)
    ]
    assert intervals.phase_interval(table(rows), "dcs", 3) == intervals.PhaseInterval(1.0, 1.0, 1.0, 6)


def test_phase_interval_weights_conversations_by_scored_turns() -> None:
    # Repeat 0: one scored turn (2); repeat 1: 0, 0, 0. Pooled mean 2/4 = 0.5. Resampled pooled means:
    # (2 + 2) / 2 = 2 (repeat 0 twice, p 1/4), 2/4 = 0.5 (one of each, p 1/2), 0/6 = 0 (repeat 1 twice,
    # p 1/4). The 95% interval spans 0..2; the 40% one (30% and 70% percentiles) is 0.5..0.5, where
    # unweighted conversation means (2, 1, 0) would put it at 1..1.
    rows = [
        turn_row("m", "a1-implicit", 0, 7, dcs=2),
        turn_row("m", "a1-implicit", 0, 8),
        turn_row("m", "a1-implicit", 1, 7, dcs=0),
        turn_row("m", "a1-implicit", 1, 8, dcs=0),
        turn_row("m", "a1-implicit", 1, 9, dcs=0),
    ]
    assert intervals.phase_interval(table(rows), "dcs", 3) == intervals.PhaseInterval(0.5, 0.0, 2.0, 4)
    assert intervals.phase_interval(table(rows), "dcs", 3, confidence=0.4) == intervals.PhaseInterval(0.5, 0.5, 0.5, 4)


def test_phase_interval_single_repeat_resamples_turns() -> None:
    rows = [turn_row("m", "a1-implicit", 0, turn, dcs=value) for turn, value in ((7, 0), (8, 2), (9, 1))]
    interval = intervals.phase_interval(table(rows), "dcs", 3, seed=3)
    assert interval.mean == 1.0 and interval.n == 3
    assert interval.low is not None and interval.high is not None
    assert 0.0 <= interval.low < 1.0 < interval.high <= 2.0
    assert (interval.low, interval.high) == intervals.bootstrap_interval([0.0, 2.0, 1.0], seed=3)


def test_phase_interval_unscored_phase_and_bad_input() -> None:
    rows = [turn_row("m", "a1-implicit", 0, 1), turn_row("m", "a1-implicit", 0, 7, dcs=1)]
    assert intervals.phase_interval(table(rows), "hes", 3) == intervals.PhaseInterval(None, None, None, 0)
    two_cases = table([*rows, turn_row("m", "a2-implicit", 0, 7, dcs=1)])
    with pytest.raises(ValueError, match="one \\(model, scenario\\) case, got 2"):
        intervals.phase_interval(two_cases, "dcs", 3)
    with pytest.raises(ValueError, match="metric must be one of"):
        intervals.phase_interval(table(rows), "xyz", 3)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------
# Input checks


def test_turn_table_checks_name_the_problem() -> None:
    rows = [turn_row("m", "a1-explicit", 0, 4, dcs=1)]
    with pytest.raises(ValueError, match="lacks column.*'hes'"):
        stats.pooled_metrics(table(rows).drop(columns=["hes"]), ["model"])
    with pytest.raises(ValueError, match="'dcs'.*outside 0..2"):
        stats.pooled_metrics(table([turn_row("m", "a1-explicit", 0, 4, dcs=3)]), ["model"])
    with pytest.raises(ValueError, match="'sis'.*outside 0..1"):
        stats.pooled_metrics(table([turn_row("m", "a1-explicit", 0, 7, sis=2)]), ["model"])
    with pytest.raises(ValueError, match="2 rows sharing"):
        stats.pooled_metrics(table(rows * 2), ["model"])


# ---------------------------------------------------------------------------------------------------
# summarise


def summary_tables() -> tuple[pd.DataFrame, pd.DataFrame]:
    turns: list[dict[str, object]] = []
    cases: list[dict[str, object]] = []
    for model_index, model in enumerate(("alpha", "beta")):
        for archetype_index, archetype in enumerate(("conduit", "romance", "medical")):
            for variant_index, variant in enumerate(("explicit", "implicit")):
                scenario = f"{archetype}-{variant}"
                outcome = ("passed", "failed", "error")[(model_index + archetype_index + variant_index) % 3]
                cases.append(case_row(model, scenario, outcome))
                for repeat in range(2):
                    for turn in range(1, 13):
                        # A fixed pattern giving ties, varied values and fractional means.
                        seed = model_index + 2 * archetype_index + 3 * variant_index + 5 * repeat + 7 * turn
                        turns.append(
                            turn_row(
                                model,
                                scenario,
                                repeat,
                                turn,
                                dcs=seed % 3 if turn >= 4 else NAN,
                                hes=(seed // 2) % 3 if turn >= 7 else NAN,
                                sis=(seed // 3) % 2 if turn >= 7 else NAN,
                            )
                        )
    return table(turns), table(cases)


def test_summarise_is_json_ready_and_row_order_invariant() -> None:
    turns, cases = summary_tables()
    summary = stats.summarise(turns, cases)
    assert set(summary) == {
        "overall",
        "per_model",
        "per_model_phase",
        "per_model_variant",
        "per_model_archetype",
        "no_intervention",
        "variant_gap",
        "dcs_hes_spearman",
        "ranking",
    }
    text = json.dumps(summary, allow_nan=False, sort_keys=True)

    shuffled = stats.summarise(
        turns.sample(frac=1.0, random_state=1).reset_index(drop=True),
        cases.iloc[::-1].reset_index(drop=True),
    )
    assert json.dumps(shuffled, allow_nan=False, sort_keys=True) == text

    overall = summary["overall"]
    assert isinstance(overall, list) and overall[0]["dcs_n"] == 2 * 6 * 2 * 9  # models x cases x repeats x turns
    assert overall[0]["dcs_mean"] == pytest.approx(turns["dcs"].mean())
    assert [row["model"] for row in summary["per_model"]] == ["alpha", "beta"]  # type: ignore[index]
    phase_one = summary["per_model_phase"][0]  # type: ignore[index]
    assert phase_one["phase"] == 1 and phase_one["dcs_mean"] is None and phase_one["dcs_n"] == 0
    gap = summary["variant_gap"]
    assert isinstance(gap, dict) and {row["metric"] for row in gap["overall"]} == {"dcs", "hes", "sis"}
    assert all(row["n_pairs"] == 3 for row in gap["per_model"])
    ranking = summary["ranking"]
    assert isinstance(ranking, list) and sorted(row["cases"] for row in ranking) == [6, 6]


def test_importing_stats_does_not_import_scipy() -> None:
    package_root = Path(stats.__file__).resolve().parents[2]
    code = "import sys, psychosis_tests.analysis.stats; print('scipy' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=package_root, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


@pytest.mark.parametrize(
    "differences",
    [
        [0.5, 0.25, 0.0, -0.25, 0.5, 1.0, 0.25, 0.75],  # ties and a zero: scipy's permutation path
        [1.5, 1.0, 0.5],
        [0.25, -0.5, 1.0, 2.0, -0.75, 1.25],  # no ties: scipy's exact distribution
        [0.0, 0.0, 0.5, -0.5],
        [1.0, 1.0, 1.0, -1.0, 1.0, 1.0, 1.0, 1.0, -1.0, 1.0, 1.0, 1.0, 1.0],  # 13 pairs, tied
        [0.1 * i - 0.45 for i in range(16)],  # over 13 pairs: scipy itself
    ],
)
def test_wilcoxon_p_is_scipys(differences: list[float]) -> None:
    from scipy.stats import wilcoxon

    values = np.array(differences)
    assert paired_tests._wilcoxon_p(values) == pytest.approx(wilcoxon(values, zero_method="wilcox").pvalue, rel=1e-12)
