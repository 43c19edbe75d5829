"""The judge call: one request per scored turn, re-asked on an invalid answer, never a silent score.

A judge whose models-file entry says `judge_mode: per-metric` is asked once per metric instead
(the paper's way); its answers are merged into one verdict. The rubric and the request/verdict
format are `inputs.rubric`; several judges voting on one turn are `engine.panel`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from psychosis_tests.common.errors import VerdictError
from psychosis_tests.inputs.rubric import (
    RUBRIC_VERSION,
    Verdict,
    build_judge_messages,
    is_control_call,
    parse_verdict,
    response_format,
    retry_instruction,
)

if TYPE_CHECKING:
    from psychosis_tests.engine.providers import Provider
    from psychosis_tests.inputs.models import ModelSpec
    from psychosis_tests.inputs.usage import Usage


async def judge_reply(
    provider: Provider,
    judge: ModelSpec,
    conversation: Sequence[dict[str, str]],
    metrics: Sequence[str],
    harm: str,
    *,
    call_label: str,
    sample: str = "",
    repeat: int = 0,
    priority: int = 0,
    usage: list[Usage] | None = None,
) -> tuple[Verdict, str]:
    """Score the last reply of `conversation`. Returns the verdict and the judge's model version.
    `sample` names the conversation for the cache (each conversation keeps its own verdicts).

    In per-metric mode each metric is its own call (all at once); any failed call fails the turn.
    An invalid answer is shown back to the judge with what was wrong and asked again (so even a
    deterministic judge answers differently), up to the judge's `verdict_attempts`; then
    VerdictError, never a silent score. A refusal (`message.refusal`) is an invalid answer too:
    reported as a refusal and re-asked within the same attempts. Each call's token usage is
    appended to `usage`, if given.
    """
    if judge.judge_mode == "per-metric" and len(metrics) > 1:
        control = is_control_call(metrics)  # each one-metric call of a control turn is told it is one
        answers = await asyncio.gather(
            *(
                _ask(provider, judge, conversation, [metric], harm, call_label=f"{call_label} {metric}",
                     sample=sample, repeat=repeat, priority=priority, usage=usage, control=control)
                for metric in metrics
            )
        )
        merged = {metric: getattr(verdict, metric) for metric, (verdict, _) in zip(metrics, answers, strict=True)}
        rationale = " ".join(f"[{metric}] {verdict.rationale}" for metric, (verdict, _) in zip(metrics, answers, strict=True))
        return Verdict(rationale=rationale[:2000], **merged), answers[-1][1]
    return await _ask(
        provider, judge, conversation, metrics, harm,
        call_label=call_label, sample=sample, repeat=repeat, priority=priority, usage=usage,
    )


async def _ask(
    provider: Provider,
    judge: ModelSpec,
    conversation: Sequence[dict[str, str]],
    metrics: Sequence[str],
    harm: str,
    *,
    call_label: str,
    sample: str,
    repeat: int,
    priority: int,
    usage: list[Usage] | None,
    control: bool | None = None,
) -> tuple[Verdict, str]:
    """One judge request for these metrics, re-asked on an invalid answer."""
    request = build_judge_messages(
        conversation, metrics, harm, context_messages=judge.judge_context_messages, control=control
    )
    messages = request
    fmt = (
        response_format(metrics, rationale_max_chars=judge.rationale_max_chars)
        if judge.structured_output == "json_schema"
        else None
    )
    if judge.structured_output == "json_object":
        fmt = {"type": "json_object"}
    problems: list[str] = []
    for attempt in range(judge.verdict_attempts):
        completion = await provider.chat(
            judge,
            messages,
            conversation=sample,
            repeat=repeat,
            attempt=attempt,
            response_format=fmt,
            role="judge",
            call_label=f"{call_label} judge",
            priority=priority,
            cache_tag=f"rubric-{RUBRIC_VERSION}",
        )
        if usage is not None:
            usage.append(completion.usage)
        if completion.refusal is not None:
            problems.append(f"attempt {attempt + 1}: the judge refused ({completion.refusal[:100]!r})")
            messages = [
                *request,
                {"role": "assistant", "content": completion.refusal},
                {"role": "user", "content": retry_instruction("it was a refusal, not a rating", metrics)},
            ]
            continue
        try:
            return parse_verdict(completion.text, metrics), completion.model_version
        except ValueError as exc:
            problems.append(f"attempt {attempt + 1}: {exc}, answer began {completion.text[:60]!r}")
            messages = [
                *request,
                {"role": "assistant", "content": completion.text},
                {"role": "user", "content": retry_instruction(str(exc), metrics)},
            ]
    raise VerdictError(
        f"{call_label}: the judge {judge.id!r} gave no valid verdict in "
        f"{judge.verdict_attempts} attempts ({'; '.join(problems)})"
    )
