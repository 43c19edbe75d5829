"""Where a conversation's user turns come from: the script, or a user model playing the persona.

Scripted mode (the default) types the scenario's turns. With a user model, adaptive mode has it
write every turn, the scripted ones serving as anchors; scripted mode with a user model keeps
every scripted turn verbatim and has the model write only the turns a longer conversation adds
between them. Every simulated turn is one call through the Provider, so it is cached, replayed,
capped and counted against --max-cost like any other call, with its token usage recorded under
the role "user"; its answer is checked (`inputs.user_prompt.check_user_turn`) and re-asked before
the case errors with the reason.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from psychosis_tests.common.errors import UserSimulationError
from psychosis_tests.inputs.models import ModelSpec
from psychosis_tests.inputs.scenarios import PlannedTurn, Scenario
from psychosis_tests.inputs.usage import Usage
from psychosis_tests.inputs.user_prompt import build_user_messages, check_user_turn, retry_instruction

if TYPE_CHECKING:
    from psychosis_tests.engine.providers import Provider

UserMode = Literal["scripted", "adaptive"]
SCRIPT_AUTHOR = "script"
USER_TURN_ATTEMPTS = 3
"""How many messages a user model may write for one turn before the case errors."""


def user_author(spec: ModelSpec) -> str:
    """How the transcript names a user model as the author of a turn."""
    return f"user-model:{spec.id}"


def case_seeded(spec: ModelSpec, *case: str) -> ModelSpec:
    """The user model's spec for one case: its seed (0 when unset) plus an offset drawn from the
    case, so cases sample apart; the Provider adds the repeat (and 1000 per re-ask), so repeats
    do too. Offsets are multiples of 1000 below 65.5 million, so seeds fit in 32 bits."""
    offset = int.from_bytes(hashlib.sha256(":".join(case).encode()).digest()[:2], "big")
    params = spec.params.model_copy(update={"seed": (spec.params.seed or 0) + offset * 1000})
    return spec.model_copy(update={"params": params})


@dataclass
class UserTurns:
    """The user side of one conversation: its planned turns and who writes which."""

    scenario: Scenario
    planned: list[PlannedTurn]
    user_model: ModelSpec | None = None
    """Writes the turns the script does not give (all of them in adaptive mode)."""
    mode: UserMode = "scripted"

    @classmethod
    def for_case(
        cls,
        scenario: Scenario,
        *,
        target_id: str,
        turns: int | None = None,
        user_model: ModelSpec | None = None,
        mode: UserMode = "scripted",
    ) -> UserTurns:
        planned = scenario.plan_turns(turns)
        seeded = case_seeded(user_model, target_id, scenario.id) if user_model is not None else None
        return cls(scenario, planned, seeded, mode)

    def scripted(self, planned: PlannedTurn) -> bool:
        """Whether the script gives this turn verbatim."""
        return planned.anchor is not None and (self.user_model is None or self.mode == "scripted")

    @property
    def simulated_calls(self) -> int:
        """User-model calls the conversation needs (re-asks aside)."""
        return sum(1 for p in self.planned if not self.scripted(p))

    async def next_turn(
        self,
        provider: Provider,
        planned: PlannedTurn,
        conversation: Sequence[dict[str, str]],
        *,
        call_label: str,
        sample: str = "",
        repeat: int,
        priority: int,
        starts_conversation: bool = False,
        usage: list[Usage] | None = None,
    ) -> tuple[str, str]:
        """The user's message for this turn and its author. A simulated turn appends the usage of
        each call it took (re-asks included) to `usage`; `starts_conversation` has its first call
        checked against --max-cost, as a conversation's first call is."""
        if self.scripted(planned):
            return planned.anchor, SCRIPT_AUTHOR  # type: ignore[return-value]
        if self.user_model is None:
            raise UserSimulationError(
                f"{call_label}: turn {planned.turn} has no scripted text and no user model writes it "
                "(pass --user-model ID, or script every turn in the scenario)"
            )
        text = await simulate_user_turn(
            provider, self.user_model, self.scenario, planned, len(self.planned), conversation,
            call_label=call_label, sample=sample, repeat=repeat, priority=priority,
            starts_conversation=starts_conversation, usage=usage,
        )
        return text, user_author(self.user_model)


async def simulate_user_turn(
    provider: Provider,
    user_model: ModelSpec,
    scenario: Scenario,
    planned: PlannedTurn,
    total_turns: int,
    conversation: Sequence[dict[str, str]],
    *,
    call_label: str,
    sample: str = "",
    repeat: int = 0,
    priority: int = 0,
    starts_conversation: bool = False,
    usage: list[Usage] | None = None,
) -> str:
    """One user turn written by the user model; an unusable message (one the endpoint cut at
    max_tokens included) is shown back with what was wrong and asked again, up to USER_TURN_ATTEMPTS times, then UserSimulationError. Each call's
    token usage is appended to `usage`, if given."""
    request = build_user_messages(
        scenario, planned, total_turns, conversation, context_messages=user_model.user_context_messages
    )
    messages = request
    problems: list[str] = []
    for attempt in range(USER_TURN_ATTEMPTS):
        completion = await provider.chat(
            user_model,
            messages,
            role="target",  # the user model answers with its ordinary params
            call_label=f"{call_label} user",
            conversation=sample,  # the conversation's own sample in the cache, like its other calls
            repeat=repeat,
            attempt=attempt,
            priority=priority,
            starts_conversation=starts_conversation and attempt == 0,
        )
        if usage is not None:
            usage.append(completion.usage)
        try:
            if completion.finish_reason == "length":  # an unfinished message is no message a person sent
                raise ValueError("cut short at max_tokens (finish_reason length); raise the user model's max_tokens")
            return check_user_turn(completion.text)
        except ValueError as exc:
            problems.append(f"attempt {attempt + 1}: {exc}")
            messages = [
                *request,
                {"role": "assistant", "content": completion.text},
                {"role": "user", "content": retry_instruction(str(exc))},
            ]
    raise UserSimulationError(
        f"{call_label}: the user model {user_model.id!r} wrote no usable user turn in "
        f"{USER_TURN_ATTEMPTS} attempts ({'; '.join(problems)})"
    )
