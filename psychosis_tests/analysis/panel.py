"""What a judge panel's votes say: the judges' agreement, the turns they split on, their failures.

Per case: the turns where two judges are two levels apart on DCS or HES (a reply one judge calls
grounding and another validating), and how many turns each judge failed on while the panel
still scored them. Over the run: Krippendorff's alpha per metric across every judged turn
(ordinal for DCS and HES, nominal for SIS), from `analysis.agreement`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from psychosis_tests.engine.conversation import Transcript
from psychosis_tests.inputs.method import METRICS

SPLIT = 2
"""Levels apart on DCS or HES for a turn to be listed as split."""


def vote_rows(transcripts: Sequence[Transcript]) -> list[dict]:
    """One row per panel-judged turn: {repeat, turn, scores: {judge: {metric: value}}, failed: {judge: error}}."""
    rows = []
    for transcript in transcripts:
        for turn in transcript.turns:
            if not turn.votes:
                continue
            rows.append(
                {
                    "repeat": transcript.repeat,
                    "turn": turn.turn,
                    "scores": {
                        v.judge_id: {m: getattr(v.verdict, m) for m in turn.metrics}
                        for v in turn.votes
                        if v.verdict is not None
                    },
                    "failed": {v.judge_id: v.error or "" for v in turn.votes if v.verdict is None},
                }
            )
    return rows


def split_turns(rows: Iterable[dict], *, with_repeat: bool = False) -> list[str]:
    """Turns where judges are SPLIT levels apart on DCS or HES, as readable lines."""
    lines = []
    for row in rows:
        for metric in ("dcs", "hes"):
            given = {j: s[metric] for j, s in row["scores"].items() if s.get(metric) is not None}
            if given and max(given.values()) - min(given.values()) >= SPLIT:
                where = f"t{row['turn']}" + (f" repeat {row['repeat']}" if with_repeat else "")
                votes = ", ".join(f"{j} {v}" for j, v in given.items())
                lines.append(f"{where} {metric.upper()}: {votes}")
    return lines


def failures(rows: Iterable[dict]) -> dict[str, int]:
    """Per judge, the panel-judged turns it gave no valid verdict on."""
    counts: dict[str, int] = {}
    for row in rows:
        for judge in row["failed"]:
            counts[judge] = counts.get(judge, 0) + 1
    return counts


def run_panel_summary(cases: Iterable[dict], panel: Sequence[str] = ()) -> dict | None:
    """The run's panel section from each case's `panel` payload; None when no panel judged.
    `panel`: the panel's judge ids in its order, which the section keeps (a judge only the votes
    name, one that failed within a cascade's escalation panel, follows them)."""
    rows = [row for case in cases for row in (case.get("panel") or {}).get("votes", [])]
    if not rows:
        return None
    from psychosis_tests.analysis.agreement import alpha  # scikit-learn is slow to import: only for panels

    voted = dict.fromkeys(j for row in rows for j in (*row["scores"], *row["failed"]))
    judges = [j for j in panel if j in voted] + [j for j in voted if j not in panel]
    alphas: dict[str, float | None] = {}
    for metric in METRICS:
        units = [row for row in rows if any(s.get(metric) is not None for s in row["scores"].values())]
        matrix = [[_value(row, judge, metric) for row in units] for judge in judges]
        alphas[metric] = alpha(matrix, metric) if units else None
    split = [
        f"{case['model']} / {case['scenario']} {line}"
        for case in cases
        for line in (case.get("panel") or {}).get("split", [])
    ]
    return {"judges": judges, "turns": len(rows), "alpha": alphas, "failures": failures(rows), "split_turns": split}


def _value(row: dict, judge: str, metric: str) -> float:
    value = row["scores"].get(judge, {}).get(metric)
    return math.nan if value is None else float(value)
