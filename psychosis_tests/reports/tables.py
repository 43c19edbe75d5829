"""Text tables of a run for people: the terminal summary, summary.md for pull requests, and
the markdown of `python -m psychosis_tests compare`. Endpoint text in them is made inert."""

from __future__ import annotations

import html
import textwrap
from collections.abc import Sequence

from psychosis_tests.analysis.baseline import CHANGES, REGRESSION_RULE, Change, Comparison, RunComparison, delta_text
from psychosis_tests.common.errors import inert
from psychosis_tests.inputs.method import JUDGED_METRICS, METRIC_SPEC, METRICS
from psychosis_tests.reports.judge_doubt import doubt_line
from psychosis_tests.reports.usage import usage_lines

_LABELS = ", ".join(METRIC_SPEC[m].label for m in METRICS)
"""The method's metrics as tables name them: "DCS, HES, SIS"."""
_CELLS = " | ".join(METRIC_SPEC[m].label for m in METRICS)


_MARKDOWN_SYNTAX = str.maketrans({c: "\\" + c for c in "\\`*_[]~#!"})
"""Characters that start markdown syntax (code, emphasis, links and images, strike-through,
headings), each escaped with a backslash so that it shows as itself."""


def markdown_text(text: str) -> str:
    """Untrusted text (error messages and rationales quote endpoints) made inert in markdown: one
    line, no control character or invisible mark (`inert`), no HTML, no markdown syntax (no image,
    link, emphasis or code span), no pipe that would end a table cell."""
    flat = html.escape(" ".join(inert(text).split()), quote=False)
    return flat.translate(_MARKDOWN_SYNTAX).replace("|", "&#124;")


def markdown_code(text: str) -> str:
    """An id or a path as a markdown code span, on one line: a code span shows its text as it is
    (no HTML, no entity, no markdown), so it is only made inert, and a backtick in it becomes '
    (as in the compare report) so it cannot close the span."""
    return "`" + " ".join(inert(text).split()).replace("`", "'") + "`"


def user_turns_text(run: dict) -> str | None:
    """Who wrote a run's user turns and how many there were ("the script, 8 per conversation"), for
    the summaries; None when the script wrote them all at its own length (adaptive numbers do not
    compare with scripted ones, so a summary says which it holds)."""
    if not run.get("user_model") and not run.get("turns"):
        return None
    writer = f"{run['user_model']} ({run.get('user_mode', 'adaptive')} mode)" if run.get("user_model") else "the script"
    return f"{writer}, {run.get('turns') or 'as scripted'} per conversation"


def format_number(value: object, digits: int = 2) -> str:
    """A table cell: n/a for a missing value, fixed digits for a float."""
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _metric_cell(row: dict, metric: str, interval: dict | None = None) -> str:
    """`mean ± SD`, and with repeats `[low, high]`, the 95% interval of the mean."""
    mean, sd = row.get(f"{metric}_mean"), row.get(f"{metric}_sd")
    if mean is None:
        return "n/a"
    cell = f"{mean:.2f} ± {format_number(sd)}"
    if interval is not None and interval.get(f"{metric}_low") is not None:
        cell += f" [{interval[f'{metric}_low']:.2f}, {interval[f'{metric}_high']:.2f}]"
    return cell


def metric_legend(summary: dict) -> str:
    """What the numbers in a metric cell are."""
    text = "mean ± SD of the scored turns (sample standard deviation, not an interval)"
    return f"{text}; {interval}" if (interval := interval_legend(summary)) else text


def interval_legend(summary: dict) -> str:
    """What a metric cell's [low, high] is; "" in a run without intervals (no repeats)."""
    statistics = summary["statistics"]
    sets = [statistics, *statistics.get("packs", {}).values()]  # a pack-only run's intervals are its pack's
    if not any(stats.get("per_model_interval") for stats in sets):
        return ""
    return (
        f"[low, high] is the 95% bootstrap interval of the mean over the model's conversations "
        f"({summary['run']['repeats']} per case)"
    )


def _over_caution(stats: dict) -> dict[str, dict]:
    """Per model: its over-caution record on control scenarios (absent in runs without controls)."""
    return {r["model"]: r for r in stats.get("over_caution", {}).get("per_model", [])}


def over_caution_cell(row: dict | None) -> str:
    """The over-caution rate on controls with its count, or n/a without scored control turns."""
    if not row or row.get("occ_rate") is None:
        return "n/a"
    return f"{row['occ_rate']:.2f} (n={row['occ_n']})"


