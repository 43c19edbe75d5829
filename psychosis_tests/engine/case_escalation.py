"""A cascade escalates only the doubtful turns whose scores could change their case's pass or fail.

The conversations of a case are first judged by the cascade's first judge alone
(`run_conversation(first_looks=...)`). Then, with every verdict of the case in hand, each doubtful
score (below its metric's threshold) is left free to take any level, and the case's own gate is
asked what it would say:

- with every free score at its best level and at its worst: when both give the same pass or fail,
  no free score can change the outcome, and none is escalated;
- otherwise, for each phase metric that holds free scores, with every other free score at its best
  (so that no other phase metric breaks unless it breaks whatever the free scores are): when its
  own free scores at best and at worst give different outcomes, its doubtful turns are escalated.

The gate breaks a case when any phase metric breaks its limit, each phase metric's mean moves
one way with each of its scores, and phase metrics do not share scores: so this finds exactly
the turns whose scores can still decide the case. That reasoning holds for `gate: mean` and
phase limits only, so with trajectory limits or `gate: bound` over repeats the cascade escalates
every doubtful turn as it comes (`Plan.case_by_case` is false). A doubtful turn that is not escalated keeps
its first judge's verdict and says why in `Verdict.kept`.

A --baseline does not change which turns are escalated. The baseline run chose its escalations by
its gate alone, so a run that also escalated for the regression check would score the same
replies by another rule than its baseline did and find regressions in identical replies. The
regression check therefore compares cascade verdicts chosen alike on both sides, kept doubtful
ones included (docs/judge-validity.md, "Judge cascades").
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from psychosis_tests.engine.cascade import CascadeJudge
from psychosis_tests.engine.conversation import Transcript, Turn, judged_messages, sample_id, turn_label
from psychosis_tests.engine.judges import JudgeCall
from psychosis_tests.engine.plan import Plan
from psychosis_tests.inputs.models import calling_judges
from psychosis_tests.inputs.method import METRIC_SPEC, scope
from psychosis_tests.inputs.scenarios import Scenario
from psychosis_tests.inputs.rubric import Verdict
from psychosis_tests.inputs.usage import total

if TYPE_CHECKING:
    from psychosis_tests.engine.providers import Provider

Passes = Callable[[list[Transcript]], bool]
"""The case's gate without the regression check: whether the case keeps its thresholds when its
conversations have these verdicts."""

NOT_DECISIVE = "not escalated: no level these scores could take changes the case's pass or fail"

Free = dict[tuple[int, int], list[str]]
"""(repeat, turn) -> the metrics of that turn whose first-judge score is doubtful."""


def case_cascade(plan: Plan) -> CascadeJudge | None:
    """The run's judge when it is one cascade whose turns are settled case by case (`Plan.case_by_case`)."""
    scorers = plan.panel.scorers
    if len(scorers) != 1 or not isinstance(scorers[0], CascadeJudge) or not plan.case_by_case:
        return None
    return scorers[0]


def decisive(transcripts: list[Transcript], free: Free, kind: str, passes: Passes) -> set[tuple[int, int]]:
    """The doubtful turns whose scores could still decide the case (see the module's docstring)."""

    def with_levels(chosen: Free, worst: bool) -> list[Transcript]:
        return [_with_levels(t, chosen, kind, worst) for t in transcripts]

    if passes(with_levels(free, worst=False)) == passes(with_levels(free, worst=True)):
        return set()
    cells: dict[tuple[str, str], Free] = {}
    phase_of = {(t.repeat, turn.turn): turn.phase_name for t in transcripts for turn in t.turns}
    for key, metrics in free.items():
        for metric in metrics:
            cells.setdefault((metric, phase_of[key]), {}).setdefault(key, []).append(metric)
    found: set[tuple[int, int]] = set()
    for cell in cells.values():
        if cell.keys() <= found:
            continue
        others = {key: [m for m in metrics if m not in cell.get(key, [])] for key, metrics in free.items()}
        at_best = with_levels(others, worst=False)
        mixed = [_with_levels(t, cell, kind, worst=True) for t in at_best]
        if passes(mixed) != passes([_with_levels(t, cell, kind, worst=False) for t in at_best]):
            found |= cell.keys()
    return found


