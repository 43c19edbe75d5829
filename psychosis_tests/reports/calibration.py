"""The files of a calibration run and its text tables.

    reports/<run-id>-calibration/calibration.json   the result (records.calibration_result schema)
    reports/<run-id>-calibration/calibration.md     the tables, for people and pull requests
    reports/<run-id>-calibration/answers.jsonl      every item's gold labels and the judge's answers

Rows are per metric and kind of scenario: DCS, HES and SIS on the delusion items, SIS (controls)
and OCC on the control items. After a FAIL, both the terminal output and calibration.md end with
what to do next (`next_steps`). Judge rationales, replies and error messages are untrusted text:
markdown_text makes them inert; ids and paths sit in code spans (`tables.markdown_code`), where markdown shows text
as it is.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from psychosis_tests.engine.calibration_run import ItemJudgement
from psychosis_tests.records.calibration_result import (
    CALIBRATION_FILE,
    CalibrationResult,
    Disagreement,
    MetricAgreement,
    RaterAgreement,
    row_title,
)
from psychosis_tests.reports.tables import format_number, markdown_code, markdown_text

MARKDOWN_FILE = "calibration.md"
ANSWERS_FILE = "answers.jsonl"
VALIDITY_DOC = "docs/judge-validity.md"


def _kappa(row: MetricAgreement) -> str:
    return format_number(row.kappa)


def _interval(row: MetricAgreement) -> str:
    if row.kappa_low is None or row.kappa_high is None:
        return "n/a"
    return f"{row.kappa_low:.2f} to {row.kappa_high:.2f}"


def _left_out(row: MetricAgreement) -> str | None:
    """The resamples left out of a row's interval, kappa being undefined on them; None if none was
    (or there is no interval: kappa is undefined on every resample)."""
    if not row.kappa_undefined or row.kappa_low is None:
        return None
    return (f"{row.title}: {row.kappa_undefined} of {row.kappa_resamples} bootstrap resamples left out of the kappa "
            "interval (kappa is undefined on them: their gold labels are all one level)")  # fmt: skip


def one_level_reason(row: MetricAgreement) -> str | None:
    """Why a row with items has no kappa: its gold labels are all one level; None otherwise."""
    if row.kappa is not None or not row.n:
        return None
    gold = next((level for level, counts in zip(row.levels, row.confusion, strict=True) if any(counts)), None)
    gate = " (the gate fails)" if row.minimum is not None else ""
    return (f"{row.title}: the gold labels of its {row.n} item(s) are all {gold if gold is not None else 'one level'}, "
            f"so kappa is undefined: these items cannot show whether the judge tells the levels apart{gate}")  # fmt: skip


def _gate(row: MetricAgreement) -> str:
    if row.passed is None:
        return "not gated"
    return "pass" if row.passed else "FAIL"


def _unmeasured(result: CalibrationResult) -> list[MetricAgreement]:
    """Gated rows without a single judged item (a set without control items has no OCC)."""
    return [m for m in result.metrics if m.n == 0]


def next_steps(result: CalibrationResult, *, markdown: bool = False) -> list[str]:
    """What to do after a FAIL, a heading line then one line per step (empty when the judge
    passed): the last thing the terminal prints and the last section of calibration.md."""
    if result.passed:
        return []

    def code(text: str) -> str:
        return f"`{text}`" if markdown else text

    below = [m.title for m in result.metrics if not m.passed and m.kappa is not None]
    unmeasured = [m.title for m in result.metrics if not m.passed and m.kappa is None]  # no items, or no kappa on them
    reasons = [f"{', '.join(titles)} {reason}" for titles, reason in ((below, "below the minimum"), (unmeasured, "not measured")) if titles]
    why = f" ({'; '.join(reasons)})" if reasons else ""
    lines = [
        "What to do next:",
        f"- Do not gate releases on this judge: it failed the calibration gate{why}. A benchmark run judged by it "
        f"on this calibration set says so in its header and summary, and {code('--require-calibrated-judge')} refuses it.",
        f"- Try a stronger judge model: add it to the models file, then {code('calibrate --judge ID')}.",
        f"- Try a panel of judges that vote: {code('calibrate --judge A --judge B --judge C')}.",
        f"- Try per-metric mode ({code('judge_mode: per-metric')} on the judge's models-file entry: one metric per call).",
        f"- See what it confuses: the confusion matrices and worst disagreements {'above' if markdown else 'in calibration.md'}.",
    ]
    if result.errors:
        lines.append("- Some items could not be judged: fix what their errors name (endpoint, key, verdict format) and rerun.")
    for kind, shipped in (("delusion", "calibration/<archetype>.yaml"), ("control", "calibration/*-controls.yaml")):
        missing = [m.title for m in _unmeasured(result) if m.kind == kind]
        if not missing:
            continue
        if result.item_files:  # --items reads item files only, not the calibration set's
            where = f"Add labelled items on {kind} scenarios (the judge_corpus/ format) with another {code('--items FILE')}"
        else:
            where = f"{'Delusion' if kind == 'delusion' else 'Control'} items ship in {code(shipped)}: copy them next to your own labels"
        lines.append(f"- {', '.join(missing)}: no items in this set. {where}.")
    lines.append(f"- The method, the options and the reference judges' figures: {code(VALIDITY_DOC)}.")
    return lines


def terminal_lines(result: CalibrationResult) -> list[str]:
    """The per-row table and the gate's verdict, for the terminal (next_steps comes after the run folder)."""
    header = f"{'metric':<15} {'n':>4} {'kappa':>6} {'95% interval':>14} {'min':>5} {'exact':>6} {'alpha':>6}  gate"
    controls = f", {result.control_items} on control scenarios" if result.control_items else ""
    lines = [
        f"judge {result.judge} on {result.judged_items} of {result.items} items{controls} ({result.calibration_path})",
        header,
        "-" * len(header),
    ]
    for row in [*result.metrics, *result.ungated]:
        lines.append(
            f"{row.title:<15} {row.n:>4} {_kappa(row):>6} {_interval(row):>14} {format_number(row.minimum):>5} "
            f"{row.exact_agreement:>6.2f} {format_number(row.alpha):>6}  {_gate(row)}"
        )
    lines += [line for row in [*result.metrics, *result.ungated] if (line := _left_out(row) or one_level_reason(row))]
    for r in result.inter_rater:
        lines.append(
            f"raters among themselves, {row_title(r.metric, r.kind)}: alpha {format_number(r.alpha)}, kappa {format_number(r.kappa)} "
            f"({r.disagreeing_items} of {r.items} items disagree)"
        )
    for m in _unmeasured(result):
        lines.append(f"{m.title}: no judged item in this set, so the judge is not measured on it (the gate fails)")
    if result.errors:
        lines.append(f"{len(result.errors)} item(s) could not be judged (the gate fails): {result.errors[0]}")
    for judge, count in result.judge_failures.items():
        lines.append(f"panel judge {judge} failed on {_failed_answers(count, result.repeats)}; the panel scored them without it")
    if result.escalation is not None:
        lines.append(escalation_line(result))
    if result.reliability:
        lines.append(reliability_line(result))
    lines.append(("PASSED" if result.passed else "FAILED") + f" the calibration gate ({result.gate_file or 'thresholds.yaml'} calibration.min_kappa)")
    return lines


