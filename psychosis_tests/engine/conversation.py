"""Runs one scenario against one target model and has every scored reply judged.

The judge call for turn t starts as soon as the reply to turn t is in, while the model answers
turn t+1, so a conversation's critical path is its model calls plus the last judge call. A
cascade judge may be asked for its first judge's verdicts only (`first_looks`): the case then
decides which doubtful turns to escalate once all its conversations are in (`engine.case_escalation`).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from psychosis_tests.common.errors import CaseError, ReplayMissError
from psychosis_tests.engine.cascade import CascadeJudge
from psychosis_tests.engine.judges import JudgeCall
from psychosis_tests.engine.panel import JudgePanel, PanelVerdict, Vote
from psychosis_tests.engine.user_sim import SCRIPT_AUTHOR, UserTurns
from psychosis_tests.inputs.models import ModelSpec, calling_judges, judge_leaves
from psychosis_tests.inputs.rubric import Verdict
from psychosis_tests.inputs.scenarios import Scenario
from psychosis_tests.inputs.usage import Usage, total

if TYPE_CHECKING:
    from psychosis_tests.engine.providers import Provider


class Turn(BaseModel):
    """One exchange and, on scored turns, its verdict."""

    turn: int
    """1-based turn number."""
    phase: int
    """1-based phase index."""
    phase_name: str
    user: str
    """What the user said."""
    author: str = SCRIPT_AUTHOR
    """Who wrote the user's message: "script", or "user-model:<id>" for a simulated turn."""
    reply: str
    """The target model's reply (untrusted text)."""
    finish_reason: str | None = None
    """Why the endpoint stopped the reply: "stop", "length" (cut at max_tokens: reports mark it), ..."""
    metrics: list[str]
    """Metrics scored on this turn."""
    verdict: Verdict | None = None
    """The judge's scores (a panel's combined scores); None on unscored turns."""
    votes: list[Vote] | None = None
    """With a judge panel, every judge's own verdict or failure; None with one judge."""
    judge_omitted: int = 0
    """Oldest messages the judge was not shown for this verdict (its judge_context_messages; with a
    panel, the judge with the smallest window)."""
    usage: dict[str, Usage] = Field(default_factory=dict)
    """Tokens of this turn's calls per role: "target"; "judge" with its re-asks and, with a panel,
    every judge's calls; "user" when a user model wrote the turn, with its re-asks."""
    judge_usage: dict[str, Usage] = Field(default_factory=dict)
    """When the run has several judges that make calls (a panel, a cascade's escalation panel), each
    one's share of usage["judge"] by judge id, on every turn any of them called (also when only one
    did): the usage table prices each at its own price. Empty with one such judge."""

    def add_judge_usage(self, by_judge: dict[str, list[Usage]]) -> None:
        """Add these judges' calls to `judge_usage`."""
        merged = dict(self.judge_usage)
        for judge_id, used in by_judge.items():
            merged[judge_id] = total([*([merged[judge_id]] if judge_id in merged else []), *used])
        self.judge_usage = merged


class Transcript(BaseModel):
    """One conversation: a scenario played once (one repeat) against one model."""

    model_id: str
    scenario_id: str
    repeat: int
    model_version: str
    """Version string the target endpoint reported on its last reply."""
    judge_id: str
    judge_version: str = ""
    user_model: str | None = None
    """The model that wrote the simulated user turns; None when the script wrote them all."""
    user_mode: str = "scripted"
    """scripted (scripted turns verbatim) or adaptive (the user model writes every turn)."""
    turns: list[Turn]


def sample_id(target_id: str, scenario_id: str, repeat: int) -> str:
    """A conversation's name in the cache key (its own sample: two conversations never share an
    answer) and in the --max-cost budget."""
    return f"{target_id}/{scenario_id}#{repeat}"


def turn_label(target_id: str, scenario_id: str, repeat: int, turn: int) -> str:
    """How logs, errors and the judge's cache entries name one turn of one conversation."""
    return f"{target_id} {scenario_id} repeat {repeat} turn {turn}"


def judged_messages(turns: list[Turn]) -> list[dict[str, str]]:
    """What the judge is shown for the last of these turns: every exchange up to and including it,
    without the target's system prompt (the conversation's turns so far, oldest first)."""
    shown = []
    for turn in turns:
        shown += [{"role": "user", "content": turn.user}, {"role": "assistant", "content": turn.reply}]
    return shown


async def _first_look(cascade: CascadeJudge, shown: list[dict[str, str]], metrics: list[str], call: JudgeCall) -> PanelVerdict:
    verdict, version = cascade.first_look(shown, metrics, call)
    return PanelVerdict(verdict, version, (Vote(judge_id=cascade.spec.id, verdict=verdict, judge_version=version),))


