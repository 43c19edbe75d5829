"""The chat-completions transport: one HTTP request per attempt, through openai.AsyncOpenAI.

It sends a request and classifies what came back; the provider above it retries. Transient, so
asked again: 429, 408, 409 and 5xx answers (with the wait the endpoint asked for in Retry-After),
an attempt that timed out, a connection that could not be made or broke, a body cut short. Any
other fault is final. The body of a 200 answer is read by `engine.wire`.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import ssl
import time
from urllib.parse import parse_qsl

import httpx2
import openai

from psychosis_tests.common.errors import ModelCallError, redact
from psychosis_tests.engine.transport import Request, Transport, TransportError
from psychosis_tests.engine.wire import BadReply, Reply, read_reply
from psychosis_tests.inputs.models import ModelSpec

RETRYABLE_STATUS = frozenset({408, 409, 429})
"""Besides every 5xx."""
MESSAGE_CHARS = 300
"""How much of an endpoint's error message is quoted."""


class ChatCompletions(Transport):
    """POST /chat/completions to each model's base_url (or the suite's server for a built-in model).

    `base_urls` maps built-in model ids to the addresses of the suite's own servers
    (`servers.suite.SuiteServers.base_urls`)."""

    def __init__(self, base_urls: dict[str, str] | None = None):
        self.base_urls = dict(base_urls or {})
        self._clients: dict[str, openai.AsyncOpenAI] = {}
        self._tls: ssl.SSLContext | None = None

    def address(self, spec: ModelSpec) -> str:
        if spec.base_url:
            return spec.base_url
        try:
            return self.base_urls[spec.id]
        except KeyError:
            raise ModelCallError(f"model {spec.id!r} is served by the suite, but its server is not running") from None

    def concurrency(self, spec: ModelSpec) -> int:
        return spec.max_concurrency

    async def send(self, request: Request) -> Reply:
        spec = request.spec
        try:
            # The client's timeout bounds each read, not the attempt: a body trickling in a few
            # bytes at a time would hold the attempt until the call's deadline.
            async with asyncio.timeout(spec.timeout):
                # The client's generic POST, answered raw: the wire module reads the body (and
                # skipping the client's per-message type transform saves CPU).
                response = await self.client(spec).post("/chat/completions", cast_to=httpx2.Response, body=request.body)
            return read_reply(
                response.content,
                response.headers.get("content-type", ""),
                default_model=spec.model,
                accept_refusal=request.accept_refusal,
            )
        except (openai.APIStatusError, openai.APIConnectionError) as exc:
            raise transport_error(exc, spec, self.address(spec)) from exc
        except TimeoutError:
            raise TransportError(f"timed out: no answer within {spec.timeout:g} s", retryable=True) from None
        except BadReply as exc:
            raise TransportError(str(exc), retryable=exc.transient, usage=exc.usage) from exc

    def client(self, spec: ModelSpec) -> openai.AsyncOpenAI:
        """The model's client (one per model, kept for the run)."""
        client = self._clients.get(spec.id)
        if client is None:
            if self._tls is None:
                # One TLS context for all clients: each builds its own otherwise (about 0.1 s of
                # CPU apiece), just when every conversation waits for its first reply.
                self._tls = httpx2.create_ssl_context()
            # The client appends each path to base_url's raw path and query ("/v1?key=K" became
            # "/v1/?key=Kchat/completions"): a query (an endpoint's key, an api-version) goes apart.
            base_url, _, query = self.address(spec).partition("?")
            client = openai.AsyncOpenAI(
                base_url=base_url,
                default_query=dict(parse_qsl(query, keep_blank_values=True)) or None,
                api_key=spec.api_key(),
                max_retries=0,  # retries are the provider's
                timeout=spec.timeout,
                # A connection pool per model, not one for all: the pool looks at each of its
                # connections on every request, so a shared one costs more the more models run.
                http_client=openai.DefaultAsyncHttpxClient(verify=self._tls),
            )
            self._clients[spec.id] = client
        return client

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.close()
        self._clients.clear()


def transport_error(
    exc: openai.APIStatusError | openai.APIConnectionError, spec: ModelSpec, address: str
) -> TransportError:
    """An openai client error as one attempt's TransportError (429, 408, 409, 5xx, timeouts and
    broken connections are retryable); the batch transport words its HTTP faults with it too."""
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        return TransportError(
            _status(exc, address),
            retryable=status in RETRYABLE_STATUS or status >= 500,
            wait=_retry_after(exc.response.headers),
        )
    if isinstance(exc, openai.APITimeoutError):
        return TransportError(f"timed out: no answer within {spec.timeout:g} s", retryable=True)
    return TransportError(_connection(exc), retryable=True)


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
            return redact(str(inner["message"]))[:MESSAGE_CHARS]  # masked before the cut, which could leave part of a key
    text = exc.response.text if exc.response is not None else str(exc.message)
    if text.lstrip().lower().startswith(("<!doctype html", "<html")):
        return "an HTML error page (is base_url right?)"
    return redact(" ".join(text.split()))[:MESSAGE_CHARS] or "(empty body)"


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
