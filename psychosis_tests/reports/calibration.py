"""The files of a calibration run and its text tables.

    reports/<run-id>-calibration/calibration.json   the result (inputs.calibration_result schema)
    reports/<run-id>-calibration/calibration.md     the tables, for people and pull requests
    reports/<run-id>-calibration/answers.jsonl      every item's gold labels and the judge's answers

Judge rationales, replies and error messages are untrusted text: markdown_text makes them inert.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from psychosis_tests.engine.calibration_run import ItemJudgement
from psychosis_tests.inputs.calibration_result import CALIBRATION_FILE, CalibrationResult, MetricAgreement, RaterAgreement
from psychosis_tests.reports.tables import format_number, markdown_text

MARKDOWN_FILE = "calibration.md"
ANSWERS_FILE = "answers.jsonl"


def _kappa(row: MetricAgreement) -> str:
    return format_number(row.kappa)


def _interval(row: MetricAgreement) -> str:
    if row.kappa_low is None or row.kappa_high is None:
        return "n/a"
    return f"{row.kappa_low:.2f} to {row.kappa_high:.2f}"


def terminal_lines(result: CalibrationResult) -> list[str]:
    """The per-metric table and the gate's verdict, for the terminal."""
    header = f"{'metric':<6} {'n':>4} {'kappa':>6} {'95% interval':>14} {'min':>5} {'exact':>6} {'alpha':>6}  gate"
    lines = [f"judge {result.judge} on {result.judged_items} of {result.items} items ({result.calibration_path})", header, "-" * len(header)]
    for row in result.metrics:
        lines.append(
            f"{row.metric.upper():<6} {row.n:>4} {_kappa(row):>6} {_interval(row):>14} {format_number(row.minimum):>5} "
            f"{row.exact_agreement:>6.2f} {format_number(row.alpha):>6}  {'pass' if row.passed else 'FAIL'}"
        )
    for r in result.inter_rater:
        lines.append(
            f"raters among themselves, {r.metric.upper()}: alpha {format_number(r.alpha)}, kappa {format_number(r.kappa)} "
            f"({r.disagreeing_items} of {r.items} items disagree)"
        )
    if result.errors:
        lines.append(f"{len(result.errors)} item(s) could not be judged (the gate fails): {result.errors[0]}")
    for judge, count in result.judge_failures.items():
        lines.append(f"panel judge {judge} failed on {count} item(s); the panel scored them without it")
    lines.append(("PASSED" if result.passed else "FAILED") + " the calibration gate (thresholds.yaml calibration.min_kappa)")
    return lines


def _rater_rows(title: str, rows: Sequence[RaterAgreement], what: str) -> list[str]:
    if not rows:
        return []
    lines = ["", f"### {title}", "", f"| metric | {what} | items | disagreeing items | Krippendorff's alpha | Cohen's kappa (two per item) |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r.metric.upper()} | {r.raters} | {r.items} | {r.disagreeing_items} | {format_number(r.alpha)} | {format_number(r.kappa)} |"
        )
    return lines


def _per_rater_rows(result: CalibrationResult) -> list[str]:
    if not result.per_rater:
        return []
    lines = ["", "### The judge against each rater", "", "| rater | metric | items | kappa | exact agreement |", "|---|---|---:|---:|---:|"]
    for r in result.per_rater:
        lines.append(f"| {markdown_text(r.rater)} | {r.metric.upper()} | {r.n} | {format_number(r.kappa)} | {r.exact_agreement:.2f} |")
    return lines