def terminal_table(summary: dict) -> list[str]:
    """Per model, in ranking order (a model whose every case errored included): cases passed,
    failed and errored, each metric's mean ± SD over delusion scenarios (and 95% interval with
    repeats), and the over-caution rate on control scenarios; each scenario pack's own table after."""
    stats = summary["statistics"]
    packs = stats.get("packs", {})
    main = _terminal_models(stats) if has_main_set(stats) else []  # none when only packs ran
    lines = ["main set (the paper-comparable statistics):", *main] if packs and main else main
    for name, pack_stats in packs.items():
        lines += [f"pack {terminal_text(name)} (its own statistics, not in the main set's):", *_terminal_models(pack_stats)]
    lines.append(f"{_LABELS}: {metric_legend(summary)}.")
    lines += trajectory_lines(summary)
    if summary.get("usage"):
        lines += usage_lines(summary["usage"], markdown=False, escalation=summary.get("escalation"))
    if summary["run"].get("spent_usd"):
        lines.append(f"spent on priced models in all (errored cases included): ${summary['run']['spent_usd']:.4f}")
    lines += [f"WARNING: {terminal_text(w)}." for w in run_warnings(summary)]
    if summary["run"].get("judge_calibration"):
        lines.append(terminal_text(summary["run"]["judge_calibration"]))
    lines += doubt_lines(summary)
    return lines + panel_lines(summary) + case_lines(summary) + baseline_lines(summary)


def has_main_set(stats: dict) -> bool:
    """Whether the run has cases of the main set (a run of pack cases only has none): a set with
    no case is left out of the terminal table, summary.md, the HTML summary and the plots."""
    return bool(stats["ranking"]) or not stats.get("packs")


def _set_prefix(summary: dict, pack: str | None, *, markdown: bool = False) -> str:
    """What a line of one set's judge figures starts with when the run has packs: "main set: " or
    "pack NAME: "; nothing in a run of the main set alone."""
    if not summary["statistics"].get("packs"):
        return ""
    return "main set: " if pack is None else f"pack {markdown_text(pack) if markdown else terminal_text(pack)}: "


def _set_figures(summary: dict, pack: str | None) -> dict:
    """Where one set's judge figures (`panel`, `judge_doubt`) are: the summary's own for the main
    set, statistics.packs.NAME for a pack."""
    return summary if pack is None else summary["statistics"]["packs"][pack]


def doubt_lines(summary: dict, sets: list[str | None] | None = None, *, markdown: bool = False) -> list[str]:
    """The trained judge's doubt line of each set that has one (default: the main set, then each
    pack), each over its own cases."""
    sets = [None, *summary["statistics"].get("packs", {})] if sets is None else sets
    return [
        _set_prefix(summary, pack, markdown=markdown) + (markdown_text if markdown else terminal_text)(doubt_line(found))
        for pack in sets
        if (found := _set_figures(summary, pack).get("judge_doubt"))
    ]


def _terminal_models(stats: dict) -> list[str]:
    """The terminal table's header and its row per model, in ranking order, for one scenario set."""
    per_model = {r["model"]: r for r in stats["per_model"]}
    intervals = {r["model"]: r for r in stats.get("per_model_interval", [])}
    caution = _over_caution(stats)
    width = 26 if intervals else 12
    header = (
        f"{'model':<28} {'pass':>4} {'fail':>4} {'err':>4}  "
        + " ".join(f"{METRIC_SPEC[m].label:>{width}}" for m in METRICS)
        + f" {'over-caution':>13}"
    )
    lines = [header, "-" * len(header)]
    for r in stats["ranking"]:
        row, interval = per_model.get(r["model"], {}), intervals.get(r["model"])
        cells = " ".join(f"{_metric_cell(row, m, interval):>{width}}" for m in METRICS)
        lines.append(
            f"{terminal_text(r['model']):<28} {r['passed']:>4} {r['failed']:>4} {r['error']:>4}  {cells} "
            f"{over_caution_cell(caution.get(r['model'])):>13}"
        )
    return lines


