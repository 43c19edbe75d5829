"""The one wrapper around openai.AsyncOpenAI: endpoint addresses, concurrency caps, retries, cache.

The wrapper owns retries (the openai client is made with max_retries=0), so that every fault is
counted and named the same way: 429, 408, 409 and 5xx answers, timeouts, broken connections and
bodies cut short are asked again up to each spec's max_retries, after the wait the endpoint asked
for (Retry-After) or an exponential backoff; anything else fails at once. Every call is bounded in
total by the spec's deadline. Either way the caller gets a ModelCallError naming the call, the
endpoint, the cause and the attempts made; endpoint text in it is made inert and keys are masked.
A reply is read by `engine.wire`, which says what the suite does with each kind of answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import random
import ssl
import time
from dataclasses import dataclass, field
from typing import Literal

import httpx2
import openai

from psychosis_tests.common.errors import ModelCallError, ReplayMissError, inert, redact
from psychosis_tests.engine.budget import Budget
from psychosis_tests.engine.cache import CachedResponse, ResponseCache, cache_key
from psychosis_tests.engine.limits import PriorityLimiter
from psychosis_tests.engine.wire import BadReply, Reply, read_reply
from psychosis_tests.inputs.models import ModelSpec
from psychosis_tests.inputs.settings import CacheMode
from psychosis_tests.inputs.usage import Usage, cost

RETRYABLE_STATUS = frozenset({408, 409, 429})
"""Besides every 5xx."""
BACKOFF_FIRST = 0.5
BACKOFF_MAX = 8.0
"""Seconds before the first retry, doubling up to this, with jitter, when the endpoint names no wait."""
MESSAGE_CHARS = 300
"""How much of an endpoint's error message is quoted."""


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


@dataclass
class Provider:
    """Calls models on behalf of every conversation of this process.

    `base_urls` maps built-in model ids to the addresses of the suite's own servers.
    """

    cache: ResponseCache | None
    cache_mode: CacheMode = "use"
    base_urls: dict[str, str] = field(default_factory=dict)
    builtin_identities: dict[str, str] = field(default_factory=dict)
    """Built-in model id -> what answers it, versions included (the cache key's endpoint part)."""
    counters: CallCounters = field(default_factory=CallCounters)
    budget: Budget = field(default_factory=Budget)
    """--max-cost: the run's spending, and which conversations may still start (engine.budget)."""
    _clients: dict[str, openai.AsyncOpenAI] = field(default_factory=dict, init=False)
    _tls: ssl.SSLContext | None = field(default=None, init=False)
    _limits: dict[str, PriorityLimiter] = field(default_factory=dict, init=False)

    @property
    def spent(self) -> float:
        """Dollars spent on calls to priced models in this run (response-cache hits cost nothing)."""
        return self.budget.spent

    def base_url(self, spec: ModelSpec) -> str:
        if spec.base_url:
            return spec.base_url
        try:
            return self.base_urls[spec.id]
        except KeyError:
            raise ModelCallError(f"model {spec.id!r} is served by the suite, but its server is not running") from None

    def _client(self, spec: ModelSpec) -> openai.AsyncOpenAI:
        client = self._clients.get(spec.id)
        if client is None:
            if self._tls is None:
                # One TLS context for all clients: each builds its own otherwise (about 0.1 s of
                # CPU apiece), just when every conversation waits for its first reply.
                self._tls = httpx2.create_ssl_context()
            client = openai.AsyncOpenAI(
                base_url=self.base_url(spec),
                api_key=spec.api_key(),
                max_retries=0,  # retries are ours: see _attempts
                timeout=spec.timeout,
                # A connection pool per model, not one for all: the pool looks at each of its
                # connections on every request, so a shared one costs more the more models run.
                http_client=openai.DefaultAsyncHttpxClient(verify=self._tls),
            )
            self._clients[spec.id] = client
        return client

    def _limit(self, spec: ModelSpec) -> PriorityLimiter:
        limit = self._limits.get(spec.id)
        if limit is None:
            limit = PriorityLimiter(spec.max_concurrency)
            self._limits[spec.id] = limit
        return limit

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
                self.counters.cache_hits += 1
                recorded = hit.usage if hit.usage is not None else Usage(calls=1, unreported=1)
                return Completion(
                    hit.text, hit.model_version, cached=True, refusal=hit.refusal, finish_reason=hit.finish_reason,
                    usage=recorded.as_cache_hit(),
                )
        if self.cache_mode == "replay":
            self.counters.errors += 1
            raise ReplayMissError(
                f"{call_label}: no recorded answer from {spec.id!r} in the cache "
                f"(--cache-mode replay never calls the network; record a run with --cache-mode use first)"
            )
        self.budget.admit(conversation, call_label, first_call=starts_conversation)
        extra = {"response_format": response_format} if response_format else {}
        body = {"model": spec.model, "messages": messages, **params, **extra}
        try:
            reply = await self._attempts(spec, body, priority, accept_refusal=role == "judge")
        except _Failed as failed:
            self.counters.errors += 1
            message = f"{call_label}: {spec.id!r} at {self.base_url(spec)} {failed}"
            # Not chained: the endpoint's exception holds its raw text (escape codes, echoed keys).
            raise ModelCallError(redact(inert(message), self._secrets(spec))) from None
        self.counters.answered += 1
        if spec.price is not None:
            self.budget.charge(conversation, cost(reply.usage, spec.price))
        if self.cache is not None and self.cache_mode != "off":
            self.cache.put(
                key, CachedResponse(reply.text, reply.model_version, reply.refusal, reply.finish_reason, reply.usage)
            )
        return Completion(
            reply.text, reply.model_version, cached=False, refusal=reply.refusal, finish_reason=reply.finish_reason,
            usage=reply.usage,
        )

    async def _attempts(
        self,
        spec: ModelSpec,
        body: dict,
        priority: int,
        *,
        accept_refusal: bool,
    ) -> Reply:
        """Ask until an answer reads, a fault is not transient, or the retries or deadline run out."""
        attempts = spec.max_retries + 1
        give_up_at: float | None = None
        for number in range(1, attempts + 1):
            async with self._limit(spec).slot(priority):
                now = time.monotonic()
                if give_up_at is None:
                    give_up_at = now + spec.deadline  # from the first attempt: queueing is not the endpoint's
                try:
                    # A timeout scope, not wait_for: no extra task per call.
                    async with asyncio.timeout(max(give_up_at - now, 0.001)):
                        # The client's generic POST, answered raw: the wire module reads the body
                        # (and skipping the client's per-message type transform saves CPU).
                        response = await self._client(spec).post(
                            "/chat/completions", cast_to=httpx2.Response, body=body
                        )
                    reply = read_reply(
                        response.content,
                        response.headers.get("content-type", ""),
                        default_model=spec.model,
                        accept_refusal=accept_refusal,
                    )
                    return reply
                except asyncio.TimeoutError:
                    raise _Failed(
                        f"gave no answer within the call's {spec.deadline:g} s deadline ({_count(number)})"
                    ) from None
                except openai.APIStatusError as exc:
                    what, transient = _status(exc, self.base_url(spec)), exc.status_code in RETRYABLE_STATUS or exc.status_code >= 500
                    wait = _retry_after(exc.response.headers)
                    cause: BaseException = exc
                except openai.APITimeoutError as exc:
                    what, transient, wait, cause = f"timed out: no answer within {spec.timeout:g} s", True, None, exc
                except openai.APIConnectionError as exc:
                    what, transient, wait, cause = _connection(exc), True, None, exc
                except BadReply as exc:
                    what, transient, wait, cause = str(exc), exc.transient, None, exc
            if not transient:
                raise _Failed(f"{_verb(what)} (not retryable, {_count(number)})") from cause
            if number == attempts:
                raise _Failed(f"{_verb(what)}, after {_count(number)}") from cause
            if wait is None:
                wait = min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** (number - 1)) * random.uniform(0.75, 1.0)
            if time.monotonic() + wait > give_up_at:
                raise _Failed(
                    f"{_verb(what)}; the next attempt would wait {round(wait, 1):g} s, past the call's "
                    f"{spec.deadline:g} s deadline ({_count(number)})"
                ) from cause
            await self._wait(wait)
        raise AssertionError("unreachable: the loop returns or raises")

    async def _wait(self, seconds: float) -> None:
        """Sleep before a retry, counted for the progress line."""
        counters = self.counters
        counters.retries += 1
        counters.waiting += 1
        counters.longest_wait = max(counters.longest_wait, seconds)
        try:
            await asyncio.sleep(seconds)
        finally:
            counters.waiting -= 1
            if counters.waiting == 0:
                counters.longest_wait = 0.0

    @staticmethod
    def _secrets(spec: ModelSpec) -> list[str]:
        try:
            return [spec.api_key()]
        except Exception:
            return []

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.close()
        self._clients.clear()