def _failed_answers(count: int, repeats: int) -> str:
    """How many answers a panel judge failed on: items, or with repeats items' answers."""
    return f"{count} item(s)" if repeats == 1 else f"{count} answer(s) (items times {repeats} repeats)"


def escalation_line(result: CalibrationResult) -> str:
    """A cascade's escalation rate and why its items were escalated."""
    found = result.escalation
    assert found is not None
    why = ", ".join(f"{m.upper()} {n}" for m, n in found.below_threshold.items())
    return (f"cascade: escalated {found.escalated} of {found.judged} items ({found.rate:.1%}) to {found.to}"
            + (f"; below the threshold: {why}" if why else ""))


def reliability_line(result: CalibrationResult) -> str:
    """How far the judge's probabilities can be read as they are, one row after another."""
    rows = "; ".join(f"{r.title} mean p {r.mean_probability:.2f}, right {r.share_right:.2f}, error {r.calibration_error:.3f}"
                     for r in result.reliability)  # fmt: skip
    return f"probabilities against how often the scores were right (calibration error, 0 is perfectly reliable): {rows}"


def _rater_rows(title: str, rows: Sequence[RaterAgreement], what: str) -> list[str]:
    if not rows:
        return []
    lines = ["", f"### {title}", "", f"| metric | {what} | items | disagreeing items | Krippendorff's alpha | Cohen's kappa (two per item) |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {row_title(r.metric, r.kind)} | {r.raters} | {r.items} | {r.disagreeing_items} | {format_number(r.alpha)} | "
            f"{format_number(r.kappa)} |"
        )
    return lines


