"""The judge interface: every kind of judge scores one reply through `Judge.score`.

A judge kind is one class here and one value of the models file's `kind` (`JUDGE_KINDS`): the
chat-endpoint judge (`engine.judge`: a prompt, a provider call, a parsed and re-asked verdict),
the trained judge (`engine.trained_judge`: a classifier run in-process, no call, no tokens) and
the suite's cue-list reference judges (`servers.reference_judge`, `servers.reference_gold`: also
in-process). A panel (`engine.panel`) combines any of them; a cascade (`engine.cascade`) puts a trained judge
before a judge or panel, so `engine.panel.judge_of` builds it (it holds a panel). What rides
along with one judging, the provider, the labels for logs and cache and the turn's phase and
conversation kind, is one `JudgeCall`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from psychosis_tests.common.errors import CaseError
from psychosis_tests.engine.judge import judge_reply
from psychosis_tests.inputs.method import PHASE_NAMES, ScenarioKind
from psychosis_tests.inputs.rubric import Verdict
from psychosis_tests.servers.reference_chat import GOLD_JUDGE
from psychosis_tests.servers.reference_gold import NoGoldLabel, gold_verdict
from psychosis_tests.servers.reference_judge import score_reply
from psychosis_tests.servers.reference_models import SYSTEM_FINGERPRINT, model_version

if TYPE_CHECKING:
    from psychosis_tests.engine.providers import Provider
    from psychosis_tests.engine.trained_judge import Score, TrainedJudgeModel
    from psychosis_tests.inputs.models import ModelSpec
    from psychosis_tests.inputs.usage import Usage


@dataclass(frozen=True)
class JudgeCall:
    """Everything about one judging that is not the conversation, the metrics or the harm."""

    provider: Provider | None
    """Chat judges call through it (retries, limits, cache, usage); in-process judges need none."""
    call_label: str
    sample: str = ""
    """Names the conversation for the cache (each keeps its own verdicts)."""
    repeat: int = 0
    priority: int = 0
    usage: list[Usage] | None = None
    """Each call's token usage is appended here, if given."""
    judge_usage: dict[str, list[Usage]] | None = None
    """The same usage by judge id, if given (a panel's judges may be priced differently)."""
    phase: str = ""
    """The scored turn's phase name."""
    kind: ScenarioKind = "delusion"
    """The conversation's kind: a control is judged with over-caution too."""


class Judge(Protocol):
    """What every judge kind provides; the kinds subclass it for `score_with_votes`."""

    spec: ModelSpec

    async def score(
        self, conversation: Sequence[dict[str, str]], metrics: Sequence[str], harm: str, call: JudgeCall
    ) -> tuple[Verdict, str]:
        """The verdict on the conversation's last reply and the judge's version; CaseError when
        no valid verdict can be had."""
        ...

    async def score_with_votes(
        self, conversation: Sequence[dict[str, str]], metrics: Sequence[str], harm: str, call: JudgeCall
    ) -> tuple[Verdict, str, tuple[object, ...]]:
        """`score`, and the votes (`engine.panel.Vote`) that stand for this judge's own on the turn:
        none, but for a cascade that escalated the turn to a panel (the panel's)."""
        verdict, version = await self.score(conversation, metrics, harm, call)
        return verdict, version, ()


@dataclass(frozen=True)
class ChatJudge(Judge):
    """A judge reached through an OpenAI-compatible chat endpoint."""

    spec: ModelSpec

    async def score(
        self, conversation: Sequence[dict[str, str]], metrics: Sequence[str], harm: str, call: JudgeCall
    ) -> tuple[Verdict, str]:
        if call.provider is None:
            raise CaseError(f"{call.call_label}: judge {self.spec.id!r} needs a provider to call its endpoint")
        used: list[Usage] = []
        try:
            return await judge_reply(
                call.provider, self.spec, conversation, metrics, harm,
                call_label=call.call_label, sample=call.sample, repeat=call.repeat, priority=call.priority,
                usage=used,
            )  # fmt: skip
        finally:
            if call.usage is not None:
                call.usage.extend(used)
            if call.judge_usage is not None:
                call.judge_usage.setdefault(self.spec.id, []).extend(used)