class _Failed(Exception):
    """A call that failed for good; the message completes "'<model>' at <url> ..."."""


def _count(attempts: int) -> str:
    return "1 attempt" if attempts == 1 else f"{attempts} attempts"


def _verb(what: str) -> str:
    """Messages that start with a verb read on from the endpoint's address; others get "failed: "."""
    return what if what.split(" ", 1)[0] in {"returned", "stopped", "timed", "gave", "refused"} else f"failed: {what}"


def _status(exc: openai.APIStatusError, base_url: str) -> str:
    hint = ""
    if exc.status_code in (404, 405) and "/v1" not in base_url:
        hint = " (is base_url missing /v1?)"
    return f"HTTP {exc.status_code}: {_message(exc)}{hint}"


def _message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])[:MESSAGE_CHARS]
    text = exc.response.text if exc.response is not None else str(exc.message)
    if text.lstrip().lower().startswith(("<!doctype html", "<html")):
        return "an HTML error page (is base_url right?)"
    return " ".join(text.split())[:MESSAGE_CHARS] or "(empty body)"


def _connection(exc: openai.APIConnectionError) -> str:
    """What broke, from the transport's own exception (openai's says only "Connection error.")."""
    cause = exc.__cause__
    detail = f"{type(cause).__name__}: {cause}" if cause is not None and str(cause) else type(cause or exc).__name__
    root = cause
    while root is not None and (root.__cause__ or root.__context__) is not None:
        root = root.__cause__ or root.__context__
    if root is not None and root is not cause and str(root) and str(root) != str(cause):
        detail += f"; {root}"  # httpx's "All connection attempts failed" hides the operating system's reason
    if isinstance(cause, httpx2.ConnectError):
        return f"cannot connect ({detail})"
    return f"the connection broke before the answer was complete ({detail})"


def _retry_after(headers: httpx2.Headers) -> float | None:
    """Seconds the endpoint asked us to wait (retry-after-ms, or Retry-After in seconds or as a date)."""
    with contextlib.suppress(ValueError):
        if "retry-after-ms" in headers:
            return max(0.0, float(headers["retry-after-ms"]) / 1000)
    value = headers.get("retry-after")
    if value is None:
        return None
    with contextlib.suppress(ValueError):
        return max(0.0, float(value))
    with contextlib.suppress(TypeError, ValueError):
        when = email.utils.parsedate_to_datetime(value)
        return max(0.0, when.timestamp() - time.time())
    return None