def _with_levels(transcript: Transcript, chosen: Free, kind: str, worst: bool) -> Transcript:
    """A copy of the transcript with the chosen scores at their best or worst level for the case."""
    turns = []
    for turn in transcript.turns:
        metrics = chosen.get((transcript.repeat, turn.turn))
        if not metrics or turn.verdict is None:
            turns.append(turn)
            continue
        levels = {m: _extreme(m, kind, worst) for m in metrics}
        turns.append(turn.model_copy(update={"verdict": turn.verdict.model_copy(update=levels)}))
    return transcript.model_copy(update={"turns": turns})


def _extreme(metric: str, kind: str, worst: bool) -> int:
    levels = METRIC_SPEC[metric].levels
    direction = scope(metric, kind)
    if direction is None:  # recorded, not gated, on this kind: any level will do
        return levels[0]
    return max(levels) if direction.higher_is_worse == worst else min(levels)


async def settle(
    cascade: CascadeJudge,
    provider: Provider,
    scenario: Scenario,
    transcripts: list[Transcript],
    passes: Passes,
    *,
    priority: int = 0,
) -> None:
    """Escalate the case's decisive doubtful turns and record on the others why their first
    judge's verdicts stand (for runs where `Plan.case_by_case`).

    An escalated turn's new verdict may move its other scores too, so the choice is made again
    with them until no further doubtful turn is decisive."""
    target = transcripts[0].model_id if transcripts else ""
    several_calling = len(calling_judges([cascade.spec])) > 1
    doubtful: dict[tuple[int, int], tuple[Transcript, Turn, list[dict[str, str]], JudgeCall]] = {}
    free: Free = {}
    for transcript in transcripts:
        for position, turn in enumerate(transcript.turns):
            if turn.verdict is None or turn.verdict.kept is None:
                continue
            shown = judged_messages(transcript.turns[: position + 1])
            key = (transcript.repeat, turn.turn)
            call = JudgeCall(
                provider, turn_label(target, scenario.id, transcript.repeat, turn.turn),
                sample=sample_id(target, scenario.id, transcript.repeat), repeat=transcript.repeat,
                priority=priority, usage=[], judge_usage={} if several_calling else None, phase=turn.phase_name,
                kind=scenario.kind,
            )  # fmt: skip
            doubtful[key] = (transcript, turn, shown, call)
            free[key] = cascade.doubtful_metrics(shown, turn.metrics, call)
    while free:
        chosen = sorted(decisive(transcripts, free, scenario.kind, passes))
        if not chosen:
            break
        answers = await asyncio.gather(*(_escalate(cascade, scenario, *doubtful[key][1:]) for key in chosen))
        for key, (verdict, version, votes) in zip(chosen, answers, strict=True):
            transcript, turn, _, call = doubtful[key]
            turn.verdict = verdict
            if votes:  # the escalation panel's votes, failed judges among them
                turn.votes = list(votes)  # type: ignore[arg-type]
            transcript.judge_version = version
            turn.usage["judge"] = total([*([turn.usage["judge"]] if "judge" in turn.usage else []), *call.usage])
            turn.add_judge_usage(call.judge_usage or {})
            del free[key]
    for key in free:
        turn = doubtful[key][1]
        assert turn.verdict is not None
        turn.verdict = turn.verdict.model_copy(update={"kept": f"{turn.verdict.kept}; {NOT_DECISIVE}"})


async def _escalate(
    cascade: CascadeJudge, scenario: Scenario, turn: Turn, shown: list[dict[str, str]], call: JudgeCall
) -> tuple[Verdict, str, tuple[object, ...]]:
    assert turn.verdict is not None and turn.verdict.kept is not None
    return await cascade.escalate(shown, turn.metrics, scenario.judge_harm, call, turn.verdict.kept)
