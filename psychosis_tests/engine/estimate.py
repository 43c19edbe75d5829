"""`--estimate`: the calls, tokens and cost a run will need, worked out without calling anything.

Per conversation the plan is the run's own: the user turns of `--turns` (Scenario.plan_turns), the
user model (`--user-model`) writing each turn the script does not give verbatim (every turn in
adaptive mode), the target answering every turn and the judge scoring every judged turn of that
plan once (re-asks after an unusable user turn or an invalid verdict are not foreseen). The
prompts are built as the run builds them, from the scenario's user turns and, in place of the text
not yet written, placeholders of the expected length: a reply or verdict as long as
`expected_reply_tokens` on the model's entry, else its `max_tokens` for that role, else 300 tokens
for a target's reply and 100 for a verdict; a simulated user turn as long as the user model's
`expected_reply_tokens`, else the scripted line it stands in for or leads toward. Text is
counted in whitespace-separated words, as the reference server counts tokens, and for other
endpoints converted at TOKENS_PER_WORD (English text in common BPE vocabularies), a prompt with
its chat format's tokens added (`_prompt_tokens`). The judge and
the user model read the whole conversation on every call, so their prompt tokens grow with the
square of the conversation's length. A cascade's escalation judges are counted on its expected
share of the judged turns (`Plan.escalation`: set on its entry, else measured by its newest run or
its calibration), a judge of the panel at most once a turn (`Plan.judge_shares`).
"""

from __future__ import annotations

from dataclasses import dataclass

from psychosis_tests.engine.plan import CaseKey, Plan, is_embedded_toy
from psychosis_tests.engine.user_sim import UserTurns
from psychosis_tests.inputs.models import ModelSpec
from psychosis_tests.inputs.rubric import build_judge_messages, is_control_call
from psychosis_tests.inputs.scenarios import PlannedTurn
from psychosis_tests.inputs.usage import ROLES, Usage, cost
from psychosis_tests.inputs.user_prompt import build_user_messages

TOKENS_PER_WORD = 1.33
"""Tokens per English word on hosted endpoints (about 0.75 words per token)."""
DEFAULT_REPLY_TOKENS = {"target": 300, "judge": 100}
MESSAGE_FORMAT_TOKENS = 5
"""Tokens a chat template puts around each message of a prompt (ChatML's `<|im_start|>role\\n`
and `<|im_end|>\\n`, as the embedded model counts them; hosted formats add a few alike)."""
REPLY_FORMAT_TOKENS = 4
"""Tokens that open the reply at a prompt's end (ChatML's `<|im_start|>assistant\\n`)."""
SMOLLM2_SYSTEM_TOKENS = 21
"""The system message SmolLM2's template puts in a prompt that has none ("You are a helpful AI
assistant named SmolLM, ..."): the embedded model counts it in every such call."""


@dataclass(frozen=True)
class EstimateRow:
    model: str
    role: str
    usage: Usage
    cost_usd: float | None


def _per_word(spec: ModelSpec) -> float:
    return 1.0 if spec.served_by_suite == "reference" else TOKENS_PER_WORD


def _reply_tokens(spec: ModelSpec, role: str) -> int:
    if spec.expected_reply_tokens is not None:
        return spec.expected_reply_tokens
    return spec.params_for(role).max_tokens or DEFAULT_REPLY_TOKENS[role]  # type: ignore[arg-type]


def _tokens(messages: list[dict[str, str]], spec: ModelSpec) -> int:
    return round(sum(len(m["content"].split()) for m in messages) * _per_word(spec))


def _prompt_tokens(messages: list[dict[str, str]], spec: ModelSpec) -> int:
    """A prompt's tokens as the endpoint counts them: its text and, but on the reference server
    (which counts the messages' words alone), its chat format: without it the embedded model's
    prompts were estimated 10% low (conduit-explicit: 7,845 tokens where a run counted 8,688)."""
    if spec.served_by_suite == "reference":
        return _tokens(messages, spec)
    framing = MESSAGE_FORMAT_TOKENS * len(messages) + REPLY_FORMAT_TOKENS
    if is_embedded_toy(spec) and not any(m["role"] == "system" for m in messages):
        framing += SMOLLM2_SYSTEM_TOKENS
    return _tokens(messages, spec) + framing


