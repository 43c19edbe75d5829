"""The one wrapper every model call goes through: cache, budget, usage, concurrency caps, retries.

Below it a transport (`engine.transport`; today `engine.chat_completions`) sends one request and
says why an attempt failed and whether asking again can help. The wrapper owns everything else, so
that every fault is counted and named the same way whatever carries the request: a transient fault
is asked again up to each spec's max_retries, after the wait the endpoint asked for (Retry-After,
which holds every call to that endpoint: engine.limits.EndpointHold) or an exponential backoff;
anything else fails at once. Every call is bounded in total by the
spec's deadline. Either way the caller gets a ModelCallError naming the call, the endpoint, the
cause and the attempts made; endpoint text in it is made inert and keys are masked.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

from psychosis_tests.common.errors import ModelCallError, ReplayMissError
from psychosis_tests.engine.budget import Budget
from psychosis_tests.engine.cache import CachedResponse, ResponseCache, cache_key
from psychosis_tests.engine.chat_completions import ChatCompletions
from psychosis_tests.engine.limits import EndpointHold, PriorityLimiter
from psychosis_tests.engine.transport import Request, Transport, TransportError
from psychosis_tests.engine.wire import Reply
from psychosis_tests.inputs.models import ModelSpec
from psychosis_tests.inputs.settings import CacheMode
from psychosis_tests.inputs.usage import Usage, cost

BACKOFF_FIRST = 0.5
BACKOFF_MAX = 8.0
"""Seconds before the first retry, doubling up to this, with jitter, when the endpoint names no wait."""
CLAIM_LEASE = 60.0
CLAIM_RENEW_EVERY = 20.0
"""A claim on a cache key lasts this long unless renewed, and is renewed this often while its call is
queued or on its way: a call that waits long for its slot keeps its claim, and a stopped run's claims
lapse within a minute where its process cannot be looked up (another host)."""
CLAIM_POLL_FIRST = 0.05
CLAIM_POLL_MAX = 1.0
"""Seconds between looks for an answer another run is calling for, growing by half up to this."""


@dataclass
class Completion:
    """One answer, with the model version and token usage the endpoint reported."""

    text: str
    model_version: str
    cached: bool
    refusal: str | None = None
    """The judge's refusal (`message.refusal`) when it declined instead of answering; text is then ""."""
    finish_reason: str | None = None
    """Why the endpoint stopped: "stop", "length" (the reply was cut at max_tokens), ..."""
    usage: Usage = field(default_factory=Usage)
    """This call's usage; a response-cache hit reports the usage it was recorded with, as a hit."""


@dataclass
class CallCounters:
    """Live counts for progress lines."""

    answered: int = 0
    """Calls that reached the endpoint and came back with an answer."""
    cache_hits: int = 0
    errors: int = 0
    retries: int = 0
    """Attempts repeated after a transient fault."""
    waiting: int = 0
    """Calls sleeping right now before their next attempt (Retry-After or backoff)."""
    longest_wait: float = 0.0
    """The longest of those waits, in seconds."""
    by_conversation: Counter[str] = field(default_factory=Counter)
    """Answered calls and cache hits per conversation (`sample_id`): what a case that ended early made."""


