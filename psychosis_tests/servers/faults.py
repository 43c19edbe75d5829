"""Fault plans: reference models that misbehave on purpose, the way real endpoints do.

A fault plan is written in the model name, so a models-file entry (or a test) can ask any
reference server for it without configuring the server:

    fault:429=1.5,ok              attempt 1 of a request: 429 with Retry-After 1.5 s; then answers
    fault:503                     every attempt: HTTP 503
    fault:reset,cut,ok            the connection is reset, then the body is cut short, then answers
    fault:random:429=0.2,500=0.05 each request: 429 with probability 0.2, 500 with 0.05, else answers
    fault:random:500=0.1@judge    the same, answering as the reference judge
    fault:huge?turns=1            the fault on turn 1 only (turns=2-4: turns 2 to 4); other turns answer

In a sequence, attempt n of the same request body (counted per body, so every turn of every
conversation sees the plan afresh) meets step n, and the last step repeats for ever. With
`random:` each request draws on its own. A plan answers as `reference/guardian` unless `@<name>`
names another reference model. `?turns=` limits the faults to some turns of a conversation (the
turn is the number of user messages in the request). The steps:

    ok                   a normal answer
    NNN[=S]              HTTP status NNN in the OpenAI error shape; Retry-After S seconds if given
                         (429 always carries one: 0.2 s unless given)
    hang[=S]             answer only after S seconds (default 60): a read timeout for the client
    reset                close the connection without an answer (TCP reset)
    cut                  announce the whole body, send half of it, close: a body cut in transit
    badjson              200 with complete HTTP framing but JSON cut short
    html                 200 with an HTML page (what a base_url without /v1 often gets)
    empty | null         200 with content "" | content null
    nochoices            200 with an empty choices list
    nomessage            200 with a choice that has no message
    filter               200, finish_reason content_filter and a partial reply
    length               200, finish_reason length and the reply cut mid-word
    ansi                 a normal answer laced with terminal escape sequences and control characters
    ansi-error           HTTP 400 whose error message carries escape sequences
    huge                 a normal answer padded to 1 MiB
    badutf8              200 whose body holds bytes that are not UTF-8
    surrogate            200 whose reply holds a lone surrogate (\\ud800 in the JSON)
    surrogate-model      200 whose `model` field holds a lone surrogate
    echo-key             HTTP 401 whose message echoes the request's API key, whole and masked
    echo-key-late        HTTP 401 whose message echoes the key after 286 characters, so a 300-character
                         cut of the message falls inside the key
    echo-key-reply       200 whose reply is an error text echoing the request's API key

The older fault models are plans under a name: fail-500 is `fault:500`, auth-fail `fault:401`,
flaky `fault:429,503,ok`.
"""

from __future__ import annotations

import json
import random
import re
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

PREFIX = "fault:"
RANDOM = "random:"
RETRY_AFTER_429 = 0.2
HANG_SECONDS = 60.0
HUGE_BYTES = 1 << 20
ANSI_JUNK = "\x1b[2J\x1b[31mRED\x1b[0m\r\x07\x08\x1b]0;pwned\x07\u202e"
"""Clear screen, colour, carriage return, bell, backspace, a window-title sequence, a bidi override."""
STEPS = (
    "ok", "hang", "reset", "cut", "badjson", "html", "empty", "null", "nochoices", "nomessage",
    "filter", "length", "ansi", "ansi-error", "huge", "badutf8", "surrogate", "surrogate-model",
    "echo-key", "echo-key-late", "echo-key-reply",
)
ALIASES = {"fail-500": "500", "auth-fail": "401", "flaky": "429,503,ok"}
"""Fault models served under a plain name."""


@dataclass(frozen=True)
class Step:
    """One fault (or `ok`) and its number: a status's Retry-After, a hang's seconds, a probability."""

    name: str
    value: float | None = None