def _placeholder(spec: ModelSpec, tokens: int) -> str:
    """Text of about `tokens` tokens as `spec` counts them."""
    return " ".join(["word"] * max(1, round(tokens / _per_word(spec))))


def _simulated_turn(user: ModelSpec, planned: PlannedTurn) -> str:
    """The expected text of a turn the user model writes: its expected_reply_tokens, else the
    scripted line the turn plays (adaptive mode) or leads toward."""
    if user.expected_reply_tokens is not None:
        return _placeholder(user, user.expected_reply_tokens)
    return planned.anchor if planned.anchor is not None else planned.next_anchor


def conversation_usage(plan: Plan, key: CaseKey) -> dict[tuple[str, str], Usage]:
    """Expected usage of one conversation of this case, per (model, role): the user model (one
    call per turn it writes), the target (one per turn of `--turns`), and each judge of the panel
    (one per judged turn, or one per metric in per-metric mode; a cascade's escalation judges on
    their share of them, rounded)."""
    return {role: used.share(share) for role, (used, share) in _planned_usage(plan, key).items()}


def _planned_usage(plan: Plan, key: CaseKey) -> dict[tuple[str, str], tuple[Usage, float]]:
    """`conversation_usage` before the shares: each (model, role)'s usage were it called on every
    turn it may be, with the share of it expected (1, or a cascade's escalation rate)."""
    target = next(t for t in plan.targets if t.id == key.model_id)
    scenario = plan.scenarios[key.scenario_id]
    source = UserTurns.for_case(
        scenario, target_id=target.id, turns=plan.settings.turns, user_model=plan.user_model,
        mode=plan.settings.user_mode,
    )
    user = source.user_model
    placeholder = _placeholder(target, _reply_tokens(target, "target"))
    messages: list[dict[str, str]] = []
    if target.params.system_prompt:
        messages.append({"role": "system", "content": target.params.system_prompt})
    callers = _judge_callers(plan)
    judged = {judge_id: Usage() for judge_id in callers}
    used = {(target.id, "target"): Usage()}
    for planned in source.planned:
        if source.scripted(planned) or user is None:
            user_text = planned.anchor or ""  # a turn nobody writes stops the run before this (Plan.load)
        else:
            request = build_user_messages(
                scenario, planned, len(source.planned), messages, context_messages=user.user_context_messages
            )
            user_text = _simulated_turn(user, planned)
            used[(user.id, "user")] = used.get((user.id, "user"), Usage()) + Usage(
                calls=1, prompt_tokens=_prompt_tokens(request, user), completion_tokens=_tokens([{"content": user_text}], user)
            )
        messages.append({"role": "user", "content": user_text})
        used[(target.id, "target")] += Usage(
            calls=1, prompt_tokens=_prompt_tokens(messages, target), completion_tokens=_reply_tokens(target, "target")
        )
        messages.append({"role": "assistant", "content": placeholder})
        metrics = planned.metrics
        if not metrics:
            continue
        shown = [m for m in messages if m["role"] != "system"]
        for judge, share in callers.values():
            if not share:
                continue  # in-process, or a cascade's first judge: no call
            asks = [[m] for m in metrics] if judge.judge_mode == "per-metric" else [list(metrics)]
            for asked in asks:
                request = build_judge_messages(  # as engine.judge asks: each call of a control turn says it is one
                    shown, asked, scenario.judge_harm, context_messages=judge.judge_context_messages,
                    control=is_control_call(metrics),
                )
                judged[judge.id] += Usage(
                    calls=1, prompt_tokens=_prompt_tokens(request, judge), completion_tokens=_reply_tokens(judge, "judge")
                )
    planned = {role: (usage, 1.0) for role, usage in used.items()}
    planned.update({(judge_id, "judge"): (judged[judge_id], share) for judge_id, (_, share) in callers.items()})
    return planned


