"""The files a run leaves behind, written by the controller when the session ends.

    reports/<run>/results.json   self-describing per-case, per-turn results (what --baseline reads)
    reports/<run>/summary.json   run metadata + benchmark statistics
    reports/<run>/summary.csv    one row per case
    reports/<run>/summary.md     tables to paste into a pull request
    reports/<run>/cases/*.json   transcripts and verdicts (written as each case finishes)
"""

from __future__ import annotations

import csv
import html
import datetime as dt
import json
import platform
from pathlib import Path
from typing import TYPE_CHECKING

from psychosis_tests import __version__

if TYPE_CHECKING:
    from psychosis_tests.session import BenchmarkSession

RESULTS_FORMAT = "psychosis-bench-results/1"


def _case_rows(bench: BenchmarkSession) -> list[dict]:
    rows = []
    for record in sorted(bench.records.values(), key=lambda r: r.nodeid):
        payload = record.payload
        if "model" not in payload:
            continue  # not a benchmark case
        scenario = bench.plan.scenarios[payload["scenario"]]
        transcript = f"cases/{payload.get('file', '')}.json"
        rows.append(
            {
                "nodeid": record.nodeid,
                "model": payload["model"],
                "scenario": payload["scenario"],
                "archetype": scenario.archetype,
                "variant": scenario.variant,
                "outcome": record.status,
                "error": payload.get("error"),
                "breaches": payload.get("breaches", []),
                "regressions": payload.get("regressions", []),
                "improvements": payload.get("improvements", []),
                "comparisons": payload.get("comparisons", []),
                "model_versions": payload.get("model_versions", []),
                "judge": bench.plan.judge.id,
                "judge_versions": payload.get("judge_versions", []),
                "scenario_hash": scenario.content_hash(),
                "repeats": bench.plan.settings.repeats,
                "transcript": transcript,
                "phases": payload.get("phases", []),
                # The transcript file holds the case's conversations in repeat order, turns in order.
                "turns": [
                    {**t, "rationale": f"{transcript}#/transcripts/{t['repeat']}/turns/{t['turn'] - 1}/verdict/rationale"}
                    for t in payload.get("turns", [])
                ],
            }
        )
    return rows


def preload_statistics() -> None:
    """Import what write_run_results needs (pandas, scipy), ahead of time."""
    import scipy.stats  # noqa: F401

    import psychosis_tests.stats  # noqa: F401


def run_metadata(bench: BenchmarkSession) -> dict:
    return {
        "run_id": bench.run_dir.name,
        "package_version": __version__,
        "python": platform.python_version(),
        "started_at": bench.started_at.isoformat(timespec="seconds"),
        "finished_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        **bench.plan.metadata(),
    }


def write_run_results(bench: BenchmarkSession) -> dict:
    """Write every file of the run; returns the summary (also used for the terminal table)."""
    import pandas as pd

    from psychosis_tests.stats import summarise

    cases = _case_rows(bench)
    meta = run_metadata(bench)
    run_dir = bench.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    _write_json(run_dir / "results.json", {"format": RESULTS_FORMAT, "run": meta, "cases": cases})

    turn_table = pd.DataFrame(
        [row for case in cases for row in case["turns"]],
        columns=["model", "scenario", "archetype", "variant", "repeat", "turn", "phase", "phase_name", "dcs", "hes", "sis"],
    )
    case_table = pd.DataFrame(
        [{k: c[k] for k in ("model", "scenario", "archetype", "variant", "outcome")} for c in cases],
        columns=["model", "scenario", "archetype", "variant", "outcome"],
    )
    summary = {
        "run": meta,
        "statistics": summarise(turn_table, case_table),
        "cases": [{k: v for k, v in c.items() if k != "turns"} for c in cases],
    }
    _write_json(run_dir / "summary.json", summary)
    _write_csv(run_dir / "summary.csv", cases)
    (run_dir / "summary.md").write_text("\n".join(markdown_summary(summary)) + "\n", encoding="utf-8")
    return summary


def _write_json(path: Path, data: object) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False), encoding="utf-8")
    tmp.replace(path)


def _write_csv(path: Path, cases: list[dict]) -> None:
    phase_columns = sorted({f"{p['metric']}_phase{p['phase']}" for c in cases for p in c["phases"]})
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["model", "scenario", "archetype", "variant", "outcome", *phase_columns, "problems"])
        for c in cases:
            values = {f"{p['metric']}_phase{p['phase']}": f"{p['mean']:.3f}" for p in c["phases"]}
            problems = "; ".join(filter(None, [c["error"], *c["breaches"], *c["regressions"]]))
            writer.writerow(
                [c["model"], c["scenario"], c["archetype"], c["variant"], c["outcome"],
                 *(values.get(col, "") for col in phase_columns), problems]
            )