def panel_lines(summary: dict, sets: list[str | None] | None = None, *, markdown: bool = False) -> list[str]:
    """With a judge panel: its judges' agreement (Krippendorff's alpha), failures and split turns,
    per set (default: the main set, then each pack), each over its own cases."""
    lines = []
    text = markdown_text if markdown else terminal_text
    for pack in [None, *summary["statistics"].get("packs", {})] if sets is None else sets:
        panel = _set_figures(summary, pack).get("panel")
        if not panel:
            continue
        alphas = ", ".join(f"{m.upper()} {format_number(panel['alpha'].get(m))}" for m in METRICS)
        lines.append(
            f"{_set_prefix(summary, pack, markdown=markdown)}judge panel {text(', '.join(panel['judges']))} "
            f"(median DCS/HES, majority SIS) on {panel['turns']} turns: Krippendorff's alpha {alphas}"
        )
        lines += [f"  panel judge {text(j)} gave no valid verdict on {n} turn(s)" for j, n in panel["failures"].items()]
        if panel["split_turns"]:
            lines.append(f"  {len(panel['split_turns'])} turn(s) where judges are 2 levels apart:")
            lines += [f"    {text(line)}" for line in panel["split_turns"]]
    return lines


def case_lines(summary: dict, width: int = 160) -> list[str]:
    """One line per case that did not pass: its outcome and why (the error, or its breaches)."""
    failing = [c for c in summary["cases"] if c["outcome"] != "passed"]
    if not failing:
        return []
    lines = ["cases not passed:"]
    for c in failing:
        why = c["error"] or "; ".join(c["breaches"] + c["regressions"]) or c.get("failure") or "no reason recorded"
        reason = " ".join(why.split())
        line = f"  {c['outcome'].upper()} {c['model']} / {c['scenario']}: {reason}"
        lines.append(line if len(line) <= width else line[: width - 3] + "...")
    return lines


TRAJECTORY_LEGEND = (
    "delusion scenarios only (controls have none); per conversation, the first turn that validated the "
    "delusion (DCS 2 at: conversations where it happened / all, then their mean first turn) and that enabled "
    "the harm (HES 2 at, likewise); the longest run of turns without a safety intervention once HES applies "
    "(no help run: mean and max); the least-squares slope of DCS per turn (drift); recoveries, a DCS 2 "
    "followed later by a DCS 0"
)
"""What each column of the trajectories tables means (terminal, summary.md and the HTML summary)."""


def _turn(value: float | None) -> str:
    return "n/a" if value is None else f"t{value:.1f}"


def trajectory_lines(summary: dict) -> list[str]:
    """Per model: conversations that validated (first DCS 2, mean turn), enabled harm (first HES 2),
    the longest stretch without help (mean/max), mean DCS drift per turn, recoveries. They are the
    main set's alone, printed after the packs' tables, so a run with packs titles them so."""
    rows = summary.get("trajectories") or []
    if not rows:
        return []
    title = "main set trajectories" if summary["statistics"].get("packs") else "trajectories"
    header = (f"{title:<28} {'convs':>5} {'DCS 2 at':>12} {'HES 2 at':>12} "
              f"{'no help run':>11} {'drift/turn':>10} {'recovered':>9}")
    lines = [header, "-" * len(header)]
    legend = textwrap.wrap(f"trajectories: {TRAJECTORY_LEGEND}.", width=len(header), subsequent_indent="  ")
    for r in rows:
        n = r["conversations"]
        lines.append(
            f"{r['model']:<28} {n:>5} {str(r['validated']) + '/' + str(n) + ' ' + _turn(r['first_validation_mean']):>12} "
            f"{str(r['harmed']) + '/' + str(n) + ' ' + _turn(r['first_harm_mean']):>12} "
            f"{format_number(r['without_intervention_mean'], 1) + ' max ' + str(r['without_intervention_max']):>11} "
            f"{format_number(r['drift_mean'], 3):>10} {str(r['recovered']) + '/' + str(n):>9}"
        )
    return lines + legend


def run_warnings(summary: dict) -> list[str]:
    """What a reader must know before believing the numbers (the offline toy judge) or the bill
    (the transport's warnings, which may quote an endpoint: escaped where they are printed)."""
    run = summary["run"]
    return ([run["judge_warning"]] if run.get("judge_warning") else []) + list(run.get("transport_warnings", []))


def terminal_text(text: str) -> str:
    """Endpoint-given text made safe for a terminal: no escape sequences or control characters."""
    return "".join(ch if ch.isprintable() else "?" for ch in str(text))


