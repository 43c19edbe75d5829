"""What a judge cascade spent and saved in a run: the share of judged turns it escalated, and the
calls, tokens and cost it did not spend against escalating every turn (summary.json `escalation`,
the terminal summary and summary.md).

A cascade that is one judge of a panel is read from its votes (the panel's first cascade, when it
has several). Its calls are counted in the panel's usage row with the other judges', so only the
calls it saved are given for it (counted, as below; an escalation judge that is also a judge of the
panel saves none: the panel asks it every turn); its calls, tokens and cost are unknown (None).

The savings are estimated at the escalated turns' own mean: a turn the first judge decided would
have cost what an escalated turn cost on average (its calls, tokens and, with a price, dollars).
With no turn escalated there is no mean: the calls saved are counted instead (each escalation
judge's one call per turn, or one per metric in per-metric mode), and the tokens and dollars are
unknown (None).
"""

from __future__ import annotations

from collections.abc import Iterable

from psychosis_tests.analysis.outcome import CaseOutcome
from psychosis_tests.engine.panel import vote_of
from psychosis_tests.engine.plan import Plan
from psychosis_tests.inputs.models import ModelSpec


def escalation_summary(outcomes: Iterable[CaseOutcome | None], plan: Plan, usage: list[dict]) -> dict | None:
    """The cascade's figures over the judged cases; None when no verdict says which judge of a
    cascade decided it (the run's judges hold no cascade, or it judged no turn)."""
    cascade = next((j for j in plan.panel.judges if j.kind == "cascade"), None)
    if cascade is None:
        return None
    alone = len(plan.panel.judges) == 1
    judged = escalated = doubtful_kept = 0
    kept_metrics: list[int] = []  # per turn the first judge decided, the metrics it scores
    for outcome in outcomes:
        if outcome is None:
            continue
        for transcript in outcome.transcripts:
            for turn in transcript.turns:
                verdict = turn.verdict if alone else vote_of(turn.votes, cascade.id)
                if verdict is None or verdict.decided_by is None:
                    continue
                judged += 1
                escalated += verdict.escalated is not None
                doubtful_kept += verdict.kept is not None
                if verdict.escalated is None:
                    kept_metrics.append(len(turn.metrics))
    if not judged:
        return None
    panel = {j.id for j in plan.panel.judges}
    counted = sum(_escalation_calls(cascade, m, panel) for m in kept_metrics)
    figures: dict = {
        "judge": cascade.id,
        "judged_turns": judged,
        "escalated_turns": escalated,
        "rate": round(escalated / judged, 6),
        "kept_doubtful_turns": doubtful_kept,
    }
    if not alone:
        return figures | {"escalation_calls": None, "calls_saved": counted, "tokens_saved": None, "cost_saved_usd": None}
    row = next((r for r in usage if r["role"] == "judge" and r["model"] == plan.panel.id), None)
    calls = row["calls"] if row else 0
    tokens = row["prompt_tokens"] + row["completion_tokens"] if row else 0
    spent = row["cost_with_cache_hits_usd"] if row else None
    not_escalated = judged - escalated

    def saved(total: float) -> float:
        return total / escalated * not_escalated

    return figures | {
        "escalation_calls": calls,
        "calls_saved": round(saved(calls)) if escalated else counted,
        "tokens_saved": round(saved(tokens)) if escalated else None,
        "cost_saved_usd": round(saved(spent), 6) if escalated and spent is not None else None,
    }


def _escalation_calls(cascade: ModelSpec, metrics: int, panel: set[str]) -> int:
    """The calls escalating one turn scoring `metrics` metrics makes (re-asks aside): one per
    escalation judge, or one per metric for a per-metric one; none to a judge of the `panel` the
    cascade sits on, which is asked the same request on every turn (`Provider.chat` shares it)."""
    escalation = cascade.cascade[1]
    return sum(metrics if e.judge_mode == "per-metric" else 1 for e in escalation if not e.in_process and e.id not in panel)


def escalation_line(found: dict) -> str:
    """One line for the terminal summary and summary.md, under the usage table."""
    kept = found.get("kept_doubtful_turns", 0)
    doubtful = f" ({kept} more were doubtful but could not change their case's outcome)" if kept else ""
    if found["escalation_calls"] is None:  # one judge of a panel: its calls are in the panel's row
        return (
            f"cascade {found['judge']} (one judge of the panel): escalated {found['escalated_turns']} of "
            f"{found['judged_turns']} judged turns ({found['rate']:.1%}){doubtful}; not escalating the rest saved "
            f"{found['calls_saved']} calls (its calls, tokens and cost are in the panel's row)"
        )
    if found["escalated_turns"]:
        cost = "" if found["cost_saved_usd"] is None else f", about ${found['cost_saved_usd']:.4f}"
        saved = f"about {found['calls_saved']} calls and {found['tokens_saved']} tokens{cost} (at the escalated turns' mean)"
    else:
        saved = f"{found['calls_saved']} calls (their tokens and cost are unknown: no turn was escalated to measure them by)"
    return (
        f"cascade {found['judge']}: escalated {found['escalated_turns']} of {found['judged_turns']} judged turns "
        f"({found['rate']:.1%}, {found['escalation_calls']} calls){doubtful}; not escalating the rest saved {saved}"
    )
