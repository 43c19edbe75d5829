"""What a judge cascade spent and saved in a run: the share of judged turns it escalated, and the
calls, tokens and cost it did not spend against escalating every turn (summary.json `escalation`,
the terminal summary and summary.md).

The savings are estimated at the escalated turns' own mean: a turn the first judge decided would
have cost what an escalated turn cost on average (its calls, tokens and, with a price, dollars).
With no turn escalated there is no mean: the calls saved are counted instead (each escalation
judge's one call per turn, or one per metric in per-metric mode), and the tokens and dollars are
unknown (None).
"""

from __future__ import annotations

from collections.abc import Iterable

from psychosis_tests.analysis.outcome import CaseOutcome
from psychosis_tests.engine.plan import Plan


def escalation_summary(outcomes: Iterable[CaseOutcome | None], plan: Plan, usage: list[dict]) -> dict | None:
    """The cascade's figures over the judged cases; None when no verdict says which judge of a
    cascade decided it (the run's judge is not a cascade, or it judged no turn)."""
    judged = escalated = doubtful_kept = 0
    kept_metrics: list[int] = []  # per turn the first judge decided, the metrics it scores
    for outcome in outcomes:
        if outcome is None:
            continue
        for transcript in outcome.transcripts:
            for turn in transcript.turns:
                if turn.verdict is None or turn.verdict.decided_by is None:
                    continue
                judged += 1
                escalated += turn.verdict.escalated is not None
                doubtful_kept += turn.verdict.kept is not None
                if turn.verdict.escalated is None:
                    kept_metrics.append(len(turn.metrics))
    if not judged:
        return None
    row = next((r for r in usage if r["role"] == "judge" and r["model"] == plan.panel.id), None)
    calls = row["calls"] if row else 0
    tokens = row["prompt_tokens"] + row["completion_tokens"] if row else 0
    spent = row["cost_with_cache_hits_usd"] if row else None
    not_escalated = judged - escalated

    def saved(total: float) -> float:
        return total / escalated * not_escalated

    return {
        "judge": plan.panel.id,
        "judged_turns": judged,
        "escalated_turns": escalated,
        "rate": round(escalated / judged, 6),
        "kept_doubtful_turns": doubtful_kept,
        "escalation_calls": calls,
        "calls_saved": round(saved(calls)) if escalated else sum(_escalation_calls(plan, m) for m in kept_metrics),
        "tokens_saved": round(saved(tokens)) if escalated else None,
        "cost_saved_usd": round(saved(spent), 6) if escalated and spent is not None else None,
    }


def _escalation_calls(plan: Plan, metrics: int) -> int:
    """The calls escalating one turn scoring `metrics` metrics makes (re-asks aside): one per
    escalation judge, or one per metric for a per-metric one."""
    cascade = next(j for j in plan.panel.judges if j.kind == "cascade")
    return sum(metrics if e.judge_mode == "per-metric" else 1 for e in cascade.cascade[1] if not e.in_process)


def escalation_line(found: dict) -> str:
    """One line for the terminal summary and summary.md, under the usage table."""
    kept = found.get("kept_doubtful_turns", 0)
    doubtful = f" ({kept} more were doubtful but could not change their case's outcome)" if kept else ""
    if found["escalated_turns"]:
        cost = "" if found["cost_saved_usd"] is None else f", about ${found['cost_saved_usd']:.4f}"
        saved = f"about {found['calls_saved']} calls and {found['tokens_saved']} tokens{cost} (at the escalated turns' mean)"
    else:
        saved = f"{found['calls_saved']} calls (their tokens and cost are unknown: no turn was escalated to measure them by)"
    return (
        f"cascade {found['judge']}: escalated {found['escalated_turns']} of {found['judged_turns']} judged turns "
        f"({found['rate']:.1%}, {found['escalation_calls']} calls){doubtful}; not escalating the rest saved {saved}"
    )
