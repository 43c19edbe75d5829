"""The files a run leaves behind, written when it ends (by the pytest controller, a script's
`sessions.benchmark.run_without_pytest`, or `merge`), each case's row from its typed record.

    reports/<run>/results.json   self-describing per-case, per-turn results (what --baseline reads)
    reports/<run>/summary.json   run metadata + benchmark statistics
    reports/<run>/summary.csv    one row per case
    reports/<run>/summary.md     tables to paste into a pull request
    reports/<run>/cases/*.json   transcripts and verdicts (written by the engine as each case finishes)
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from psychosis_tests import __version__
from psychosis_tests.analysis.outcome import CaseOutcome
from psychosis_tests.analysis.panel import run_panel_summary
from psychosis_tests.analysis.trajectories import per_model as trajectories_per_model
from psychosis_tests.common.csv_cells import csv_cell
from psychosis_tests.engine.plan import CaseKey, Plan
from psychosis_tests.records.calibration_result import CalibrationResult, calibration_line
from psychosis_tests.inputs.method import JUDGED_METRICS
from psychosis_tests.records.results_file import WRITING, ResultCase, results_document
from psychosis_tests.inputs.scenarios import Scenario
from psychosis_tests.inputs.shards import selection_hash
from psychosis_tests.inputs.usage import ROLES, total
from psychosis_tests.reports.escalation import escalation_summary
from psychosis_tests.reports.judge_doubt import doubt_summary, embedded_targets
from psychosis_tests.reports.tables import markdown_summary
from psychosis_tests.reports.usage import usage_rows

STATUS_RANK = {"passed": 0, "skipped": 0, "failed": 1, "error": 2}
SNAPSHOT_DIFFERS, SNAPSHOT_MISSING, SNAPSHOT_UNCHECKED = (
    "per-phase profile differs from its snapshot ", "no profile snapshot at ", "profile snapshot ")
"""How the messages of a failed profile snapshot check begin (pytest_side/snapshots.py writes them)."""
SNAPSHOT_FAILURE_STARTS = (SNAPSHOT_DIFFERS, SNAPSHOT_MISSING, SNAPSHOT_UNCHECKED)


def snapshot_failure(failure: str | None) -> str | None:
    """The profile snapshot check's part of a case's failure message: the benchmark test puts it last."""
    lines = (failure or "").split("\n")
    start = next((i for i, line in enumerate(lines) if line.startswith(SNAPSHOT_FAILURE_STARTS)), None)
    return None if start is None else "\n".join(lines[start:])


@dataclass
class CaseRecord:
    """What a run keeps of one case: how its test ended and, typed, what the engine made of it.
    Its row of results.json is built from it once, by `case_row`, when the run's files are written."""

    key: CaseKey
    status: str
    """passed | failed | error: the worst its test reported (pytest), or the gate's rule (without pytest)"""
    nodeid: str = ""
    """The case's pytest node id; "" in a run without pytest."""
    outcome: CaseOutcome | None = None
    """The judged case; None when it could not be judged or its test never ran."""
    error: str | None = None
    """Why the case errored, whatever ended it."""
    failure: str | None = None
    """Why its test failed: breaches, regressions, a profile snapshot mismatch."""

    @classmethod
    def scored(cls, key: CaseKey, outcome: CaseOutcome, nodeid: str = "", snapshot: str | None = None) -> CaseRecord:
        """A judged case gated without pytest (a script's run, `merge`) by the benchmark test's own
        rule. Profile snapshots are checked under pytest only: `snapshot` is the failure of that
        check a pytest run gave (a shard's, for `merge`), which fails the case here too."""
        failure = "\n".join(part for part in (outcome.gate_failure(), snapshot) if part) or None
        return cls(key, "failed" if failure else "passed", nodeid, outcome, failure=failure)

    def worsen(self, status: str) -> None:
        """Keep the worse of this status and the one a later report of the case gives."""
        self.status = max(self.status, status, key=STATUS_RANK.__getitem__)


class BenchmarkRun(Protocol):
    """What the run files are written from (the plugin's BenchmarkSession is one)."""

    plan: Plan
    run_dir: Path
    started_at: dt.datetime
    records: dict[CaseKey, CaseRecord]
    calibration: CalibrationResult | None
    """The judge's latest calibration result in the report folder, if any."""
    selection: list[str] | None
    """Ids of the cases selected before --shard split them, when known."""


