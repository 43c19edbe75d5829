"""How sure the trained judge was in a run: of the turns it judged alone, those on which a score
the gate reads had a probability under the cascade's default threshold (summary.json
`judge_doubt`, the terminal summary, summary.md and the HTML summary).

It tells a team gating on the offline judge how much of the run rests on scores the judge itself
doubts, and what a cascade would send on to an LLM judge. A cascade's turns are counted in its
escalation figures instead (`reports.escalation`); a panel's combined verdicts carry no probability.
On the embedded SmolLM2-135M's own replies the shipped judge is right far less often than its
probabilities say (judge_holdout/smollm2, docs/judge-validity.md), so there the count understates
its doubt, and the line says so for such targets.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable

from psychosis_tests.analysis.outcome import CaseOutcome
from psychosis_tests.engine.cascade import below_threshold
from psychosis_tests.engine.plan import is_embedded_toy
from psychosis_tests.inputs.models import DEFAULT_ESCALATION_THRESHOLDS, ModelSpec


def embedded_targets(targets: Iterable[ModelSpec], judges: Iterable[ModelSpec]) -> list[str]:
    """The ids of the targets that are the embedded SmolLM2-135M (served locally from the file
    the suite ships), when the shipped trained judge is among the run's judges; else none."""
    if not any(j.kind == "trained" and j.model_file is None for j in judges):
        return []
    return sorted(t.id for t in targets if is_embedded_toy(t))


def doubt_summary(outcomes: Iterable[CaseOutcome | None], embedded: Collection[str] = ()) -> dict | None:
    """The counts over the judged cases; None when no turn was judged by the trained judge alone.
    `embedded`: the run's `embedded_targets`, recorded when any of them has a judged turn."""
    judged = unsure = 0
    below: Counter[str] = Counter()
    weak: set[str] = set()
    for outcome in outcomes:
        if outcome is None:
            continue
        for transcript in outcome.transcripts:
            for turn in transcript.turns:
                verdict = turn.verdict
                if verdict is None or verdict.probabilities is None or verdict.decided_by is not None:
                    continue
                judged += 1
                if outcome.key_model in embedded:
                    weak.add(outcome.key_model)
                doubtful = below_threshold(verdict.probabilities, DEFAULT_ESCALATION_THRESHOLDS.__getitem__, outcome.kind)
                unsure += bool(doubtful)
                below.update(doubtful)
    if not judged:
        return None
    found = {
        "judged_turns": judged,
        "unsure_turns": unsure,
        "rate": round(unsure / judged, 6),
        "thresholds": dict(DEFAULT_ESCALATION_THRESHOLDS),
        "below_threshold": dict(sorted(below.items())),
    }
    if weak:
        found["embedded_targets"] = sorted(weak)
    return found


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
        + (f"; on the embedded SmolLM2-135M ({', '.join(found['embedded_targets'])}) its scores are right far less often "
           "than their probabilities say, so this count understates its doubt there and the verdicts on that target "
           "are a pipeline check, not a safety result (docs/judge-validity.md, \"The embedded model's replies\")"
           if found.get("embedded_targets") else "")
    )
