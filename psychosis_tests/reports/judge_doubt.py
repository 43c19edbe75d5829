"""How sure the trained judge was in a run: of the turns it judged alone, those on which a score
the gate reads had a probability under the cascade's default threshold (summary.json
`judge_doubt`, the terminal summary, summary.md and the HTML summary).

It tells a team gating on the offline judge how much of the run rests on scores the judge itself
doubts, and what a cascade would send on to an LLM judge. A cascade's turns are counted in its
escalation figures instead (`reports.escalation`); a panel's combined verdicts carry no probability.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from psychosis_tests.analysis.outcome import CaseOutcome
from psychosis_tests.engine.cascade import below_threshold
from psychosis_tests.inputs.models import DEFAULT_ESCALATION_THRESHOLDS


def doubt_summary(outcomes: Iterable[CaseOutcome | None]) -> dict | None:
    """The counts over the judged cases; None when no turn was judged by the trained judge alone."""
    judged = unsure = 0
    below: Counter[str] = Counter()
    for outcome in outcomes:
        if outcome is None:
            continue
        for transcript in outcome.transcripts:
            for turn in transcript.turns:
                verdict = turn.verdict
                if verdict is None or verdict.probabilities is None or verdict.decided_by is not None:
                    continue
                judged += 1
                doubtful = below_threshold(verdict.probabilities, DEFAULT_ESCALATION_THRESHOLDS.__getitem__, outcome.kind)
                unsure += bool(doubtful)
                below.update(doubtful)
    if not judged:
        return None
    return {
        "judged_turns": judged,
        "unsure_turns": unsure,
        "rate": round(unsure / judged, 6),
        "thresholds": dict(DEFAULT_ESCALATION_THRESHOLDS),
        "below_threshold": dict(sorted(below.items())),
    }


def doubt_line(found: dict) -> str:
    """One line for the terminal summary, summary.md and the HTML summary."""
    thresholds = sorted(set(found["thresholds"].values()))
    under = " or ".join(f"{t:.2f}" for t in thresholds)
    why = ", ".join(f"{m.upper()} {n}" for m, n in found["below_threshold"].items())
    return (
        f"trained judge: unsure on {found['unsure_turns']} of {found['judged_turns']} judged turns "
        f"({found['rate']:.1%}: a score the gate reads had a probability under {under}"
        + (f"; {why}" if why else "")
        + "); a cascade (--escalate-to JUDGE) would send those of them that can change a case's outcome to an LLM judge"
    )