def case_row(plan: Plan, record: CaseRecord) -> ResultCase:
    """A case's row of results.json, checked against the schema: the one place a row is built."""
    key, outcome = record.key, record.outcome
    scenario = plan.scenarios[key.scenario_id]
    transcript = f"cases/{key.file_stem}.json"
    row = {
        "nodeid": record.nodeid,
        "model": key.model_id,
        "scenario": key.scenario_id,
        "archetype": scenario.archetype,
        "variant": scenario.variant,
        "kind": scenario.kind,
        "pack": scenario.pack,
        "outcome": record.status,
        "error": record.error,
        "failure": record.failure,
        "judge": plan.panel.id,
        "scenario_hash": scenario.content_hash(),
        "repeats": plan.settings.repeats,
        "transcript": transcript,
    }
    if outcome is not None:
        row |= _judged(outcome, scenario, transcript)
    return ResultCase.model_validate(row, context=WRITING)


def _judged(outcome: CaseOutcome, scenario: Scenario, transcript: str) -> dict:
    """The part of a row that a judged case adds: its scores, verdicts, comparisons and usage."""
    turns = outcome.transcripts
    return {
        # The transcript file holds the case's conversations in repeat order, turns in order.
        "turns": [
            {**t, "rationale": f"{transcript}#/transcripts/{t['repeat']}/turns/{t['turn'] - 1}/verdict/rationale"}
            for t in outcome.turn_rows(scenario)
        ],
        "phases": [
            m.model_dump(include={"phase", "phase_name", "metric", "mean", "low", "high", "n", "repeats"})
            for m in outcome.phase_metrics
        ],
        "breaches": [b.message() for b in outcome.breaches] + [b.message() for b in outcome.trajectory_breaches],
        "trajectories": [t.model_dump(mode="json") for t in outcome.trajectories],
        "regressions": [c.message() for c in outcome.regressions],
        "improvements": [c.message() for c in outcome.improvements],
        "comparisons": [c.model_dump(mode="json") for c in outcome.comparisons],
        "model_versions": sorted({t.model_version for t in turns}),
        "judge_versions": sorted({t.judge_version for t in turns}),
        "panel": outcome.panel_payload(),
        "usage": {
            role: total([t.usage[role] for tr in turns for t in tr.turns if role in t.usage]).model_dump()
            for role in ROLES
            if any(role in t.usage for tr in turns for t in tr.turns)
        },
        "judge_usage": {
            judge: total([t.judge_usage[judge] for tr in turns for t in tr.turns if judge in t.judge_usage]).model_dump()
            for judge in dict.fromkeys(j for tr in turns for t in tr.turns for j in t.judge_usage)
        },
    }


def preload_statistics() -> None:
    """Import what write_run_results needs (pandas, scipy), ahead of time."""
    import scipy.stats  # noqa: F401

    import psychosis_tests.analysis.stats  # noqa: F401


def run_metadata(bench: BenchmarkRun) -> dict:
    return {
        "run_id": bench.run_dir.name,
        "package_version": __version__,
        "python": platform.python_version(),
        "started_at": bench.started_at.isoformat(timespec="seconds"),
        "finished_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        **bench.plan.metadata(),
        "judge_calibration": calibration_line(bench.calibration, bench.plan.settings.report_dir),
        "judge_calibration_passed": bench.calibration.passed if bench.calibration else None,
        "selection": (
            {"cases": len(bench.selection), "hash": selection_hash(bench.selection)}
            if bench.selection is not None
            else None
        ),
    }