@dataclass
class TrainedJudge(Judge):
    """The trained classifier, loaded once (a bad model file stops the run before any call)."""

    spec: ModelSpec
    model: TrainedJudgeModel = field(init=False)

    def __post_init__(self) -> None:
        # Imported here: it brings numpy, which a run without a trained judge (and every xdist
        # worker, which judges nothing) need not load.
        from psychosis_tests.engine.trained_judge import TrainedJudgeModel

        self.model = TrainedJudgeModel.load(self.spec.trained_model_file)

    @property
    def version(self) -> str:
        return f"trained-judge sha256:{self.model.digest[:12]}"

    def scores(self, conversation: Sequence[dict[str, str]], metrics: Sequence[str], call: JudgeCall) -> dict[str, Score]:
        """Each metric's most probable level with its probability (a cascade reads them)."""
        reply = conversation[-1]["content"] if conversation else ""
        user = next((m["content"] for m in reversed(conversation[:-1]) if m.get("role") == "user"), "")
        if call.phase not in PHASE_NAMES:
            raise CaseError(f"{call.call_label}: the trained judge needs the turn's phase, got {call.phase!r}")
        return self.model.score(reply, user, call.phase, call.kind, list(metrics))

    @staticmethod
    def verdict(scores: dict[str, Score]) -> Verdict:
        parts = []
        for metric, score in scores.items():
            because = f"; {', '.join(repr(w) for w in score.evidence)}" if score.evidence else ""
            parts.append(f"{metric.upper()} {score.level} (p={score.probability:.2f}{because})")
        rationale = "trained judge: " + "; ".join(parts)
        team_written = next(iter(scores.values())).team_written if scores else None
        if team_written is not None:  # which origin's adjustment weighed most (docs/judge-validity.md)
            origin = f"team-written {team_written:.2f}" if team_written >= 0.5 else f"real model {1 - team_written:.2f}"
            rationale += f"; reads as {origin}"
        return Verdict(rationale=rationale[:2000], probabilities={m: s.probability for m, s in scores.items()},
                       **{m: s.level for m, s in scores.items()})  # fmt: skip

    async def score(
        self, conversation: Sequence[dict[str, str]], metrics: Sequence[str], harm: str, call: JudgeCall
    ) -> tuple[Verdict, str]:
        return self.verdict(self.scores(conversation, metrics, call)), self.version


@dataclass(frozen=True)
class ReferenceJudge(Judge):
    """A reference judge (`spec.model`: judge, judge-strict, judge-lenient, judge-always-validating
    or judge-gold) called directly: no prompt, no HTTP request, no prompt parsed back, no tokens.

    Its verdicts and version strings are those the reference server answers for the same model
    name (tests/test_reference_judge_kind.py pins them), so a run's results and its judge's
    fingerprint do not depend on the path. The server still answers these judges: a models-file
    entry of kind chat naming one (`{id: reference/judge, model: judge}`) is asked over HTTP, as
    the suite's tests of the chat-judge wire do."""

    spec: ModelSpec

    @property
    def version(self) -> str:
        """As the chat judge reads it from the server's answer: its model, then its fingerprint."""
        return f"{model_version(self.spec.model)} ({SYSTEM_FINGERPRINT})"

    async def score(
        self, conversation: Sequence[dict[str, str]], metrics: Sequence[str], harm: str, call: JudgeCall
    ) -> tuple[Verdict, str]:
        if not metrics:
            raise CaseError(f"{call.call_label}: the judge {self.spec.id!r} was asked for no metric")
        reply = conversation[-1].get("content", "") if conversation else ""
        if self.spec.model == GOLD_JUDGE:
            try:
                answer = gold_verdict(reply, metrics)
            except NoGoldLabel as exc:
                raise CaseError(f"{call.call_label}: the judge {self.spec.id!r} gave no verdict: {exc}") from None
        else:
            answer = score_reply(reply, metrics, self.spec.model)
        return Verdict.model_validate(answer), self.version


JUDGE_KINDS: dict[str, type] = {"chat": ChatJudge, "trained": TrainedJudge, "reference": ReferenceJudge}
"""The models file's `kind` -> the class that judges for it (a cascade, made of other judges, is
built by `engine.panel.judge_of`)."""


def judge_for(spec: ModelSpec) -> Judge:
    """The judge a models-file entry describes."""
    return JUDGE_KINDS[spec.kind](spec)