@dataclass
class Provider:
    """Calls models on behalf of every conversation of this process, through one transport."""

    cache: ResponseCache | None
    cache_mode: CacheMode = "use"
    transport: Transport = field(default_factory=ChatCompletions)
    """What carries each request (ChatCompletions(base_urls) for the suite's own servers)."""
    builtin_identities: dict[str, str] = field(default_factory=dict)
    """Built-in model id -> what answers it, versions included (the cache key's endpoint part)."""
    counters: CallCounters = field(default_factory=CallCounters)
    budget: Budget = field(default_factory=Budget)
    """--max-cost: the run's spending, and which conversations may still start (engine.budget)."""
    _limits: dict[str, PriorityLimiter] = field(default_factory=dict, init=False)
    _in_flight: dict[str, asyncio.Future[CachedResponse | None]] = field(default_factory=dict, init=False)
    """Cache key -> the answer of the request with that key on its way now (None if it fails)."""
    _holds: dict[str, EndpointHold] = field(default_factory=dict, init=False)

    @property
    def spent(self) -> float:
        """Dollars spent on calls to priced models in this run (response-cache hits cost nothing)."""
        return self.budget.spent

    def _limit(self, spec: ModelSpec) -> PriorityLimiter:
        limit = self._limits.get(spec.id)
        if limit is None:
            limit = PriorityLimiter(self.transport.concurrency(spec))
            self._limits[spec.id] = limit
        return limit

    def _hold(self, spec: ModelSpec) -> EndpointHold | None:
        """The hold of the model's endpoint (its address: models on one base_url share it); none
        for a batched model, whose `send` only queues a line of a batch."""
        if spec.batch:
            return None
        address = self.transport.address(spec)
        hold = self._holds.get(address)
        if hold is None:
            hold = self._holds[address] = EndpointHold()
        return hold

    async def chat(
        self,
        spec: ModelSpec,
        messages: list[dict[str, str]],
        *,
        role: Literal["target", "judge"],
        call_label: str,
        conversation: str = "",
        repeat: int = 0,
        attempt: int = 0,
        response_format: dict | None = None,
        priority: int = 0,
        cache_tag: str = "",
        starts_conversation: bool = False,
    ) -> Completion:
        """One chat completion through the cache; raises ModelCallError or ReplayMissError, and
        BudgetError when --max-cost leaves no room for the conversation (`starts_conversation`
        marks its first call; it is admitted at its first call the cache does not answer).

        A judge's refusal comes back as a Completion with `refusal` set (judge_reply re-asks), and
        is cached like an answer. `cache_tag` goes into the cache key (the rubric version).
        `conversation` names the conversation the call belongs to (target, scenario, repeat): it is
        part of the cache key, so two conversations never share an answer, even where they say the same."""
        if starts_conversation:
            self.budget.begin(conversation)
        params = spec.params_for(role).request_kwargs(repeat, attempt)
        key = cache_key(
            base_url=spec.base_url or self.builtin_identities.get(spec.id, f"builtin:{spec.id}"),
            model=spec.model,
            messages=messages,
            params=params,
            response_format=response_format,
            conversation=conversation,
            repeat=repeat,
            attempt=attempt,
            tag=cache_tag,
        )
        if self.cache is not None and self.cache_mode in ("use", "replay"):
            hit = self.cache.get(key)
            if hit is not None:
                return self._hit(hit, conversation)
        if self.cache_mode == "replay":
            self.counters.errors += 1
            raise ReplayMissError(
                f"{call_label}: no recorded answer from {spec.id!r} in the cache "
                f"(--cache-mode replay never calls the network; record a run with --cache-mode use first)"
            )
        # The same request already on its way in this run (a panel judge that is also a cascade's
        # escalation judge, asked on the same turn): its answer is this call's too, counted as a
        # cache hit. If that request fails, the first call to wake makes its own and the rest wait on it.
        shared = None
        while shared is None and (pending := self._in_flight.get(key)) is not None:
            shared = await asyncio.shield(pending)
        if shared is not None:
            return self._hit(shared, conversation)
        answer = self._in_flight[key] = asyncio.get_running_loop().create_future()  # before any await
        claims = self.cache is not None and self.cache_mode == "use"
        renewing: asyncio.Future | None = None
        try:
            if claims:
                kept = await self._answer_or_claim(key)
                if kept is not None:  # another run on this cache file paid for it
                    answer.set_result(kept)
                    return self._hit(kept, conversation)
                renewing = asyncio.ensure_future(self._keep_claim(key))
            self.budget.admit(conversation, call_label, first_call=starts_conversation)
            extra = {"response_format": response_format} if response_format else {}
            body = {"model": spec.model, "messages": messages, **params, **extra}
            try:
                reply = await self._attempts(Request(spec, body, accept_refusal=role == "judge", key=key), priority, conversation)
            except _Failed as failed:
                self.counters.errors += 1
                message = f"{call_label}: {spec.id!r} at {self.transport.address(spec)} {failed}"
                # Not chained: the endpoint's exception holds its raw text (escape codes, echoed keys).
                raise ModelCallError(message) from None  # made inert and its keys masked as it is made
            response = CachedResponse(reply.text, reply.model_version, reply.refusal, reply.finish_reason, reply.usage)
            answer.set_result(response)
            self.counters.answered += 1
            self.counters.by_conversation[conversation] += 1
            if spec.call_price is not None:
                self.budget.charge(conversation, cost(reply.usage, spec.call_price))
            if self.cache is not None and self.cache_mode != "off":
                self.cache.put(key, response)
        finally:  # answered, failed or cancelled: a call waiting for this answer has it, or calls itself
            if renewing is not None:
                renewing.cancel()
                self.cache.release(key)
            del self._in_flight[key]
            if not answer.done():
                answer.set_result(None)
        return Completion(
            reply.text, reply.model_version, cached=False, refusal=reply.refusal, finish_reason=reply.finish_reason,
            usage=reply.usage,
        )

    def _hit(self, hit: CachedResponse, conversation: str) -> Completion:
        self.counters.cache_hits += 1
        self.counters.by_conversation[conversation] += 1
        recorded = hit.usage if hit.usage is not None else Usage(calls=1, unreported=1)
        return Completion(
            hit.text, hit.model_version, cached=True, refusal=hit.refusal, finish_reason=hit.finish_reason,
            usage=recorded.as_cache_hit(),
        )

    async def _answer_or_claim(self, key: str) -> CachedResponse | None:
        """None once this run holds the key's claim and is to make the call. The answer when another
        run's call for the same request (same key) kept it meanwhile: this run waits for that instead
        of paying for it too, as long as that run's claim stands (renewed while its call is queued or
        on its way). A claim whose call failed is released, and one whose process stopped or whose
        lease ran out is taken over."""
        cache = self.cache
        assert cache is not None
        poll = CLAIM_POLL_FIRST
        while not cache.claim(key, CLAIM_LEASE):
            while (hit := cache.get(key)) is None and cache.claimed(key):
                await asyncio.sleep(poll)
                poll = min(CLAIM_POLL_MAX, poll * 1.5)
            if hit is not None:
                return hit
        return None

    async def _keep_claim(self, key: str) -> None:
        """Renew this run's claim on `key` until cancelled (its call ended)."""
        assert self.cache is not None
        while True:
            await asyncio.sleep(CLAIM_RENEW_EVERY)
            self.cache.renew(key, CLAIM_LEASE)

    async def _attempts(self, request: Request, priority: int, conversation: str) -> Reply:
        """Ask until an answer reads, a fault is not transient, or the retries or deadline run out.
        An answer that could not be used is charged to the conversation: the endpoint billed it."""
        spec = request.spec
        attempts = spec.max_retries + 1
        # The call keeps its slot while it waits to retry: an endpoint that pushes back (429,
        # Retry-After) gets fewer requests, not the same number from calls that had not started,
        # against which each retry would have to win its turn again.
        async with self._limit(spec).slot(priority):
            give_up_at = time.monotonic() + spec.deadline  # from the first attempt: queueing is not the endpoint's
            hold = self._hold(spec)
            fault: TransportError | None = None
            for number in range(1, attempts + 1):
                if hold is not None:
                    await self._held(hold, give_up_at, spec, fault, number - 1)
                if number > 1:
                    self.counters.retries += 1
                now = time.monotonic()
                try:
                    # A timeout scope, not wait_for: no extra task per call.
                    async with asyncio.timeout(max(give_up_at - now, 0.001)):
                        return await self.transport.send(request)
                except asyncio.TimeoutError:
                    where = self.transport.waiting_on(request)
                    raise _Failed(
                        f"gave no answer within the call's {spec.deadline:g} s deadline"
                        f"{f' ({where})' if where else ''} ({_count(number)})"
                    ) from None
                except TransportError as exc:
                    fault = exc
                if fault.usage is not None and spec.call_price is not None:
                    self.budget.charge(conversation, cost(fault.usage, spec.call_price))
                if fault.retryable and fault.wait is not None and hold is not None:
                    hold.refused(fault.wait)  # every call to the endpoint waits (this one in _held), even after its last attempt
                if not fault.retryable:
                    raise _Failed(f"{fault} (not retryable, {_count(number)})") from fault
                if number == attempts:
                    raise _Failed(f"{fault}, after {_count(number)}") from fault
                wait = fault.wait
                if wait is None:
                    wait = min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** (number - 1)) * random.uniform(0.75, 1.0)
                if time.monotonic() + wait > give_up_at:
                    raise _Failed(_past_deadline(fault, wait, spec, number)) from fault
                if hold is None or fault.wait is None:
                    await self._wait(wait, retrying=True)
            raise AssertionError("unreachable: the loop returns or raises")

    async def _held(
        self, hold: EndpointHold, give_up_at: float, spec: ModelSpec, fault: TransportError | None, made: int
    ) -> None:
        """Wait while the endpoint holds its calls (at once when it does not); fails at once when the
        hold ends past the call's deadline. `fault` is what the call's last attempt met, if any."""
        while (now := time.monotonic()) < hold.until:
            if hold.until > give_up_at:
                raise _Failed(_past_deadline(fault, hold.until - now, spec, made)) from fault
            await self._wait(hold.until - now, retrying=fault is not None)  # a refusal meanwhile holds it longer

    async def _wait(self, seconds: float, *, retrying: bool) -> None:
        """Sleep before an attempt; a retry's wait is counted for the progress line."""
        if not retrying:
            await asyncio.sleep(seconds)
            return
        counters = self.counters
        counters.waiting += 1
        counters.longest_wait = max(counters.longest_wait, seconds)
        try:
            await asyncio.sleep(seconds)
        finally:
            counters.waiting -= 1
            if counters.waiting == 0:
                counters.longest_wait = 0.0

    async def aclose(self) -> None:
        await self.transport.aclose()


class _Failed(Exception):
    """A call that failed for good; the message completes "'<model>' at <url> ..."."""


def _past_deadline(fault: TransportError | None, wait: float, spec: ModelSpec, made: int) -> str:
    said = f"{fault}; the next attempt" if fault is not None else "failed: its endpoint asked every call to wait; the first attempt"
    return f"{said} would wait {round(wait, 1):g} s, past the call's {spec.deadline:g} s deadline ({_count(made)})"


def _count(attempts: int) -> str:
    return "1 attempt" if attempts == 1 else f"{attempts} attempts"