def markdown_text(text: str) -> str:
    """Untrusted text (error messages can quote endpoints) made inert in markdown: no HTML, one line."""
    return html.escape(" ".join(text.split())).replace("|", "&#124;")


def format_number(value: object, digits: int = 2) -> str:
    """A table cell: n/a for a missing value, fixed digits for a float."""
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _metric_cell(row: dict, metric: str) -> str:
    mean, sd = row.get(f"{metric}_mean"), row.get(f"{metric}_sd")
    if mean is None:
        return "n/a"
    return f"{mean:.2f} ± {format_number(sd)}"


def terminal_table(summary: dict) -> list[str]:
    """Per model: cases passed/failed/errored and mean ± SD of each metric."""
    stats = summary["statistics"]
    ranking = {r["model"]: r for r in stats["ranking"]}
    header = f"{'model':<28} {'pass':>4} {'fail':>4} {'err':>4}  {'DCS':>12} {'HES':>12} {'SIS':>12}"
    lines = [header, "-" * len(header)]
    for row in stats["per_model"]:
        r = ranking.get(row["model"], {})
        lines.append(
            f"{row['model']:<28} {r.get('passed', 0):>4} {r.get('failed', 0):>4} {r.get('error', 0):>4}  "
            f"{_metric_cell(row, 'dcs'):>12} {_metric_cell(row, 'hes'):>12} {_metric_cell(row, 'sis'):>12}"
        )
    if summary["run"].get("judge_warning"):
        lines.append(f"WARNING: {summary['run']['judge_warning']}.")
    return lines + baseline_lines(summary)


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
    lines += [f"  forced although not comparable: {m}" for m in summary["run"].get("baseline_mismatches", [])]
    if each_improvement:
        lines += [f"  improved: {c['model']} / {c['scenario']}: {m}" for c in cases for m in c["improvements"]]
    return lines


def markdown_summary(summary: dict) -> list[str]:
    """Tables a person can paste into a pull request."""
    run, stats = summary["run"], summary["statistics"]
    lines = [
        f"## psychosis-bench run {run['run_id']}",
        "",
        f"Judge `{run['judge']}`; scenario set `{run['scenario_set_hash']}`; thresholds `{run['thresholds_hash']}`; "
        f"repeats {run['repeats']}; psychosis-bench {run['package_version']}.",
        "",
        *([f"**Warning: {run['judge_warning']}.**", ""] if run.get("judge_warning") else []),
        "| rank | model | passed | failed | errors | DCS | HES | SIS |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    per_model = {r["model"]: r for r in stats["per_model"]}
    for r in stats["ranking"]:
        m = per_model.get(r["model"], {})
        lines.append(
            f"| {r['rank']} | `{r['model']}` | {r['passed']} | {r['failed']} | {r['error']} | "
            f"{_metric_cell(m, 'dcs')} | {_metric_cell(m, 'hes')} | {_metric_cell(m, 'sis')} |"
        )
    lines += ["", "### Per phase", "", "| model | phase | DCS | HES | SIS |", "|---|---:|---:|---:|---:|"]
    for row in stats["per_model_phase"]:
        lines.append(
            f"| `{row['model']}` | {row['phase']} | {_metric_cell(row, 'dcs')} | "
            f"{_metric_cell(row, 'hes')} | {_metric_cell(row, 'sis')} |"
        )
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
    if run.get("baseline"):
        from psychosis_tests.baseline import Comparison, comparison_table

        comparisons = [Comparison.model_validate(x) for c in summary["cases"] for x in c["comparisons"]]
        lines += ["", f"### Compared with baseline run {run['baseline']['run_id']}", ""]
        lines += [f"- {line.strip()}" for line in baseline_lines(summary, each_improvement=False)]
        lines += ["", *(comparison_table(comparisons) or ["No phase metric changed by more than its tolerance."])]
    failing = [c for c in summary["cases"] if c["outcome"] != "passed"]
    if failing:
        lines += ["", "### Cases not passed", ""]
        for c in failing:
            reason = c["error"] or "; ".join(c["breaches"] + c["regressions"])
            lines.append(f"- `{c['model']}` / `{c['scenario']}`: {c['outcome']}: {markdown_text(reason)}")
    return lines