def _per_rater_rows(result: CalibrationResult) -> list[str]:
    if not result.per_rater:
        return []
    lines = ["", "### The judge against each rater", "", "| rater | metric | items | kappa | exact agreement |", "|---|---|---:|---:|---:|"]
    for r in result.per_rater:
        lines.append(
            f"| {markdown_text(r.rater)} | {row_title(r.metric, r.kind)} | {r.n} | {format_number(r.kappa)} | {r.exact_agreement:.2f} |"
        )
    return lines


def _worst_lines(title: str, worst: Sequence[Disagreement]) -> list[str]:
    lines = ["", f"### {title}", ""]
    for d in worst:
        gold = ", ".join(f"{m.upper()} {v}" for m, v in d.gold.items())
        judged = ", ".join(f"{m.upper()} {v}" for m, v in d.judged.items())
        lines += [
            f"- {markdown_code(d.item_id)} (turn {d.turn}): gold {gold}; judge {judged}",
            f"  - reply: {markdown_text(d.reply[:300])}",
            f"  - gold reason: {markdown_text(d.reason)}",
            f"  - judge rationale: {markdown_text(d.rationale[:400])}",
        ]
    return lines


def markdown_lines(result: CalibrationResult) -> list[str]:
    rows = [*result.metrics, *result.ungated]
    lines = [
        f"## Judge calibration {result.run_id}: {'passed' if result.passed else 'FAILED'}",
        "",
        f"Judge {markdown_code(result.judge)} (fingerprint `{result.fingerprint.hash}`, mode "
        f"{', '.join(sorted({j.judge_mode for j in result.fingerprint.judges}))}); calibration set "
        f"{markdown_code(result.calibration_path)}: {result.judged_items} of {result.items} items judged "
        f"({result.control_items} on control scenarios); repeats {result.repeats}.",
        "",
        "Cohen's kappa is quadratic-weighted for DCS and HES and unweighted for SIS and OCC; the interval is a 95% "
        "percentile bootstrap over items (over the resamples on which kappa is defined); alpha is Krippendorff's (ordinal DCS/HES, nominal SIS/OCC) of judge and gold. "
        "DCS, HES and SIS are measured on the items of delusion scenarios; OCC (over-caution) and SIS (controls) "
        "on the items of control scenarios, which the judge scores as in a benchmark run on a control. "
        "Both SIS rows are held to the SIS minimum.",
        "",
        "| metric | items | kappa | 95% interval | minimum | gate | exact agreement | alpha |",
        "|---|---:|---:|---|---:|---|---:|---:|",
    ]
    for row in rows:
        gate = {"pass": "pass", "FAIL": "**FAIL**"}.get(_gate(row), _gate(row))
        lines.append(
            f"| {row.title} | {row.n} | {_kappa(row)} | {_interval(row)} | {format_number(row.minimum)} | "
            f"{gate} | {row.exact_agreement:.2f} | {format_number(row.alpha)} |"
        )
    left_out = [line for row in rows if (line := _left_out(row) or one_level_reason(row))]
    if left_out:
        lines += ["", *(f"- {line}." for line in left_out)]
    missing = _unmeasured(result)
    if missing:
        lines += ["", f"**No judged item for {', '.join(m.title for m in missing)}: the judge is not measured there and the gate fails.**"]
    if result.errors:
        lines += ["", f"**{len(result.errors)} item(s) could not be judged; the gate fails:**", ""]
        lines += [f"- {markdown_text(e)}" for e in result.errors]
    if result.escalation is not None:
        lines += ["", markdown_text(escalation_line(result)) + "."]
    if result.reliability:
        lines += ["", "The judge's probabilities against how often its scores were right: the mean probability of the level "
                  "it chose, the share of those levels equal to gold, and the calibration error (their gap within ten "
                  "bins of probability, weighted by the bins' sizes; 0 is perfectly reliable). A cascade's thresholds "
                  "read these probabilities.", "",
                  "| metric | items | mean probability | share right | calibration error |", "|---|---:|---:|---:|---:|"]
        lines += [f"| {r.title} | {r.n} | {r.mean_probability:.3f} | {r.share_right:.3f} | {r.calibration_error:.3f} |"
                  for r in result.reliability]
    if result.judge_failures:
        lines += ["", "Panel judges that failed on some items (the panel scored those items without them):", ""]
        lines += [f"- {markdown_code(j)}: {_failed_answers(n, result.repeats)}" for j, n in result.judge_failures.items()]
    lines += ["", "### Confusion matrices (rows: gold, columns: judge)", ""]
    for row in rows:
        lines += [f"{row.title}:", "", "| gold \\ judge | " + " | ".join(map(str, row.levels)) + " |",
                  "|---|" + "---:|" * len(row.levels)]
        lines += [f"| {level} | " + " | ".join(map(str, counts)) + " |" for level, counts in zip(row.levels, row.confusion, strict=True)]
        lines.append("")
    titles = [row.title for row in rows]
    lines += ["### Breakdown", "", "kappa (exact agreement, items) per group.", "",
              "| by | group | " + " | ".join(titles) + " |", "|---|---|" + "---|" * len(titles)]
    groups: dict[tuple[str, str], dict[str, MetricAgreement]] = {}
    for g in result.breakdown:
        groups.setdefault((g.by, g.group), {})[g.agreement.title] = g.agreement
    for (by, group), cells in groups.items():
        shown = [
            f"{_kappa(cells[t])} ({cells[t].exact_agreement:.2f}, {cells[t].n})" if t in cells else "n/a"
            for t in titles
        ]
        lines.append(f"| {by} | {markdown_text(group)} | " + " | ".join(shown) + " |")
    lines += _worst_lines(f"The {len(result.worst)} worst disagreements", result.worst)
    if result.control_items:
        lines += _worst_lines(f"The {len(result.worst_controls)} worst disagreements on control items", result.worst_controls)
    lines += _rater_rows("Human raters among themselves", result.inter_rater, "raters")
    lines += _per_rater_rows(result)
    lines += _rater_rows("The judge against itself (--judge-repeats)", result.self_consistency, "repeats")
    lines += _rater_rows("The panel's judges among themselves", result.panel_agreement, "judges")
    steps = next_steps(result, markdown=True)
    if steps:
        lines += ["", "### " + steps[0].rstrip(":"), "", *steps[1:]]
    return lines


def write_calibration_files(run_dir: Path, result: CalibrationResult, judgements: Sequence[ItemJudgement]) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    answers = []
    for j in judgements:
        answers.append(
            {
                "item": j.item.id,
                "scenario": j.item.scenario.id,
                "kind": j.item.kind,
                "turn": j.item.turn,
                "asked": list(j.item.asked),
                "gold": {m: j.item.gold(m) for m in j.item.metrics},
                "error": j.error,
                "answers": [
                    {
                        "repeat": r,
                        "scores": j.asked_scores(r),
                        "rationale": a.verdict.rationale,
                        "votes": [v.model_dump(mode="json") for v in a.votes],
                        # a cascade's: who decided, and why it escalated
                        **{k: getattr(a.verdict, k) for k in ("decided_by", "escalated") if a.verdict.decided_by},
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
