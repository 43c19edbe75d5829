"""A cascade judge: the trained judge scores every turn, and the turns it is unsure of go on to an
escalation judge (a chat judge, or a panel).

The trained judge gives a probability for the level it chose on each metric. When every one is at
or above its metric's threshold (the models-file entry's `thresholds`) its verdict stands and no
call is made; otherwise the whole turn goes to the escalation judge, whose verdict is the turn's,
so the verdicts that decide pass or fail on a doubtful turn are the escalation judge's. Every
verdict says which judge decided (`Verdict.decided_by`) and, when escalated, why
(`Verdict.escalated`, e.g. "DCS p=0.62 < 0.80"). A failed escalation is the turn's error: the
cascade never falls back to the first judge's doubtful scores.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from psychosis_tests.engine.judges import JudgeCall, TrainedJudge
from psychosis_tests.engine.trained_judge import Score
from psychosis_tests.inputs.models import ModelSpec
from psychosis_tests.inputs.rubric import Verdict


class Answer(Protocol):
    verdict: Verdict
    judge_version: str


class Escalation(Protocol):
    """The judge or panel doubtful turns go to (`engine.panel.JudgePanel`)."""

    @property
    def id(self) -> str: ...

    async def score(
        self, conversation: Sequence[dict[str, str]], metrics: Sequence[str], harm: str, call: JudgeCall
    ) -> Answer: ...


def doubts(scores: dict[str, Score], spec: ModelSpec) -> list[str]:
    """Why a turn is escalated: each score whose probability is below its metric's threshold."""
    found = []
    for metric, score in scores.items():
        threshold = spec.threshold(metric)
        if score.probability < threshold:
            # Two decimals, unless they would print the probability as the threshold itself.
            digits = 2 if f"{score.probability:.2f}" != f"{threshold:.2f}" else 4
            found.append(f"{metric.upper()} p={score.probability:.{digits}f} < {threshold:.2f}")
    return found


@dataclass(frozen=True)
class CascadeJudge:
    """A models-file entry of kind cascade, with its two judges built."""

    spec: ModelSpec
    first: TrainedJudge
    escalation: Escalation

    async def score(
        self, conversation: Sequence[dict[str, str]], metrics: Sequence[str], harm: str, call: JudgeCall
    ) -> tuple[Verdict, str]:
        verdict, version = self.first_look(conversation, metrics, call)
        if verdict.kept is None:
            return verdict, version
        return await self.escalate(conversation, metrics, harm, call, verdict.kept)

    def first_look(
        self, conversation: Sequence[dict[str, str]], metrics: Sequence[str], call: JudgeCall
    ) -> tuple[Verdict, str]:
        """The first judge's verdict; on a doubtful turn `kept` says why it doubts (the caller
        escalates it, or records why it need not)."""
        scores = self.first.scores(conversation, metrics, call)
        why = doubts(scores, self.spec)
        update = {"decided_by": self.first.spec.id, "kept": "; ".join(why) if why else None}
        return self.first.verdict(scores).model_copy(update=update), self.first.version

    def doubtful_metrics(self, conversation: Sequence[dict[str, str]], metrics: Sequence[str], call: JudgeCall) -> list[str]:
        """The metrics whose first-judge score is below its threshold on this turn."""
        scores = self.first.scores(conversation, metrics, call)
        return [m for m, s in scores.items() if s.probability < self.spec.threshold(m)]

    async def escalate(
        self, conversation: Sequence[dict[str, str]], metrics: Sequence[str], harm: str, call: JudgeCall, reason: str
    ) -> tuple[Verdict, str]:
        """The escalation judge's verdict on the turn, recording why it was asked."""
        answer = await self.escalation.score(conversation, metrics, harm, call)
        verdict = answer.verdict.model_copy(
            update={
                "decided_by": self.escalation.id,
                "escalated": reason,
                "rationale": f"escalated ({reason}): {answer.verdict.rationale}"[:2000],
            }
        )
        return verdict, f"{self.first.version}; {answer.judge_version}"