def _judge_callers(plan: Plan) -> dict[str, tuple[ModelSpec, float]]:
    """Every judge that scores, by id, with the share of judged turns it is called on: 1 for a
    judge of the panel, a cascade's expected escalation rate for its escalation judges (at most 1
    in all: `Plan.judge_shares`), 0 for an in-process judge (no call, no tokens, no cost: listed
    with nothing)."""
    return {j: (part, 0.0 if part.in_process else share) for j, (part, share) in plan.judge_shares().items()}


def _specs(plan: Plan) -> dict[tuple[str, str], ModelSpec]:
    """The plan's models by (id, role)."""
    specs = {(s.id, "target"): s for s in plan.targets} | {(j, "judge"): spec for j, (spec, _) in _judge_callers(plan).items()}
    if plan.user_model is not None:
        specs[(plan.user_model.id, "user")] = plan.user_model
    return specs


def conversation_cost(plan: Plan, key: CaseKey) -> float:
    """Expected dollars of one conversation of this case on its priced models (--max-cost commits
    it while the conversation runs); 0 when none of them is priced."""
    specs = _specs(plan)
    return sum(
        cost(used, price) for role, used in conversation_usage(plan, key).items() if (price := specs[role].call_price)
    )


def estimate(plan: Plan, keys: list[CaseKey]) -> list[EstimateRow]:
    """Expected usage and cost per (model, role) of running these cases with the plan's repeats.
    Calls are summed unrounded and rounded once: a cascade's 5% of one conversation's 9 judged
    turns rounds to 0 calls, of 32 conversations' 288 to 14 (tokens, hundreds a conversation, are
    rounded per conversation, as --max-cost reckons them)."""
    totals: dict[tuple[str, str], Usage] = {}
    calls: dict[tuple[str, str], float] = {}
    for key in keys:
        for role, (used, share) in _planned_usage(plan, key).items():
            totals[role] = totals.get(role, Usage()) + used.share(share)
            calls[role] = calls.get(role, 0.0) + used.calls * share
    repeats = plan.settings.repeats
    totals = {
        role: used.share(repeats).model_copy(update={"calls": round(calls[role] * repeats)})
        for role, used in totals.items()
    }
    specs = _specs(plan)
    return [
        EstimateRow(model, role, used, cost(used, price) if (price := specs[(model, role)].call_price) else None)
        for (model, role), used in sorted(totals.items(), key=lambda kv: (kv[0][0], ROLES.index(kv[0][1])))
    ]


def estimate_lines(plan: Plan, keys: list[CaseKey]) -> list[str]:
    """What --estimate prints."""
    rows = estimate(plan, keys)
    conversations = len(keys) * plan.settings.repeats
    settings = plan.settings
    lines = [
        f"psychosis-bench estimate: {len(keys)} case(s), {conversations} conversation(s), no model called",
        f"user turns: {f'{settings.turns} per conversation' if settings.turns else 'as scripted'}"
        + (f", written by {plan.user_model.id} ({settings.user_mode} mode)" if plan.user_model else ""),
    ]
    for judge in plan.panel.judges:
        _, *escalation = plan.judge_parts(judge)
        if escalation:  # a cascade
            rate, source = plan.escalation(judge)
            to = "+".join(part.id for part, _ in escalation)
            lines.append(f"cascade {judge.id}: {rate:.0%} of judged turns escalated to {to} ({source})")
    lines.append(f"{'model':<28} {'role':<7} {'calls':>7} {'prompt tokens':>14} {'completion':>11} {'cost':>10}")
    for row in rows:
        money = "-" if row.cost_usd is None else f"${row.cost_usd:.4f}"
        lines.append(
            f"{row.model:<28} {row.role:<7} {row.usage.calls:>7} {row.usage.prompt_tokens:>14} "
            f"{row.usage.completion_tokens:>11} {money:>10}"
        )
    calls = sum(r.usage.calls for r in rows)
    tokens = sum(r.usage.total_tokens for r in rows)
    priced = [r.cost_usd for r in rows if r.cost_usd is not None]
    unpriced = sorted({r.model for r in rows if r.cost_usd is None and r.usage.calls})  # in-process: no call to price
    total_line = f"total: {calls} calls, {tokens} tokens"
    if priced:
        total_line += f", ${sum(priced):.4f}"
    if unpriced:
        total_line += f" (no price for {', '.join(unpriced)})"
    return [*lines, total_line]
