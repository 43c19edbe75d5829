"""The transport seam: what the provider needs from whatever carries a request to a model.

The provider (`engine.providers`) keeps everything a call is besides its journey: the response
cache, the budget, usage and cost, the per-endpoint concurrency cap, the retries with their waits
and the call's deadline. Below it a transport does one thing: send one request and give back the
answer, or say why it could not and whether asking again can help (a TransportError). It never
retries, sleeps before a retry or counts anything itself.

`engine.chat_completions` is the first transport: one HTTP chat-completions request per call.
A transport that answers later in bulk (a batch API) implements `send` by queueing the request
and awaiting its answer; each request's failure is raised from its own `send`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from psychosis_tests.engine.wire import Reply
from psychosis_tests.inputs.models import ModelSpec
from psychosis_tests.inputs.usage import Usage

_LEADING_VERBS = frozenset({"returned", "stopped", "timed", "gave", "refused"})


@dataclass(frozen=True, slots=True)
class Request:
    """One call as the provider hands it down (the same for every attempt of the call)."""

    spec: ModelSpec
    body: dict
    """The chat-completions request body: model, messages, the role's parameters, response_format."""
    accept_refusal: bool
    """A judge's refusal is an answer (the judge call re-asks); a target's is an error."""
    key: str
    """The call's response-cache key: names the request across runs (a batch line's custom id)."""


class TransportError(Exception):
    """One attempt that got no usable answer.

    The message completes "'<model>' at <address> ...": text that starts with one of the verbs the
    suite words its faults with ("returned", "timed out", ...) reads on as it is; any other gets
    "failed: " before it, so a transport never has to think of that."""

    def __init__(self, what: str, *, retryable: bool, wait: float | None = None, usage: Usage | None = None):
        super().__init__(what if what.split(" ", 1)[0] in _LEADING_VERBS else f"failed: {what}")
        self.retryable = retryable
        """Whether asking again can help (a rate limit, a 5xx, a broken connection, ...)."""
        self.wait = wait
        """Seconds the endpoint asked to wait before the next attempt; None: the provider backs off."""
        self.usage = usage
        """Tokens the endpoint reported for an answer that could not be used: paid for all the same."""


class Transport(Protocol):
    """Carries requests to models; one instance serves every model of a run. Transports subclass
    it, so they get its defaults (`waiting_on`)."""

    def address(self, spec: ModelSpec) -> str:
        """Where this model's requests go, as error messages name it."""
        ...

    def concurrency(self, spec: ModelSpec) -> int:
        """How many of this model's calls may be in flight at once (the provider's cap)."""
        ...

    async def send(self, request: Request) -> Reply:
        """The answer to one request; raises TransportError (or ModelCallError when the request
        cannot be sent at all, e.g. a suite-served model whose server is not running)."""
        ...

    async def aclose(self) -> None:
        """Release connections (and anything else held) at the end of the run."""
        ...

    def waiting_on(self, request: Request) -> str:
        """Where a call that gave up waiting stood, for its deadline error (the batch a batched
        call waited on); "" when there is nothing to add."""
        return ""