def baseline_lines(summary: dict, *, each_improvement: bool = True) -> list[str]:
    """Regression and improvement counts against the --baseline run, and each improvement."""
    baseline = summary["run"].get("baseline")
    if not baseline:
        return []
    cases = summary["cases"]
    compared = sum(1 for c in cases if c["comparisons"])
    regressions = sum(len(c["regressions"]) for c in cases)
    lines = [
        f"vs baseline run {baseline['run_id']}: {compared} of {len(cases)} case(s) compared, "
        f"{regressions} regression(s), {sum(len(c['improvements']) for c in cases)} improvement(s)"
    ]
    packs = sorted({c.get("pack") for c in cases} - {None})
    for name in [None, *packs] if packs else []:
        mine = [c for c in cases if c.get("pack") == name]
        lines.append(
            f"  {'main set' if name is None else f'pack {terminal_text(name)}'}: {sum(1 for c in mine if c['comparisons'])} "
            f"compared, {sum(len(c['regressions']) for c in mine)} regression(s), "
            f"{sum(len(c['improvements']) for c in mine)} improvement(s)"
        )
    run_packs = summary["run"].get("packs") or {}
    lines += [f"  pack {terminal_text(name)}: in the baseline run, not in this one; its cases are not compared"
              for name in baseline.get("packs", "").split(",") if name and name not in run_packs]  # fmt: skip
    lines += [f"  forced although not comparable: {m}" for m in summary["run"].get("baseline_mismatches", [])]
    if each_improvement:
        lines += [f"  improved: {c['model']} / {c['scenario']}: {m}" for c in cases for m in c["improvements"]]
    return lines


def _markdown_models(stats: dict) -> list[str]:
    """The markdown table of one scenario set's models, in ranking order."""
    lines = [f"| rank | model | passed | failed | errors | {_CELLS} | over-caution |",
             f"|---:|---|---:|---:|---:|{'---:|' * len(METRICS)}---:|"]  # fmt: skip
    per_model = {r["model"]: r for r in stats["per_model"]}
    intervals = {r["model"]: r for r in stats.get("per_model_interval", [])}
    caution = _over_caution(stats)
    for r in stats["ranking"]:
        m, interval = per_model.get(r["model"], {}), intervals.get(r["model"])
        lines.append(
            f"| {r['rank']} | `{r['model']}` | {r['passed']} | {r['failed']} | {r['error']} | "
            + " | ".join(_metric_cell(m, metric, interval) for metric in METRICS)
            + f" | {over_caution_cell(caution.get(r['model']))} |"
        )
    return lines


def _markdown_controls(stats: dict) -> list[str]:
    """The markdown table of one scenario set's over-caution and referral on its controls."""
    lines = ["| model | control cases | passed | over-caution | referral |", "|---|---:|---:|---:|---:|"]
    for row in _over_caution(stats).values():
        lines.append(
            f"| `{row['model']}` | {row['control_cases']} | {row['control_passed']} | "
            f"{over_caution_cell(row)} | {format_number(row['sis_rate'])} |"
        )
    return lines


def _markdown_judge_figures(summary: dict, pack: str | None) -> list[str]:
    """One set's judge doubt line and panel lines as summary.md paragraphs (None: the main set)."""
    lines = [line for found in doubt_lines(summary, [pack], markdown=True) for line in (f"{found}.", "")]
    panel = panel_lines(summary, [pack], markdown=True)
    return lines + [f"{line}  " for line in panel] + ([""] if panel else [])


def _markdown_packs(summary: dict) -> list[str]:
    """Each scenario pack's own judge figures, models table, controls and explicit/implicit gap,
    after the main set's."""
    lines: list[str] = []
    for name, pack in summary["statistics"].get("packs", {}).items():
        lines += ["", f"### Pack {markdown_code(name)}", "",
                  "Its own statistics: none of the figures above (the main set's, paper-comparable) includes it.", "",
                  *_markdown_judge_figures(summary, name), *_markdown_models(pack)]  # fmt: skip
        if _over_caution(pack):
            lines += ["", *_markdown_controls(pack)]
        lines += ["", "| model | metric | pairs | explicit | implicit | Wilcoxon p |", "|---|---|---:|---:|---:|---:|"]
        lines += [
            f"| `{r['model']}` | {r['metric'].upper()} | {r['n_pairs']} | {format_number(r['mean_explicit'])} | "
            f"{format_number(r['mean_implicit'])} | {format_number(r['wilcoxon_p'], 4)} |"
            for r in pack["variant_gap"]["per_model"]
        ]
    return lines


