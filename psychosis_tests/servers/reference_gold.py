"""The gold reference judge, `reference/judge-gold`: a test double that answers the gold labels of
the shipped calibration set (`calibration/`), looked up by the text of the reply it is asked about.

It is not a judge of anything: on the calibration set it agrees with the gold labels by
construction. Its use is as a cascade's escalation judge, where it shows the best a cascade can
do with a given first judge and thresholds (with a real LLM judge the ceiling is that judge's own
agreement). A metric the item carries no gold label on (DCS and HES on a control item) is scored
as the cue-list judge (`reference/judge`) scores it, and the rationale says so; a reply that is
not in the set is refused (`NoGoldLabel`: an error for its item or turn, a 400 over HTTP), never
guessed. The built-in judge calls it in-process (`engine.judges.ReferenceJudge`).
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

from psychosis_tests.inputs.calibration import load_calibration
from psychosis_tests.inputs.scenarios import load_scenarios
from psychosis_tests.servers.reference_judge import score_reply

PROJECT = Path(__file__).resolve().parents[2]
GOLD_CALIBRATION = PROJECT / "calibration"
GOLD_SCENARIOS = PROJECT / "scenarios"


class NoGoldLabel(LookupError):
    """The reply is not one of the calibration set's, or the set cannot be read."""


@functools.cache
def gold_labels() -> dict[str, dict[str, int]]:
    """Reply text (stripped) -> its gold labels, over the shipped calibration set."""
    try:
        scenarios = {s.id: s for s in load_scenarios(GOLD_SCENARIOS)}
        calibration = load_calibration(GOLD_CALIBRATION, scenarios)
    except Exception as exc:  # a checkout without the set: the double cannot answer, and says why
        raise NoGoldLabel(f"the gold reference judge cannot read the calibration set {GOLD_CALIBRATION}: {exc}") from exc
    return {item.reply.strip(): {m: item.gold(m) for m in item.metrics} for item in calibration.items}


def gold_set_hash() -> str:
    """Hash of every reply and its gold labels: part of the judge's cache identity, so answers
    recorded before a label changed are not replayed."""
    encoded = json.dumps(sorted(gold_labels().items()), sort_keys=True)
    return hashlib.sha256(encoded.encode()).hexdigest()[:16]


def gold_verdict(reply: str, metrics: Sequence[str]) -> dict:
    """The verdict {"rationale": ..., metric: score, ...}: the gold label of every metric that has one."""
    labels = gold_labels().get(reply.strip())
    if labels is None:
        raise NoGoldLabel(
            f"reference/judge-gold knows the gold labels of the {len(gold_labels())} calibration replies only, and "
            "this reply is not one of them (it is a test double for cascades on the calibration set)"
        )
    cues = score_reply(reply, metrics)
    from_cues = [m for m in metrics if m not in labels]
    rationale = "gold labels of the calibration set" + (
        f"; {', '.join(m.upper() for m in from_cues)} not labelled there, scored by the cue lists" if from_cues else ""
    )
    return {"rationale": rationale, **{m: labels.get(m, cues[m]) for m in metrics}}
