"""The run's benchmark summary as an HTML page for the Allure report: the same numbers as
summary.json and summary.md, in tables whose every cell is escaped."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from psychosis_tests.inputs.method import METRIC_SPEC, METRICS, PHASE_NAMES, phase_title
from psychosis_tests.reports.escalation import escalation_line
from psychosis_tests.reports.html import escape, facts, page, table
from psychosis_tests.reports.tables import (
    TRAJECTORY_LEGEND,
    doubt_lines,
    format_number,
    has_main_set,
    interval_legend,
    over_caution_cell,
    run_warnings,
    user_turns_text,
)

_METRIC_HEADER = [METRIC_SPEC[m].label for m in METRICS]


def _phase_label(phase: int) -> str:
    """A phase number with its name, e.g. "2 pattern seeking"."""
    return f"{phase} {phase_title(PHASE_NAMES[phase - 1])}" if 1 <= phase <= len(PHASE_NAMES) else str(phase)


def _metric_cells(row: Mapping[str, Any], interval: Mapping[str, Any] | None = None) -> list[str]:
    """`mean ± SD (n=...)` per metric, and with `interval` (a run with repeats) `[low, high]`, the
    95% interval of the mean, as summary.md gives it."""
    cells = []
    for metric in METRICS:
        mean, sd, n = row.get(f"{metric}_mean"), row.get(f"{metric}_sd"), row.get(f"{metric}_n")
        cell = "n/a" if mean is None else f"{mean:.2f} ± {format_number(sd)}" + ("" if n is None else f" (n={n})")
        if mean is not None and interval is not None and interval.get(f"{metric}_low") is not None:
            cell += f" [{interval[f'{metric}_low']:.2f}, {interval[f'{metric}_high']:.2f}]"
        cells.append(cell)
    return cells


def _trajectory_section(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Per model: the trajectory metrics over its conversations (docs/adaptive.md)."""
    if not rows:
        return []

    def turn(value: object) -> str:
        return "n/a" if value is None else f"t{float(value):.1f}"  # type: ignore[arg-type]

    return [
        "<h2>Trajectories</h2>",
        f'<p class="note">{escape(TRAJECTORY_LEGEND[0].upper() + TRAJECTORY_LEGEND[1:])}.</p>',
        table(
            ["model", "conversations", "turns", "validated", "first DCS 2", "enabled harm", "first HES 2",
             "longest run without help (mean)", "(max)", "DCS drift per turn", "recovered"],
            (
                [r["model"], r["conversations"], r["turns"], r["validated"], turn(r["first_validation_mean"]),
                 r["harmed"], turn(r["first_harm_mean"]), format_number(r["without_intervention_mean"], 1),
                 r["without_intervention_max"], format_number(r["drift_mean"], 3), r["recovered"]]
                for r in rows
            ),
            numeric=(1, 2, 3, 5, 7, 8, 9, 10),
        ),  # fmt: skip
    ]


def _models_table(stats: Mapping[str, Any]) -> str:
    """One scenario set's models in ranking order: cases, outcomes and pooled scores."""
    per_model = {r["model"]: r for r in stats["per_model"]}
    intervals = {r["model"]: r for r in stats.get("per_model_interval", [])}
    return table(
        ["rank", "model", "cases", "passed", "failed", "errors", "pass rate", *_METRIC_HEADER],
        (
            [r["rank"], r["model"], r["cases"], r["passed"], r["failed"], r["error"], format_number(r["pass_rate"]),
             *_metric_cells(per_model.get(r["model"], {}), intervals.get(r["model"]))]
            for r in stats["ranking"]
        ),
        numeric=(0, 2, 3, 4, 5, 6),
    )  # fmt: skip


def _pack_sections(summary: Mapping[str, Any]) -> list[str]:
    """Each scenario pack's own judge doubt, models, controls and explicit/implicit gap (summary.json's
    statistics.packs); the tables above are the main set's alone."""
    body: list[str] = []
    for name, pack in summary["statistics"].get("packs", {}).items():
        body += [
            f"<h2>Pack {escape(name)}</h2>",
            '<p class="note">Its own statistics: none of the tables above includes it.</p>',
            *(f'<p class="note">{escape(line)}.</p>' for line in doubt_lines(dict(summary), [name])),
            _models_table(pack),
            table(
                ["model", "control cases", "passed", "over-caution", "referral"],
                ([r["model"], r["control_cases"], r["control_passed"], over_caution_cell(r), format_number(r["sis_rate"])]
                 for r in pack.get("over_caution", {}).get("per_model", [])),
                numeric=(1, 2),
            ),
            table(
                ["model", "metric", "pairs", "explicit", "implicit", "Wilcoxon p"],
                ([r["model"], str(r["metric"]).upper(), r["n_pairs"], format_number(r["mean_explicit"]),
                  format_number(r["mean_implicit"]), format_number(r["wilcoxon_p"], 4)]
                 for r in pack["variant_gap"]["per_model"]),
                numeric=(2, 3, 4, 5),
            ),
        ]  # fmt: skip
    return body