def markdown_lines(result: CalibrationResult) -> list[str]:
    lines = [
        f"## Judge calibration {result.run_id}: {'passed' if result.passed else 'FAILED'}",
        "",
        f"Judge `{markdown_text(result.judge)}` (fingerprint `{result.fingerprint.hash}`, mode "
        f"{', '.join(sorted({j.judge_mode for j in result.fingerprint.judges}))}); calibration set "
        f"`{markdown_text(result.calibration_path)}`: {result.judged_items} of {result.items} items judged; "
        f"repeats {result.repeats}.",
        "",
        "Cohen's kappa is quadratic-weighted for DCS and HES and unweighted for SIS; the interval is a 95% "
        "percentile bootstrap over items; alpha is Krippendorff's (ordinal DCS/HES, nominal SIS) of judge and gold.",
        "",
        "| metric | items | kappa | 95% interval | minimum | gate | exact agreement | alpha |",
        "|---|---:|---:|---|---:|---|---:|---:|",
    ]
    for row in result.metrics:
        lines.append(
            f"| {row.metric.upper()} | {row.n} | {_kappa(row)} | {_interval(row)} | {format_number(row.minimum)} | "
            f"{'pass' if row.passed else '**FAIL**'} | {row.exact_agreement:.2f} | {format_number(row.alpha)} |"
        )
    if result.errors:
        lines += ["", f"**{len(result.errors)} item(s) could not be judged; the gate fails:**", ""]
        lines += [f"- {markdown_text(e)}" for e in result.errors]
    if result.judge_failures:
        lines += ["", "Panel judges that failed on some items (the panel scored those items without them):", ""]
        lines += [f"- `{markdown_text(j)}`: {n} item(s)" for j, n in result.judge_failures.items()]
    lines += ["", "### Confusion matrices (rows: gold, columns: judge)", ""]
    for row in result.metrics:
        lines += [f"{row.metric.upper()}:", "", "| gold \\ judge | " + " | ".join(map(str, row.levels)) + " |",
                  "|---|" + "---:|" * len(row.levels)]
        lines += [f"| {level} | " + " | ".join(map(str, counts)) + " |" for level, counts in zip(row.levels, row.confusion, strict=True)]
        lines.append("")
    lines += ["### Breakdown", "", "kappa (exact agreement, items) per group.", "",
              "| by | group | DCS | HES | SIS |", "|---|---|---|---|---|"]
    groups: dict[tuple[str, str], dict[str, MetricAgreement]] = {}
    for g in result.breakdown:
        groups.setdefault((g.by, g.group), {})[g.agreement.metric] = g.agreement
    for (by, group), cells in groups.items():
        shown = [
            f"{_kappa(cells[m])} ({cells[m].exact_agreement:.2f}, {cells[m].n})" if m in cells else "n/a"
            for m in ("dcs", "hes", "sis")
        ]
        lines.append(f"| {by} | {markdown_text(group)} | " + " | ".join(shown) + " |")
    lines += ["", f"### The {len(result.worst)} worst disagreements", ""]
    for d in result.worst:
        gold = ", ".join(f"{m.upper()} {v}" for m, v in d.gold.items())
        judged = ", ".join(f"{m.upper()} {v}" for m, v in d.judged.items())
        lines += [
            f"- `{d.item_id}` (turn {d.turn}): gold {gold}; judge {judged}",
            f"  - reply: {markdown_text(d.reply[:300])}",
            f"  - gold reason: {markdown_text(d.reason)}",
            f"  - judge rationale: {markdown_text(d.rationale[:400])}",
        ]
    lines += _rater_rows("Human raters among themselves", result.inter_rater, "raters")
    lines += _per_rater_rows(result)
    lines += _rater_rows("The judge against itself (--judge-repeats)", result.self_consistency, "repeats")
    lines += _rater_rows("The panel's judges among themselves", result.panel_agreement, "judges")
    return lines


def write_calibration_files(run_dir: Path, result: CalibrationResult, judgements: Sequence[ItemJudgement]) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    answers = []
    for j in judgements:
        answers.append(
            {
                "item": j.item.id,
                "scenario": j.item.scenario.id,
                "turn": j.item.turn,
                "gold": {m: j.item.gold(m) for m in j.item.metrics},
                "error": j.error,
                "answers": [
                    {
                        "repeat": r,
                        "scores": j.scores(r),
                        "rationale": a.verdict.rationale,
                        "votes": [v.model_dump(mode="json") for v in a.votes],
                    }
                    for r, a in enumerate(j.answers)
                ],
            }
        )
    (run_dir / ANSWERS_FILE).write_text(
        "".join(json.dumps(a, ensure_ascii=False) + "\n" for a in answers), encoding="utf-8"
    )
    (run_dir / MARKDOWN_FILE).write_text("\n".join(markdown_lines(result)) + "\n", encoding="utf-8")
    tmp = run_dir / (CALIBRATION_FILE + ".tmp")
    tmp.write_text(result.model_dump_json(indent=2), encoding="utf-8")
    tmp.replace(run_dir / CALIBRATION_FILE)
