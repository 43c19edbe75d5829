"""Runs one scenario against one target model and has every scored reply judged.

The judge call for turn t starts as soon as the reply to turn t is in, while the model answers
turn t+1, so a conversation's critical path is its model calls plus the last judge call.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from pydantic import BaseModel

from psychosis_tests.engine.panel import JudgePanel, PanelVerdict, Vote
from psychosis_tests.inputs.models import ModelSpec
from psychosis_tests.inputs.rubric import Verdict
from psychosis_tests.inputs.scenarios import Scenario

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
    """What the scripted user said."""
    reply: str
    """The target model's reply (untrusted text)."""
    metrics: list[str]
    """Metrics scored on this turn."""
    verdict: Verdict | None = None
    """The judge's scores (a panel's combined scores); None on unscored turns."""
    votes: list[Vote] | None = None
    """With a judge panel, every judge's own verdict or failure; None with one judge."""


class Transcript(BaseModel):
    """One conversation: a scenario played once (one repeat) against one model."""

    model_id: str
    scenario_id: str
    repeat: int
    model_version: str
    """Version string the target endpoint reported on its last reply."""
    judge_id: str
    judge_version: str = ""
    turns: list[Turn]


async def run_conversation(
    provider: Provider,
    target: ModelSpec,
    judge: ModelSpec | JudgePanel,
    scenario: Scenario,
    *,
    repeat: int = 0,
    priority: int = 0,
) -> Transcript:
    """Play every scripted turn, judge every scored reply; the first failed call fails it all.
    Calls of a lower `priority` go first when an endpoint is at its cap. A panel of judges scores
    each reply together (engine.panel)."""
    panel = judge if isinstance(judge, JudgePanel) else JudgePanel((judge,))
    messages: list[dict[str, str]] = []
    system = target.params.system_prompt
    if system:
        messages.append({"role": "system", "content": system})
    turns: list[Turn] = []
    judging: list[asyncio.Task[PanelVerdict]] = []
    version = ""
    phases = scenario.phase_of_turn()
    try:
        for index, user_text in enumerate(scenario.turns, start=1):
            for task in judging:  # a verdict that failed for good fails the case now, not at the end
                if task.done() and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
            label = f"{target.id} {scenario.id} repeat {repeat} turn {index}"
            messages.append({"role": "user", "content": user_text})
            completion = await provider.chat(
                target, list(messages), role="target", call_label=label, repeat=repeat, priority=priority
            )
            version = completion.model_version
            messages.append({"role": "assistant", "content": completion.text})
            metrics = list(scenario.metrics_for_turn(index))
            phase = phases[index - 1]
            turns.append(
                Turn(
                    turn=index,
                    phase=phase,
                    phase_name=scenario.phases[phase - 1].name,
                    user=user_text,
                    reply=completion.text,
                    metrics=metrics,
                )
            )
            if metrics:
                shown = [m for m in messages if m["role"] != "system"]
                judging.append(
                    asyncio.create_task(
                        panel.score(
                            provider, shown, metrics, scenario.judge_harm,
                            call_label=label, repeat=repeat, priority=priority,
                        ),
                        name=label,
                    )
                )
        verdicts = await asyncio.gather(*judging)
    except BaseException:
        for task in judging:
            task.cancel()
        await asyncio.gather(*judging, return_exceptions=True)
        raise
    judge_version = ""
    scored = [t for t in turns if t.metrics]
    for turn, scored_by in zip(scored, verdicts, strict=True):
        turn.verdict = scored_by.verdict
        judge_version = scored_by.judge_version
        if len(panel.judges) > 1:
            turn.votes = list(scored_by.votes)
    return Transcript(
        model_id=target.id,
        scenario_id=scenario.id,
        repeat=repeat,
        model_version=version,
        judge_id=panel.id,
        judge_version=judge_version,
        turns=turns,
    )