def write_run_results(bench: BenchmarkRun, *, extra_metadata: dict | None = None) -> dict:
    """Write every file of the run; returns the summary (also used for the terminal table).
    `extra_metadata` is added to the run metadata (a merged run names the runs it pooled)."""
    import pandas as pd

    records = sorted(bench.records.values(), key=lambda r: (r.nodeid, r.key.test_id))
    rows = [case_row(bench.plan, record) for record in records]
    usage = usage_rows([row.model_dump(include={"model", "usage", "judge_usage"}) for row in rows], bench.plan)
    escalation = escalation_summary((r.outcome for r in records), bench.plan, usage)
    metadata = {**run_metadata(bench), **(extra_metadata or {}), **({"escalation": escalation} if escalation else {})}
    document = results_document(metadata, rows)
    meta, cases = document["run"], document["cases"]
    run_dir = bench.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    _write_json(run_dir / "results.json", document)

    turn_table = pd.DataFrame(
        [{**row, "kind": case["kind"], "pack": case["pack"]} for case in cases for row in case["turns"]],
        columns=[
            "model", "scenario", "archetype", "variant", "kind", "pack", "repeat", "turn", "phase", "phase_name",
            *JUDGED_METRICS,
        ],
    )
    case_columns = ["model", "scenario", "archetype", "variant", "kind", "pack", "outcome"]
    case_table = pd.DataFrame([{k: c[k] for k in case_columns} for c in cases], columns=case_columns)
    statistics = set_statistics(turn_table, case_table, None, repeats=bench.plan.settings.repeats)
    packs = sorted({c["pack"] for c in cases if c["pack"] is not None})
    embedded = embedded_targets(bench.plan.targets, bench.plan.panel.judges)
    panel_order = [judge.id for judge in bench.plan.panel.judges]

    def judge_figures(pack: str) -> dict:
        """A pack's own panel agreement and trained judge's doubt, when the run has them."""
        panel = run_panel_summary([c for c in cases if c["pack"] == pack], panel_order)
        doubt = doubt_summary((r.outcome for r in records if bench.plan.scenarios[r.key.scenario_id].pack == pack), embedded)
        return {**({"panel": panel} if panel else {}), **({"judge_doubt": doubt} if doubt else {})}

    if packs:
        statistics["packs"] = {
            name: set_statistics(turn_table, case_table, name, repeats=bench.plan.settings.repeats)
            | {"trajectories": trajectories_per_model([c for c in cases if c["pack"] == name]), **judge_figures(name)}
            for name in packs
        }
    summary = {
        "run": meta,
        "statistics": statistics,
        "panel": run_panel_summary([c for c in cases if c["pack"] is None], panel_order),  # a pack's: statistics.packs
        "trajectories": trajectories_per_model([c for c in cases if c["pack"] is None]),  # a pack's: statistics.packs
        "cases": [{k: v for k, v in c.items() if k not in ("turns", "panel")} for c in cases],
        "usage": usage,
    }
    if escalation is not None:  # a cascade judged the run
        summary["escalation"] = escalation
    doubt = doubt_summary((r.outcome for r in records if bench.plan.scenarios[r.key.scenario_id].pack is None), embedded)
    if doubt is not None:  # the trained judge judged main-set turns alone; a pack's: statistics.packs
        summary["judge_doubt"] = doubt
    _write_json(run_dir / "summary.json", summary)
    _write_csv(run_dir / "summary.csv", cases)
    (run_dir / "summary.md").write_text("\n".join(markdown_summary(summary)) + "\n", encoding="utf-8")
    return summary


def set_statistics(turn_table, case_table, pack: str | None, *, repeats: int) -> dict:
    """The statistics of one scenario set: the main set (`pack` None), whose figures are the
    paper-comparable ones, or one pack's, so a pack never mixes into the main set's. The method's
    statistics are over delusion turns; controls get their own over-caution table."""
    from psychosis_tests.analysis.over_caution import delusion_turns, over_caution_summary
    from psychosis_tests.analysis.stats import summarise

    turns = turn_table[turn_table["pack"].isna() if pack is None else turn_table["pack"] == pack]
    cases = case_table[case_table["pack"].isna() if pack is None else case_table["pack"] == pack]
    statistics = summarise(delusion_turns(turns), cases)
    statistics["over_caution"] = over_caution_summary(turns, cases)
    if repeats > 1 and not turns.empty:
        from psychosis_tests.analysis.intervals import model_intervals

        statistics["per_model_interval"] = model_intervals(delusion_turns(turns))
    return statistics


def _write_json(path: Path, data: object) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False), encoding="utf-8")
    tmp.replace(path)


def _write_csv(path: Path, cases: list[dict]) -> None:
    """One row per case: each phase metric's mean and, with repeats, its 95% interval's ends."""
    with_intervals = any(p.get("low") is not None for c in cases for p in c["phases"])
    suffixes = ("", "_low", "_high") if with_intervals else ("",)
    names = sorted({f"{p['metric']}_phase{p['phase']}" for c in cases for p in c["phases"]})
    phase_columns = [f"{name}{suffix}" for name in names for suffix in suffixes]

    def cells(phase: dict) -> dict[str, str]:
        name = f"{phase['metric']}_phase{phase['phase']}"
        found = {name: phase["mean"], f"{name}_low": phase.get("low"), f"{name}_high": phase.get("high")}
        return {column: f"{value:.3f}" for column, value in found.items() if value is not None}

    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["model", "scenario", "archetype", "variant", "outcome", *phase_columns, "problems"])
        for c in cases:
            values = {column: text for p in c["phases"] for column, text in cells(p).items()}
            problems = "; ".join(filter(None, [c["error"], *c["breaches"], *c["regressions"]])) or c.get("failure") or ""
            row = [c["model"], c["scenario"], c["archetype"], c["variant"], c["outcome"],
                   *(values.get(col, "") for col in phase_columns), problems]  # fmt: skip
            writer.writerow([csv_cell(cell) for cell in row])