def _main_sections(summary: Mapping[str, Any]) -> list[str]:
    """The main set's sections: models, pooled, controls, per phase, variant and archetype, the
    explicit/implicit gap, the DCS-HES correlation, trajectories and conversations without help."""
    stats = summary["statistics"]
    body = [
        "<h2>Models</h2>",
        _models_table(stats),
        "<h2>All models pooled</h2>",
        table(_METRIC_HEADER, (_metric_cells(r) for r in stats["overall"])),
    ]
    caution = stats.get("over_caution", {}).get("per_model", [])
    if caution:
        body += [
            "<h2>Controls: over-caution and over-referral</h2>",
            '<p class="note">The scores above are over delusion scenarios. On control scenarios (ordinary '
            "users, nothing at stake) over-caution is the rate of replies that pathologise the user or refuse "
            "an ordinary request, and referral the rate of replies pointing to professional or emergency "
            "help; lower is better for both.</p>",
            table(
                ["model", "control cases", "passed", "over-caution", "referral"],
                ([r["model"], r["control_cases"], r["control_passed"], over_caution_cell(r), format_number(r["sis_rate"])]
                 for r in caution),  # fmt: skip
                numeric=(1, 2),
            ),
        ]
    for title, column in (("Per phase", "phase"), ("Per variant", "variant"), ("Per archetype", "archetype")):
        body += [
            f"<h2>{escape(title)}</h2>",
            table(
                ["model", column, *_METRIC_HEADER],
                ([r["model"], _phase_label(r[column]) if column == "phase" else r[column], *_metric_cells(r)]
                 for r in stats[f"per_model_{column}"]),  # fmt: skip
            ),
        ]
    gap = stats["variant_gap"]
    body += [
        "<h2>Explicit vs implicit, paired by archetype</h2>",
        '<p class="note">Difference = implicit - explicit (positive: implicit scores higher, worse for '
        "DCS and HES, better for SIS). The Wilcoxon signed-rank test is the primary test: the scores "
        "are ordinal and bounded and a model has few archetype pairs, so normality cannot be assumed. "
        "The paired t-test is shown for comparison with the paper.</p>",
        table(
            ["model", "metric", "pairs", "explicit", "implicit", "difference", "Wilcoxon p (primary)",
             "paired t-test p", "note"],
            (
                [r.get("model", "all models"), str(r["metric"]).upper(), r["n_pairs"], format_number(r["mean_explicit"]),
                 format_number(r["mean_implicit"]), format_number(r["mean_difference"]), format_number(r["wilcoxon_p"], 4),
                 format_number(r["ttest_p"], 4), "; ".join(dict.fromkeys(filter(None, [r["wilcoxon_note"], r["ttest_note"]])))]
                for r in [*gap["per_model"], *gap["overall"]]
            ),
            numeric=(2, 3, 4, 5, 6, 7),
        ),  # fmt: skip
        "<h2>DCS and HES: Spearman correlation over turns scored on both</h2>",
        table(
            ["model", "turns", "r_s", "p", "note"],
            (
                [r.get("model", "all models"), r["n"], format_number(r["r_s"]), format_number(r["p"], 4), r["note"] or ""]
                for r in [*stats["dcs_hes_spearman"]["per_model"], *stats["dcs_hes_spearman"]["overall"]]
            ),
            numeric=(1, 2, 3),
        ),
        *_trajectory_section(summary.get("trajectories") or []),
        "<h2>Conversations without any safety intervention</h2>",
        table(
            ["model", "conversations", "with none at all", "share", "not scored"],
            (
                [r.get("model", "all models"), r["conversations"], r["without_intervention"], format_number(r["share"]),
                 r["unscored_conversations"]]
                for r in [*stats["no_intervention"]["per_model"], *stats["no_intervention"]["overall"]]
            ),
            numeric=(1, 2, 3, 4),
        ),  # fmt: skip
    ]
    return body


def summary_html(summary: Mapping[str, Any]) -> str:
    """The run's statistics as HTML tables (the same numbers as summary.json and summary.md)."""
    run, stats = summary["run"], summary["statistics"]
    body = [
        f"<h1>psychosis-bench run {escape(run['run_id'])}</h1>",
        facts(
            [
                ("targets", ", ".join(run["targets"])),
                ("judge", f"{run['judge']} ({run.get('judge_model', '')})"),
                ("repeats", run["repeats"]),
                *([("user turns", user_turns)] if (user_turns := user_turns_text(dict(run))) else []),
                ("scenario set hash", run["scenario_set_hash"]),
                ("thresholds hash", run["thresholds_hash"]),
                ("psychosis-bench", run["package_version"]),
                ("python", run["python"]),
                ("started", run["started_at"]),
                ("finished", run["finished_at"]),
            ]
        ),
        *(f'<p class="note"><strong>Warning: {escape(warning)}.</strong></p>' for warning in run_warnings(dict(summary))),
        *([f'<p class="note">{escape(run["judge_calibration"])}.</p>'] if run.get("judge_calibration") else []),
        *([f'<p class="note">{escape(escalation_line(summary["escalation"]))}.</p>'] if summary.get("escalation") else []),
        *(f'<p class="note">{escape(line)}.</p>' for line in doubt_lines(dict(summary), [None])),
        '<p class="note">Scores: mean ± SD over scored turns (n = scored turns). DCS 0-2 and HES 0-2, '
        "lower is safer; SIS 0/1, higher is safer.</p>",
        *([f'<p class="note">In the models tables, {escape(interval)}.</p>']
          if (interval := interval_legend(dict(summary))) else []),
    ]
    if has_main_set(stats):  # a run of pack cases only has none: its tables would be empty
        body += _main_sections(summary)
    body += _pack_sections(summary)
    not_passed = [c for c in summary["cases"] if c["outcome"] != "passed"]
    if not_passed:
        body += [
            "<h2>Cases not passed</h2>",
            table(
                ["model", "scenario", "outcome", "why"],
                (
                    [c["model"], c["scenario"], c["outcome"],
                     c["error"] or "; ".join([*c["breaches"], *c.get("regressions", [])]) or c.get("failure") or ""]
                    for c in not_passed
                ),
                row_class=lambda row: "breach",
            ),  # fmt: skip
        ]
    return page(f"psychosis-bench run {run['run_id']}", body)
