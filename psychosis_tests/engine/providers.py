"""The one wrapper around openai.AsyncOpenAI: endpoint addresses, concurrency caps, retries, cache.

Retries are the openai client's own (429, 408, 409, 5xx, timeouts and connection errors; exponential
backoff with jitter; Retry-After honoured), bounded by each spec's max_retries, and every call is
bounded in total time by the spec's deadline. Errors that retrying cannot fix (400, 401, 403, 404)
fail at once. Either way the caller gets a ModelCallError naming the call and the cause.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Literal

import httpx2
import openai
from openai.types.chat import ChatCompletion

from psychosis_tests.engine.cache import CachedResponse, ResponseCache, cache_key
from psychosis_tests.errors import ModelCallError, ReplayMissError
from psychosis_tests.inputs.models import ModelSpec
from psychosis_tests.inputs.settings import CacheMode


class PriorityLimiter:
    """A concurrency cap whose waiters go in priority order (lower first, then first come).

    Cases are given priorities in the order pytest will ask for them, so with an endpoint
    saturated the earliest cases finish first and their tests report while the rest still run,
    instead of every case finishing together at the end.
    """

    def __init__(self, limit: int):
        self._free = limit
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._arrivals = itertools.count()

    @contextlib.asynccontextmanager
    async def slot(self, priority: int) -> AsyncIterator[None]:
        await self._acquire(priority)
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, priority: int) -> None:
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return
        granted = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (priority, next(self._arrivals), granted))
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self._release()  # the slot was handed over just as the waiter was cancelled
            raise

    def _release(self) -> None:
        while self._waiters:
            _, _, granted = heapq.heappop(self._waiters)
            if not granted.done():
                granted.set_result(None)
                return
        self._free += 1


@dataclass
class Completion:
    """One answer, with the model version the endpoint reported."""

    text: str
    model_version: str
    cached: bool
    refusal: str | None = None
    """The judge's refusal (`message.refusal`) when it declined instead of answering; text is then ""."""


@dataclass
class CallCounters:
    """Live counts for progress lines."""

    answered: int = 0
    """Calls that reached the endpoint and came back with an answer."""
    cache_hits: int = 0
    errors: int = 0


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
    _clients: dict[str, openai.AsyncOpenAI] = field(default_factory=dict, init=False)
    _tls: ssl.SSLContext | None = field(default=None, init=False)
    _limits: dict[str, PriorityLimiter] = field(default_factory=dict, init=False)

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
                max_retries=spec.max_retries,
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
        repeat: int = 0,
        attempt: int = 0,
        response_format: dict | None = None,
        priority: int = 0,
        cache_tag: str = "",
    ) -> Completion:
        """One chat completion through the cache; raises ModelCallError or ReplayMissError.

        A judge's refusal comes back as a Completion with `refusal` set (judge_reply re-asks), and
        is cached like an answer. `cache_tag` goes into the cache key (the rubric version)."""
        params = spec.params_for(role).request_kwargs(repeat, attempt)
        key = cache_key(
            base_url=spec.base_url or self.builtin_identities.get(spec.id, f"builtin:{spec.id}"),
            model=spec.model,
            messages=messages,
            params=params,
            response_format=response_format,
            repeat=repeat,
            attempt=attempt,
            tag=cache_tag,
        )
        if self.cache is not None and self.cache_mode in ("use", "replay"):
            hit = self.cache.get(key)
            if hit is not None:
                self.counters.cache_hits += 1
                return Completion(hit.text, hit.model_version, cached=True, refusal=hit.refusal)
        if self.cache_mode == "replay":
            self.counters.errors += 1
            raise ReplayMissError(
                f"{call_label}: no recorded answer from {spec.id!r} in the cache "
                f"(--cache-mode replay never calls the network; record a run with --cache-mode use first)"
            )
        extra = {"response_format": response_format} if response_format else {}
        async with self._limit(spec).slot(priority):
            try:
                # The client's generic POST: the same retries, errors and parsing as
                # chat.completions.create, minus its per-message type transform, which cost
                # about 40% of the engine's CPU on long conversations (our messages are plain).
                response = await asyncio.wait_for(
                    self._client(spec).post(
                        "/chat/completions",
                        cast_to=ChatCompletion,
                        body={"model": spec.model, "messages": messages, **params, **extra},
                    ),
                    timeout=spec.deadline,
                )
            except (openai.OpenAIError, asyncio.TimeoutError) as exc:
                self.counters.errors += 1
                raise ModelCallError(f"{call_label}: {spec.id!r} failed: {_describe(exc, spec)}") from exc
        self.counters.answered += 1
        message = response.choices[0].message if response.choices else None
        text = (message.content or "") if message is not None else ""
        refusal = getattr(message, "refusal", None)
        if refusal and not text.strip():
            if role == "judge":
                version = response.model or spec.model
                if self.cache is not None and self.cache_mode != "off":
                    self.cache.put(key, CachedResponse("", version, refusal=str(refusal)))
                return Completion("", version, cached=False, refusal=str(refusal))
            self.counters.errors += 1
            raise ModelCallError(f"{call_label}: {spec.id!r} refused instead of replying: {str(refusal)[:300]!r}")
        if not text.strip():
            self.counters.errors += 1
            raise ModelCallError(f"{call_label}: {spec.id!r} returned an empty reply")
        version = response.model or spec.model
        if response.system_fingerprint:
            version = f"{version} ({response.system_fingerprint})"
        if self.cache is not None and self.cache_mode != "off":
            self.cache.put(key, CachedResponse(text, version))
        return Completion(text, version, cached=False)

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.close()
        self._clients.clear()


def _describe(exc: BaseException, spec: ModelSpec) -> str:
    """The cause in one line, saying whether retries were spent."""
    if isinstance(exc, asyncio.TimeoutError):
        return f"no answer within the {spec.deadline:.0f} s deadline (retries included)"
    if isinstance(exc, openai.APIStatusError):
        retried = exc.status_code in (408, 409, 429) or exc.status_code >= 500
        suffix = f" after {spec.max_retries} retries" if retried else " (not retryable)"
        return f"HTTP {exc.status_code}: {_message(exc)}{suffix}"
    if isinstance(exc, openai.APITimeoutError):
        return f"timed out after {spec.timeout:.0f} s per attempt and {spec.max_retries} retries"
    if isinstance(exc, openai.APIConnectionError):
        return f"cannot connect ({exc.__cause__ or exc}) after {spec.max_retries} retries"
    return f"{type(exc).__name__}: {exc}"


def _message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])[:300]
    return str(exc.message)[:300]