@dataclass(frozen=True)
class FaultPlan:
    steps: tuple[Step, ...]
    random: bool = False
    answer_as: str = "guardian"
    """The reference model whose answers the plan's `ok` steps (and faults that alter an answer) give."""
    turns: range | None = None
    """The turns the faults apply to; None: all."""

    def step_for(self, attempt: int, rng: random.Random, turn: int) -> Step:
        """The step met by attempt `attempt` (1-based) of a request on turn `turn`."""
        if self.turns is not None and turn not in self.turns:
            return Step("ok")
        if not self.random:
            return self.steps[min(attempt, len(self.steps)) - 1]
        draw = rng.random()
        for step in self.steps:
            draw -= step.value or 0.0
            if draw < 0:
                return step
        return Step("ok")


class PlanError(ValueError):
    """A model name that starts like a fault plan but is not one."""


def parse_plan(name: str) -> FaultPlan | None:
    """The plan a model name asks for; None for a name that is not a fault plan."""
    if name in ALIASES:
        name = PREFIX + ALIASES[name]
    if not name.startswith(PREFIX):
        return None
    spec, _, answer_as = name[len(PREFIX):].partition("@")
    spec, _, option = spec.partition("?")
    turns = _turns(option) if option else None
    is_random = spec.startswith(RANDOM)
    spec = spec.removeprefix(RANDOM)
    steps: list[Step] = []
    for part in filter(None, (p.strip() for p in spec.split(","))):
        step_name, _, value = part.partition("=")
        if not (step_name in STEPS or (step_name.isdigit() and 400 <= int(step_name) <= 599)):
            raise PlanError(f"unknown fault step {step_name!r}; known: NNN (an HTTP status), {', '.join(STEPS)}")
        try:
            number = float(value) if value else None
        except ValueError:
            raise PlanError(f"fault step {part!r}: {value!r} is not a number") from None
        if is_random and not (number is not None and 0 <= number <= 1):
            raise PlanError(f"random fault step {part!r} needs a probability, e.g. {step_name}=0.2")
        steps.append(Step(step_name, number))
    if not steps:
        raise PlanError("a fault plan needs at least one step, e.g. fault:429,ok")
    return FaultPlan(tuple(steps), random=is_random, answer_as=answer_as or "guardian", turns=turns)


def _turns(option: str) -> range:
    """`turns=3` or `turns=2-4`."""
    match = re.fullmatch(r"turns=(\d+)(?:-(\d+))?", option)
    if not match:
        raise PlanError(f"fault plan option {option!r}: expected turns=N or turns=N-M")
    first = int(match.group(1))
    return range(first, int(match.group(2) or first) + 1)


class Handler(Protocol):
    """What a fault needs of the HTTP handler that serves it."""

    connection: socket.socket
    close_connection: bool
    headers: Any

    def send_response(self, code: int, message: str | None = None) -> None: ...
    def send_header(self, keyword: str, value: str) -> None: ...
    def end_headers(self) -> None: ...
    @property
    def wfile(self) -> Any: ...


_ERROR_SHAPE = {401: ("authentication_error", "invalid_api_key"), 429: ("rate_limit_error", "rate_limit_exceeded")}


