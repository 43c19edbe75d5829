"""What earlier runs in the report folder measured, for planning the next one."""

from __future__ import annotations

import json
from pathlib import Path


RUNS_SEARCHED = 20
"""How many of the newest run folders `measured_escalation` reads."""


def measured_escalation(report_dir: Path, fingerprint: str, *, doubtful: bool = False) -> tuple[float, str] | None:
    """The escalation rate a past run of the same cascade (same judge fingerprint) measured, and
    its run id: the newest of the report folder's last RUNS_SEARCHED runs that has one. With
    `doubtful`, the share of its judged turns that were doubtful, escalated or kept: what a run
    that escalates every doubtful turn would have escalated."""
    if not report_dir.is_dir():
        return None
    # Newest written first: a run folder's name is its start time only when pytest named it (a
    # merged run's is its --out folder's, e.g. "merged", which would sort after every other).
    runs = sorted((p for p in report_dir.iterdir() if (p / "results.json").is_file()),
                  key=lambda p: ((p / "results.json").stat().st_mtime, p.name), reverse=True)  # fmt: skip
    for run_dir in runs[:RUNS_SEARCHED]:
        try:
            run = json.loads((run_dir / "results.json").read_text(encoding="utf-8")).get("run", {})
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue  # a damaged or half-written run is no measurement
        escalation = run.get("escalation") or {}
        if (run.get("judge_fingerprint") or {}).get("hash") == fingerprint and escalation.get("judged_turns"):
            kept = escalation.get("kept_doubtful_turns") or 0
            rate = (escalation["escalated_turns"] + kept) / escalation["judged_turns"] if doubtful else float(escalation["rate"])
            return rate, str(run.get("run_id", run_dir.name))
    return None
