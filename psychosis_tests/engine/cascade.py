"""A cascade judge: the trained judge scores every turn, and the turns it is unsure of go on to an
escalation judge (a chat judge, or a panel).

The trained judge gives a probability for the level it chose on each metric. When every one is at
or above its metric's threshold (the models-file entry's `thresholds`) its verdict stands and no
call is made; otherwise the whole turn goes to the escalation judge, whose verdict is the turn's,
so the verdicts that decide pass or fail on a doubtful turn are the escalation judge's. Only the
metrics the gate reads on the conversation's kind count (`doubtful`): DCS and HES are recorded on
controls, but no gate, regression check or trajectory reads them there, so a doubt about them could
change no outcome and does not escalate a control's turn. Every verdict says which judge decided
(`Verdict.decided_by`) and, when escalated, why (`Verdict.escalated`, e.g. "DCS p=0.62 < 0.80").
A failed escalation is the turn's error: the cascade never falls back to the first judge's
doubtful scores.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from psychosis_tests.engine.judges import Judge, JudgeCall, TrainedJudge
from psychosis_tests.inputs.method import scope
from psychosis_tests.inputs.models import ModelSpec
from psychosis_tests.inputs.rubric import Verdict

if TYPE_CHECKING:
    from psychosis_tests.engine.trained_judge import Score


class Answer(Protocol):
    verdict: Verdict
    judge_version: str
    votes: Sequence[object]
    """Every escalation judge's vote (`engine.panel.Vote`): one, or a panel's."""


class Escalation(Protocol):
    """The judge or panel doubtful turns go to (`engine.panel.JudgePanel`)."""

    @property
    def id(self) -> str: ...

    async def score(
        self, conversation: Sequence[dict[str, str]], metrics: Sequence[str], harm: str, call: JudgeCall
    ) -> Answer: ...


def below_threshold(probabilities: Mapping[str, float], threshold: Callable[[str], float], kind: str) -> list[str]:
    """The metrics the gate reads on a conversation of this kind whose probability is below the
    metric's threshold."""
    return [m for m, p in probabilities.items() if p < threshold(m) and scope(m, kind) is not None]


def doubtful(scores: dict[str, Score], spec: ModelSpec, kind: str) -> list[str]:
    """The metrics that escalate a turn of a conversation of this kind (`below_threshold`)."""
    return below_threshold({m: score.probability for m, score in scores.items()}, spec.threshold, kind)


def doubts(scores: dict[str, Score], spec: ModelSpec, kind: str) -> list[str]:
    """Why a turn is escalated: each doubtful score against its threshold."""
    found = []
    for metric in doubtful(scores, spec, kind):
        probability, threshold = scores[metric].probability, spec.threshold(metric)
        # Two decimals, unless they would print the probability as the threshold itself.
        digits = 2 if f"{probability:.2f}" != f"{threshold:.2f}" else 4
        found.append(f"{metric.upper()} p={probability:.{digits}f} < {threshold:.2f}")
    return found


@dataclass(frozen=True)
class CascadeJudge(Judge):
    """A models-file entry of kind cascade, with its two judges built."""

    spec: ModelSpec
    first: TrainedJudge
    escalation: Escalation

    async def score(
        self, conversation: Sequence[dict[str, str]], metrics: Sequence[str], harm: str, call: JudgeCall
    ) -> tuple[Verdict, str]:
        verdict, version, _ = await self.score_with_votes(conversation, metrics, harm, call)
        return verdict, version

    async def score_with_votes(
        self, conversation: Sequence[dict[str, str]], metrics: Sequence[str], harm: str, call: JudgeCall
    ) -> tuple[Verdict, str, tuple[object, ...]]:
        """`score`, and on an escalated turn the escalation panel's votes (empty otherwise)."""
        verdict, version = self.first_look(conversation, metrics, call)
        if verdict.kept is None:
            return verdict, version, ()
        return await self.escalate(conversation, metrics, harm, call, verdict.kept)

    def first_look(
        self, conversation: Sequence[dict[str, str]], metrics: Sequence[str], call: JudgeCall
    ) -> tuple[Verdict, str]:
        """The first judge's verdict; on a doubtful turn `kept` says why it doubts (the caller
        escalates it, or records why it need not)."""
        scores = self.first.scores(conversation, metrics, call)
        why = doubts(scores, self.spec, call.kind)
        update = {"decided_by": self.first.spec.id, "kept": "; ".join(why) if why else None}
        return self.first.verdict(scores).model_copy(update=update), self.first.version

    def doubtful_metrics(self, conversation: Sequence[dict[str, str]], metrics: Sequence[str], call: JudgeCall) -> list[str]:
        """The metrics whose first-judge score is doubtful on this turn (`doubtful`)."""
        return doubtful(self.first.scores(conversation, metrics, call), self.spec, call.kind)

    async def escalate(
        self, conversation: Sequence[dict[str, str]], metrics: Sequence[str], harm: str, call: JudgeCall, reason: str
    ) -> tuple[Verdict, str, tuple[object, ...]]:
        """The escalation judge's verdict on the turn, recording why it was asked, and, when the
        escalation judge is a panel, its judges' votes (a judge that failed among them is kept there,
        for reports to count, as in any panel)."""
        answer = await self.escalation.score(conversation, metrics, harm, call)
        verdict = answer.verdict.model_copy(
            update={
                "decided_by": self.escalation.id,
                "escalated": reason,
                "rationale": f"escalated ({reason}): {answer.verdict.rationale}"[:2000],
            }
        )
        votes = tuple(answer.votes) if len(answer.votes) > 1 else ()
        return verdict, f"{self.first.version}; {answer.judge_version}", votes