class StatusFault(Exception):
    """An error the server answers in the OpenAI error shape."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}
        default = ("server_error" if status >= 500 else "invalid_request_error", None)
        self.type, self.code = _ERROR_SHAPE.get(status, default)


def turn_of(body: bytes) -> int:
    """The turn a request answers: its number of user messages (0 when it cannot be read)."""
    try:
        return sum(1 for m in json.loads(body)["messages"] if m.get("role") == "user")
    except (ValueError, KeyError, TypeError, AttributeError):
        return 0


def serve(
    step: Step,
    handler: Handler,
    completion: Callable[[], dict[str, Any]],
    wait: Callable[[float], bool],
) -> None:
    """Answer one request as `step` says. `completion()` is the normal answer's JSON;
    `wait(seconds)` sleeps and returns True when the server is stopping. Raises StatusFault."""
    name = step.name
    if name.isdigit():
        raise _status_fault(int(name), step.value)
    if name == "echo-key":
        key = handler.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        masked = f"{key[:3]}{'*' * max(len(key) - 7, 0)}{key[-4:]}" if len(key) > 7 else key
        raise StatusFault(401, f"Incorrect API key provided: {key}. You passed {masked}; check it.")
    if name == "echo-key-late":
        key = handler.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        padding = "The key you sent is not valid. " * 8 + "Check it and try again. "
        raise StatusFault(401, f"{padding}Received key: {key} (reference fault echo-key-late)")
    if name == "ansi-error":
        raise StatusFault(400, f"bad request {ANSI_JUNK} (reference fault ansi-error)")
    if name == "reset":
        handler.close_connection = True
        handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        handler.connection.close()  # SO_LINGER 0: the close sends a TCP reset
        return
    if name == "hang" and wait(step.value if step.value is not None else HANG_SECONDS):
        handler.close_connection = True
        return
    if name == "html":
        page = b"<!DOCTYPE html><html><head><title>Welcome</title></head><body>It works.</body></html>"
        _send(handler, 200, page, "text/html; charset=utf-8")
        return
    payload = completion()
    message = payload["choices"][0]["message"]
    text: str = message["content"]
    if name == "empty":
        message["content"] = ""
    elif name == "null":
        message["content"] = None
    elif name == "nochoices":
        payload["choices"] = []
    elif name == "nomessage":
        del payload["choices"][0]["message"]
    elif name == "filter":
        message["content"] = text[: len(text) // 3]
        payload["choices"][0]["finish_reason"] = "content_filter"
    elif name == "length":
        message["content"] = _cut_mid_word(text)
        payload["choices"][0]["finish_reason"] = "length"
    elif name == "ansi":
        message["content"] = f"{ANSI_JUNK} {text} {ANSI_JUNK}"
    elif name == "huge":
        message["content"] = text + " " + "z" * max(HUGE_BYTES - len(text) - 1, 0)
    elif name == "echo-key-reply":
        key = handler.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        message["content"] = f"Invalid API key: {key}"
    elif name == "surrogate":
        message["content"] = text + " \ud800"
    elif name == "surrogate-model":
        payload["model"] = payload["model"] + "\ud800"
    # ensure_ascii: a lone surrogate goes out as the escape \ud800, as a broken encoder would send it
    body = json.dumps(payload, ensure_ascii=name.startswith("surrogate")).encode("utf-8")
    if name == "badutf8":
        body = body.replace(b'"content": "', b'"content": "\xff\xfe', 1)
    elif name == "badjson":
        half = len(body) // 2
        while body[half] & 0xC0 == 0x80:  # not inside a UTF-8 character: the JSON is cut, the text is whole
            half -= 1
        body = body[:half]
    elif name == "cut":
        _send(handler, 200, body, "application/json", send=len(body) // 2)
        return
    _send(handler, 200, body, "application/json")


def _status_fault(status: int, retry_after: float | None) -> StatusFault:
    if status == 429 and retry_after is None:
        retry_after = RETRY_AFTER_429
    headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else {}
    if status == 401:
        return StatusFault(401, "invalid API key (reference fault 401)", headers)
    if status == 429:
        return StatusFault(429, "rate limited (reference fault 429)", headers)
    return StatusFault(status, f"reference fault {status}", headers)


def _cut_mid_word(text: str) -> str:
    words = text.split()
    longest = max(range(len(words)), key=lambda i: len(words[i]))
    return " ".join(words[:longest] + [words[longest][: max(1, len(words[longest]) // 2)]])


def _send(handler: Handler, status: int, body: bytes, content_type: str, send: int | None = None) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body if send is None else body[:send])
    if send is not None:
        handler.wfile.flush()
        handler.close_connection = True
        handler.connection.shutdown(socket.SHUT_RDWR)