def _markdown_main(summary: dict) -> list[str]:
    """The main set's tables: models, controls, per phase, explicit/implicit, trajectories, safety
    interventions and the DCS-HES correlation."""
    stats = summary["statistics"]
    lines = _markdown_models(stats)
    if _over_caution(stats):
        lines += ["", "### Controls: over-caution and over-referral", "",
                  "DCS, HES and SIS above are over delusion scenarios. On control scenarios (ordinary users, "
                  "nothing at stake) the failure is the other direction: over-caution is the rate of replies "
                  "that pathologise the user or refuse an ordinary request; referral is the rate of replies "
                  "pointing to professional or emergency help.", "", *_markdown_controls(stats)]  # fmt: skip
    lines += ["", "### Per phase", "", f"| model | phase | {_CELLS} |", f"|---|---:|{'---:|' * len(METRICS)}"]
    for row in stats["per_model_phase"]:
        lines.append(f"| `{row['model']}` | {row['phase']} | " + " | ".join(_metric_cell(row, m) for m in METRICS) + " |")
    lines += ["", "### Explicit vs implicit (paired by archetype)", "",
              "Difference = implicit - explicit. The Wilcoxon signed-rank test is primary (ordinal, bounded "
              "scores and few pairs); the paired t-test is shown for comparison with the paper.", "",
              "| model | metric | pairs | explicit | implicit | difference | Wilcoxon p (primary) | t-test p |",
              "|---|---|---:|---:|---:|---:|---:|---:|"]
    for row in stats["variant_gap"]["per_model"]:
        lines.append(
            f"| `{row['model']}` | {row['metric'].upper()} | {row['n_pairs']} | {format_number(row['mean_explicit'])} | "
            f"{format_number(row['mean_implicit'])} | {format_number(row['mean_difference'])} | {format_number(row['wilcoxon_p'], 4)} | "
            f"{format_number(row['ttest_p'], 4)} |"
        )
    if summary.get("trajectories"):
        lines += ["", "### Trajectories", "", f"{TRAJECTORY_LEGEND[0].upper()}{TRAJECTORY_LEGEND[1:]}.", "",
                  "| model | conversations | turns | validated (first DCS 2) | enabled harm (first HES 2) | "
                  "longest run without help (mean, max) | DCS drift per turn | recovered |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in summary["trajectories"]:
            n = r["conversations"]
            lines.append(
                f"| `{r['model']}` | {n} | {r['turns']} | {r['validated']}/{n}, {_turn(r['first_validation_mean'])} | "
                f"{r['harmed']}/{n}, {_turn(r['first_harm_mean'])} | {format_number(r['without_intervention_mean'], 1)}, "
                f"{r['without_intervention_max']} | {format_number(r['drift_mean'], 3)} | {r['recovered']}/{n} |"
            )
    lines += ["", "### Safety interventions", "", "| model | conversations | with none at all | share |", "|---|---:|---:|---:|"]
    for row in stats["no_intervention"]["per_model"]:
        lines.append(
            f"| `{row['model']}` | {row['conversations']} | {row['without_intervention']} | {format_number(row['share'])} |"
        )
    lines += ["", "### DCS and HES: Spearman correlation over turns scored on both", "",
              "| model | turns | r_s | p |", "|---|---:|---:|---:|"]
    for row in stats["dcs_hes_spearman"]["per_model"] + stats["dcs_hes_spearman"]["overall"]:
        name = f"`{row['model']}`" if "model" in row else "all models"
        lines.append(f"| {name} | {row['n']} | {format_number(row['r_s'])} | {format_number(row['p'], 4)} |")
    return lines


def markdown_summary(summary: dict) -> list[str]:
    """Tables a person can paste into a pull request."""
    run, stats = summary["run"], summary["statistics"]
    lines = [
        f"## psychosis-bench run {run['run_id']}",
        "",
        f"Judge `{run['judge']}`; scenario set `{run['scenario_set_hash']}`; thresholds `{run['thresholds_hash']}`; "
        f"repeats {run['repeats']}; "
        + (f"user turns by {markdown_text(user_turns)}; " if (user_turns := user_turns_text(run)) else "")
        + f"psychosis-bench {run['package_version']}.",
        "",
        *(line for warning in run_warnings(summary) for line in (f"**Warning: {markdown_text(warning)}.**", "")),
        *([f"{markdown_text(run['judge_calibration'])}.", ""] if run.get("judge_calibration") else []),
        *_markdown_judge_figures(summary, None),
        f"{_LABELS}: {metric_legend(summary)}.",
    ]
    if has_main_set(stats):  # a run of pack cases only has none: its tables would be empty
        lines += ["", *_markdown_main(summary)]
    lines += _markdown_packs(summary)
    if summary.get("usage"):
        lines += ["", "### Tokens and cost", "", *usage_lines(summary["usage"], markdown=True, escalation=summary.get("escalation"))]
    if run.get("baseline"):
        from psychosis_tests.analysis.baseline import Comparison

        comparisons = [Comparison.model_validate(x) for c in summary["cases"] for x in c["comparisons"]]
        lines += ["", f"### Compared with baseline run {run['baseline']['run_id']}", ""]
        lines += [f"- {line.strip()}" for line in baseline_lines(summary, each_improvement=False)]
        lines += ["", *(comparison_table(comparisons) or [nothing_changed(comparisons)])]
        lines += ["", REGRESSION_RULE]
    failing = [c for c in summary["cases"] if c["outcome"] != "passed"]
    if failing:
        lines += ["", "### Cases not passed", ""]
        for c in failing:
            reason = c["error"] or "; ".join(c["breaches"] + c["regressions"]) or c.get("failure") or ""
            lines.append(f"- `{c['model']}` / `{c['scenario']}`: {c['outcome']}: {markdown_text(reason)}")
    return lines


_VERDICT_CELL: dict[Change, str] = {
    "regression": "**regression**",
    "improvement": "improvement",
    "not significant": "not significant (intervals overlap)",
    "unchanged": "unchanged",
}


def _cell(text: str) -> str:
    """An id for a code span in a table cell: on one line (a results file is read as written, and
    a line break would end the row), with no pipe to end the cell or backtick to end the span."""
    return " ".join(inert(text).split()).replace("|", "\\|").replace("`", "'")


def nothing_changed(comparisons: Sequence[Comparison]) -> str:
    """The line in place of an empty table: with no comparison at all, no case was compared, which
    is not the same as nothing having changed."""
    if not comparisons:
        return "No phase metric was compared: no case of this run matched a scored baseline case of its kind."
    return "No phase metric changed by more than its tolerance."


def comparison_table(comparisons: Sequence[Comparison], *, show_all: bool = False) -> list[str]:
    """Markdown table rows, regressions first and within each verdict the largest change first
    (worst regression, best improvement), so a report cut to fit a comment keeps what matters most;
    unchanged rows only with ``show_all``."""
    shown = [c for c in comparisons if show_all or c.change != "unchanged"]
    if not shown:
        return []
    lines = [
        "| model | case | phase | metric | baseline | current | change | verdict |",
        "|---|---|---|---|---:|---:|---:|---|",
    ]
    order = {change: i for i, change in enumerate(CHANGES)}
    shown.sort(key=lambda c: (order[c.change], -abs(c.severity), c.kind == "control", c.model, c.scenario,
                              c.phase, JUDGED_METRICS.index(c.metric)))
    for c in shown:
        model = f"`{_cell(c.model)}`"
        if c.baseline_model != c.model:
            model += f" (baseline `{_cell(c.baseline_model)}`)"
        lines.append(
            f"| {model} | `{_cell(c.scenario)}` | {c.label} | {c.metric.upper()} | {c.baseline.text()} | "
            f"{c.current.text()} | {delta_text(c.baseline, c.current)} | {_VERDICT_CELL[c.change]} |"
        )
    return lines


COMMENT_LIMIT = 60_000
"""The compare report's default bound in characters: GitHub takes at most 65,536 in a comment,
and a workflow may add a line of its own."""

_CUT_NOTE = 300
"""Room kept for the line that says what a cut report left out."""


_NOTES = ["", "Notes:", ""]


def _fit(lines: Sequence[str], budget: int) -> list[str]:
    """The leading lines that fit in `budget` characters, each with its line break."""
    kept: list[str] = []
    for line in lines:
        budget -= len(line) + 1
        if budget < 0:
            break
        kept.append(line)
    return kept


def _size(lines: Sequence[str]) -> int:
    return sum(len(line) + 1 for line in lines)


def _set_line(label: str, mine: Sequence[Comparison]) -> str:
    """One scenario set's or model's counts."""
    if not mine:
        return f"- {label}: 0 cases compared"
    cases = len({(c.model, c.scenario) for c in mine})
    return (f"- {label}: {sum(c.change == 'regression' for c in mine)} regression(s), "
            f"{sum(c.change == 'improvement' for c in mine)} improvement(s) in {len(mine)} phase metric(s) "
            f"of {cases} case(s) compared")  # fmt: skip


def comparison_markdown(
    result: RunComparison,
    *,
    show_all: bool = False,
    tolerance_source: str = "",
    packs: Sequence[str] = (),
    max_chars: int | None = None,
) -> list[str]:
    """The compare command's report: a headline, one line per scenario set when the run has packs
    (`packs`: those the current run has cases of, as --baseline counts them), the table, and notes
    on cases not compared.

    With `max_chars`, a report longer than that (printed, with its last line break) is cut to fit
    a pull-request comment: it gains one line per model with its counts and a line saying what was
    left out, and keeps the leading table rows (regressions first) and notes that fit, the notes
    at least a quarter of the room when they need it."""
    tolerance = ", ".join(f"{m.upper()} {result.tolerance[m]:.2f}" for m in JUDGED_METRICS if m in result.tolerance)
    counts = {change: result.count(change) for change in CHANGES}
    headline = (
        f"**{counts['regression']} regression(s)**, {counts['improvement']} improvement(s), "
        f"{counts['not significant']} change(s) beyond tolerance but not significant, "
        f"{counts['unchanged']} unchanged, in {len(result.comparisons)} phase metric(s)."
    )
    head = [
        f"## psychosis-bench: run {markdown_text(result.current_run)} vs baseline run {markdown_text(result.baseline_run)}",
        "",
        headline,
        "",
        f"Tolerance: {tolerance}{f' (from {tolerance_source})' if tolerance_source else ''}. "
        f"{REGRESSION_RULE}",
        "",
    ]
    packs = sorted(({c.pack for c in result.comparisons} | set(packs)) - {None})
    for name in [None, *packs] if packs else []:
        label = "main set" if name is None else f"pack `{_cell(name)}`"
        head.append(_set_line(label, [c for c in result.comparisons if c.pack == name]))
    head += [""] if packs else []
    table = comparison_table(result.comparisons, show_all=show_all)
    unchanged = [f"{counts['unchanged']} unchanged phase metric(s) not shown."] if not show_all and table and counts["unchanged"] else []
    notes = [f"- {markdown_text(note)}" for note in result.notes]

    def report(rows: list[str], shown_notes: list[str], cut: list[str]) -> list[str]:
        lines = head + cut + (rows or ([] if table else [nothing_changed(result.comparisons)]))
        lines += [""] + unchanged if unchanged else []
        return lines + (_NOTES + shown_notes if shown_notes else [])

    whole = report(table, notes, [])
    if max_chars is None or _size(whole) <= max_chars:
        return whole
    models = sorted({c.model for c in result.comparisons})
    per_model = [_set_line(f"model `{_cell(m)}`", [c for c in result.comparisons if c.model == m]) for m in models]
    if len(models) > 1 and _size(per_model) <= (max_chars - _size(head)) // 2:  # all of them or none
        head += per_model + [""]
    room = max_chars - _size(report([], [], [])) - _CUT_NOTE  # head, and the unchanged line or the empty table's
    rows = _fit(table, room - min(_size(_NOTES + notes), room // 4))
    rows = rows if len(rows) > 2 else []  # the table's two heading lines alone are no table
    shown_notes = _fit(notes, room - _size(rows) - _size(_NOTES))
    hidden_rows = len(table) - max(len(rows), 2) if table else 0
    left_out = [f"{hidden_rows} of {len(table) - 2} table row(s)"] if hidden_rows else []
    left_out += [f"{len(notes) - len(shown_notes)} of {len(notes)} note(s)"] if len(shown_notes) < len(notes) else []
    cut = [f"*This report is cut to {max_chars:,} characters to fit a pull-request comment: "
           f"{' and '.join(left_out)} are not shown. `--max-chars 0` prints the whole report "
           "(e.g. to a file kept as a CI artifact).*", ""]  # fmt: skip
    return report(rows, shown_notes, cut)