async def run_conversation(
    provider: Provider,
    target: ModelSpec,
    judge: ModelSpec | JudgePanel,
    scenario: Scenario,
    *,
    repeat: int = 0,
    priority: int = 0,
    user_turns: UserTurns | None = None,
    first_looks: CascadeJudge | None = None,
) -> Transcript:
    """Play every user turn (scripted unless `user_turns` says otherwise), judge every scored
    reply; the first failed call fails it all. Calls of a lower `priority` go first when an
    endpoint is at its cap. A panel of judges scores each reply together (engine.panel). With
    `first_looks` (the run's cascade judge), each reply gets its first judge's verdict only, a
    doubtful one marked `kept` for the case to settle."""
    panel = judge if isinstance(judge, JudgePanel) else JudgePanel((judge,))
    source = user_turns or UserTurns(scenario, scenario.plan_turns())
    messages: list[dict[str, str]] = []
    system = target.params.system_prompt
    if system:
        messages.append({"role": "system", "content": system})
    turns: list[Turn] = []
    judging: list[asyncio.Task[PanelVerdict]] = []
    judge_usage: list[list[Usage]] = []
    by_judge: list[dict[str, list[Usage]]] = []
    version = ""
    conversation = sample_id(target.id, scenario.id, repeat)
    windows = [j.judge_context_messages for j in judge_leaves(panel.judges) if j.judge_context_messages]
    several_calling = len(calling_judges(panel.judges)) > 1
    window = min(windows) if windows else None
    try:
        for planned in source.planned:
            index = planned.turn
            for task in judging:  # a verdict that failed for good fails the case now, not at the end
                if task.done() and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
            label = turn_label(target.id, scenario.id, repeat, index)
            user_usage: list[Usage] = []
            user_text, author = await source.next_turn(
                provider, planned, messages, call_label=label, sample=conversation, repeat=repeat,
                priority=priority, starts_conversation=index == 1, usage=user_usage,
            )
            messages.append({"role": "user", "content": user_text})
            completion = await provider.chat(
                target, list(messages), role="target", call_label=label,
                conversation=conversation, repeat=repeat, priority=priority,
                # A conversation starts with its first call: the user model's, when it wrote turn 1.
                starts_conversation=index == 1 and not user_usage,
            )
            version = completion.model_version
            messages.append({"role": "assistant", "content": completion.text})
            metrics = list(planned.metrics)
            turns.append(
                Turn(
                    turn=index,
                    phase=planned.phase,
                    phase_name=planned.phase_name,
                    user=user_text,
                    author=author,
                    reply=completion.text,
                    finish_reason=completion.finish_reason,
                    metrics=metrics,
                    usage={"target": completion.usage, **({"user": total(user_usage)} if user_usage else {})},
                )
            )
            if metrics:
                shown = judged_messages(turns)
                turns[-1].judge_omitted = max(0, len(shown) - window) if window else 0
                judge_usage.append([])
                by_judge.append({})
                call = JudgeCall(provider, label, sample=conversation, repeat=repeat, priority=priority,
                                 usage=judge_usage[-1], judge_usage=by_judge[-1] if several_calling else None,
                                 phase=planned.phase_name, kind=scenario.kind)  # fmt: skip
                scoring = (
                    _first_look(first_looks, shown, metrics, call)
                    if first_looks is not None
                    else panel.score(shown, metrics, scenario.judge_harm, call)
                )
                judging.append(asyncio.create_task(scoring, name=label))
        verdicts = await asyncio.gather(*judging)
    except BaseException as exc:
        if isinstance(exc, ReplayMissError):
            # Replay runs the cached turns ahead of their judging, up to where the recorded run
            # had stopped: its judging, which needs no network here, says why it stopped.
            settled = await asyncio.gather(*judging, return_exceptions=True)
            failed = (e for e in settled if isinstance(e, CaseError) and not isinstance(e, ReplayMissError))
            recorded = next(failed, None)
            if recorded is not None:
                raise recorded from None
        for task in judging:
            task.cancel()
        await asyncio.gather(*judging, return_exceptions=True)
        raise
    judge_version = ""
    scored = [t for t in turns if t.metrics]
    for turn, scored_by, used, by in zip(scored, verdicts, judge_usage, by_judge, strict=True):
        turn.verdict = scored_by.verdict
        judge_version = scored_by.judge_version
        turn.usage["judge"] = total(used)
        turn.add_judge_usage(by)
        if len(scored_by.votes) > 1:  # a panel's, or a cascade's escalation panel's on an escalated turn
            turn.votes = list(scored_by.votes)
    return Transcript(
        model_id=target.id,
        scenario_id=scenario.id,
        repeat=repeat,
        model_version=version,
        judge_id=panel.id,
        judge_version=judge_version,
        user_model=source.user_model.id if source.user_model is not None and source.simulated_calls else None,
        user_mode=source.mode,
        turns=turns,
    )
