"""The reference models behind a real loopback HTTP server (OpenAI chat-completions protocol).

Tests and offline runs need models that need no key and no network, that are reached through the
same `openai` client code as hosted models, and whose behaviour is known in advance, so that the
suite's controls can be checked: `sycophant` must fail everything, `guardian` must pass everything,
`keyword-guard` must fail only the implicit scenarios. The target models are
`servers.reference_models`, the judge `servers.reference_judge`, the user model
`servers.reference_patient`, the fault plans (models that misbehave on purpose: `fault:429,ok`,
`fault:random:429=0.2,500=0.05`, ...) `servers.faults`; this module is the wire format and the server.

    python -m psychosis_tests.servers.reference_server --port 8123 --latency 0.5

serves until SIGINT/SIGTERM and prints its base URL on stdout once it is ready.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import random
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from psychosis_tests.inputs.method import METRICS
from psychosis_tests.inputs.models import REFERENCE_PREFIX
from psychosis_tests.inputs.rubric import read_judge_request
from psychosis_tests.servers import faults
from psychosis_tests.servers.reference_judge import JUDGE_STYLES, score_reply
from psychosis_tests.servers.reference_judge_faults import JUDGE_FAULTS, faulty_answer
from psychosis_tests.servers.reference_patient import patient_turn
from psychosis_tests.servers.reference_models import (
    _TARGETS,
    SYSTEM_FINGERPRINT,
    VERSION,
    _Conversation,
    model_version,
)

# ---------------------------------------------------------------------------------------------
# Wire format and errors


class _Message(BaseModel):
    """One chat message of a request."""

    role: str
    """system, developer, user or assistant."""
    content: str | list[dict[str, Any]] | None = None
    """Text, or a list of content parts whose "text" parts are joined."""

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(str(part.get("text", "")) for part in self.content if part.get("type") == "text")
        return self.content or ""


class _ChatRequest(BaseModel):
    """The fields of a chat-completions request the reference server reads; others are ignored."""

    model_config = {"extra": "allow"}

    model: str
    """A reference model name, bare ("guardian") or prefixed ("reference/guardian")."""
    messages: list[_Message] = Field(min_length=1)
    """The conversation so far."""
    stream: bool | None = False
    """Streaming is not supported; true is rejected."""
    seed: int | None = None
    """Seeds the noisy model (None counts as 0)."""


class _APIError(Exception):
    """An error answered in the OpenAI error shape."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type_: str = "invalid_request_error",
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "code": self.code}}


def _judge(messages: list[dict[str, str]], style: str = "judge") -> str:
    try:
        request = read_judge_request(messages)
    except ValueError as exc:
        raise _APIError(
            400,
            f"the reference judge could not read this request as a judge prompt ({exc}); build it"
            " with psychosis_tests.inputs.rubric.build_judge_messages",
            code="not_a_judge_request",
        ) from exc
    if not request.metrics:
        raise _APIError(400, f"the judge request asks for no metric; expected some of {', '.join(METRICS)}")
    verdict = score_reply(request.conversation[-1].get("content", ""), request.metrics, style)
    return json.dumps(verdict, ensure_ascii=False)


JUDGE_GARBAGE_REPLY = "Well, that reply looked fine to me overall, I suppose, though it is hard to say."
"""What `judge-garbage` always answers: prose that no verdict parser can accept."""


PATIENT_BREAKS_ROLE_REPLY = "As an AI language model, I can't pretend to be a person in crisis."
"""What `patient-breaks-role` always answers: a user model stepping out of the role."""


_FAULT_NAMES = (*faults.ALIASES, "judge-garbage", "patient-breaks-role")
SERVED_MODELS: tuple[str, ...] = (*_TARGETS, *JUDGE_STYLES, "patient", *_FAULT_NAMES, *JUDGE_FAULTS)
"""Every model name the server answers (send it bare or with the "reference/" prefix), besides
the fault plans `fault:...` (servers.faults)."""


# ---------------------------------------------------------------------------------------------
# The server


class _Server(ThreadingHTTPServer):
    """The HTTP server plus the state its handlers share."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 256
    """Listen backlog: the speed benchmark opens 64+ connections at once; the default 5 drops SYNs."""

    def __init__(self, address: tuple[str, int], latency: float):
        super().__init__(address, _Handler)
        self.latency = latency
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self.chat_requests = 0
        self.requests_by_model: collections.Counter[str] = collections.Counter()
        self.random = random.Random()
        """Draws of the random fault plans: seeded by nothing, like the faults of a real endpoint."""
        self._attempts: dict[str, int] = {}
        self._connections: set[socket.socket] = set()

    def count_chat_request(self, body: bytes) -> None:
        try:
            model = str(json.loads(body).get("model"))
        except (ValueError, AttributeError):
            model = ""
        with self._lock:
            self.chat_requests += 1
            self.requests_by_model[model] += 1

    def attempt(self, body: bytes) -> int:
        """1 for the first time this exact body is seen, 2 the second time, and so on."""
        key = hashlib.sha256(body).hexdigest()
        with self._lock:
            self._attempts[key] = self._attempts.get(key, 0) + 1
            return self._attempts[key]

    def track(self, connection: socket.socket, open_: bool) -> None:
        with self._lock:
            if open_:
                self._connections.add(connection)
            else:
                self._connections.discard(connection)

    def close_connections(self) -> None:
        """Wake every handler blocked on a keep-alive connection, so no thread outlives stop()."""
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Connections cut by stop() or dropped by a client raise in their handlers: expected, no traceback.
        if not self.stopping.is_set() and not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "psychosis-bench-reference"
    timeout = 120
    """Seconds an idle keep-alive connection is kept open."""
    disable_nagle_algorithm = True
    """Headers and body go out in two writes; with Nagle on, each reply would wait ~40 ms for an ACK."""
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.server.track(self.connection, True)

    def finish(self) -> None:
        self.server.track(self.connection, False)
        super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: a test run must not print a line per request."""

    def _send_json(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _send_error(self, error: _APIError) -> None:
        self._send_json(error.status, error.body(), error.headers)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == "/health":
            self._send_json(200, {"status": "ok", "version": VERSION})
        elif path == "/v1/models":
            models = [
                {"id": name, "object": "model", "created": 0, "owned_by": "psychosis-bench"}
                for name in SERVED_MODELS
            ]
            self._send_json(200, {"object": "list", "data": models})
        else:
            self._send_error(_APIError(404, f"no such endpoint: GET {path}", code="not_found"))

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        try:
            body = self._read_body()
            if path != "/v1/chat/completions":
                raise _APIError(404, f"no such endpoint: POST {path}", code="not_found")
            self.server.count_chat_request(body)
            if self.server.latency and self.server.stopping.wait(self.server.latency):
                self.close_connection = True  # stopping: drop the request rather than answer late
                return
            plan = self._fault_plan(body)
            if plan is None:
                self._send_json(200, self._complete(body))
                return
            step = plan.step_for(self.server.attempt(body), self.server.random, faults.turn_of(body))
            try:
                faults.serve(
                    step, self, lambda: self._complete(body, answer_as=plan.answer_as), self.server.stopping.wait
                )
            except faults.StatusFault as fault:
                raise _APIError(
                    fault.status, fault.message, type_=fault.type, code=fault.code, headers=fault.headers
                ) from None
        except _APIError as error:
            self._send_error(error)

    @staticmethod
    def _fault_plan(body: bytes) -> faults.FaultPlan | None:
        """The fault plan the request's model name asks for, if any."""
        try:
            name = str(json.loads(body)["model"]).removeprefix(REFERENCE_PREFIX)
        except (ValueError, KeyError, TypeError):
            return None  # not even a request: _complete says what is wrong
        try:
            return faults.parse_plan(name)
        except faults.PlanError as exc:
            raise _APIError(404, f"model {name!r}: {exc}", code="model_not_found") from None

    def _read_body(self) -> bytes:
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self.close_connection = True
            raise _APIError(411, "send the request body with a Content-Length header")
        return self.rfile.read(int(length))

    def _complete(self, body: bytes, answer_as: str | None = None) -> dict[str, Any]:
        try:
            request = _ChatRequest.model_validate_json(body)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors()
            )
            raise _APIError(400, f"malformed chat request: {problems}") from exc
        if request.stream:
            raise _APIError(
                400,
                "streaming is not supported by the reference server; send stream=false",
                code="stream_unsupported",
            )
        name = answer_as or request.model.removeprefix(REFERENCE_PREFIX)
        if name not in SERVED_MODELS or name in faults.ALIASES:
            raise _APIError(
                404,
                f"unknown reference model {name!r}; known models: {', '.join(SERVED_MODELS)}, "
                "and fault plans fault:... (see psychosis_tests.servers.faults)",
                code="model_not_found",
            )
        messages = [{"role": m.role, "content": m.text()} for m in request.messages]
        refusal: str | None = None
        if name in JUDGE_FAULTS:
            content, refusal = faulty_answer(name, json.loads(_judge(messages)))
        else:
            content = self._answer(name, messages, request.seed or 0)
        # Rough token counts: words.
        prompt_tokens = sum(len(m["content"].split()) for m in messages)
        completion_tokens = len((content or refusal or "").split())
        return {
            "id": f"chatcmpl-ref-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model_version(request.model.removeprefix(REFERENCE_PREFIX)),
            "system_fingerprint": SYSTEM_FINGERPRINT,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content, "refusal": refusal},
                    "finish_reason": "stop",
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    def _answer(self, name: str, messages: list[dict[str, str]], seed: int) -> str:
        if name in JUDGE_STYLES:
            return _judge(messages, name)
        if name == "judge-garbage":
            return JUDGE_GARBAGE_REPLY
        if name == "patient-breaks-role":
            return PATIENT_BREAKS_ROLE_REPLY
        if name == "patient":
            try:
                return patient_turn(messages)
            except ValueError as exc:
                raise _APIError(
                    400,
                    f"the reference patient could not read this request as a user-simulator prompt ({exc});"
                    " build it with psychosis_tests.inputs.user_prompt.build_user_messages",
                    code="not_a_user_request",
                ) from exc
        users = [m["content"] for m in messages if m["role"] == "user"]
        if not users:
            raise _APIError(400, "the messages hold no user message; a target model answers the latest one")
        return _TARGETS[name](_Conversation(user_messages=users, seed=seed))


class ReferenceServer:
    """The reference models on a loopback HTTP server; use as a context manager or start()/stop()."""

    def __init__(self, latency: float = 0.0, host: str = "127.0.0.1", port: int = 0):
        if latency < 0:
            raise ValueError(f"latency must be >= 0 seconds, got {latency}")
        self.latency = latency
        self.host = host
        self.port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> ReferenceServer:
        if self._thread is not None:
            raise RuntimeError("the reference server is already running")
        self._server = _Server((self.host, self.port), self.latency)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="reference-server",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; requests still sleeping out their latency are dropped, not awaited."""
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        server.stopping.set()
        server.shutdown()
        server.close_connections()
        server.server_close()
        thread.join()
        self._thread = None

    def __enter__(self) -> ReferenceServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """Base URL for openai clients, e.g. http://127.0.0.1:PORT/v1."""
        if self._server is None or self._thread is None:
            raise RuntimeError("the reference server is not running; call start() first")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def request_count(self) -> int:
        """Chat requests received since the last start(), failed ones included; kept after stop()."""
        return self._server.chat_requests if self._server is not None else 0

    def requests_for(self, model: str) -> int:
        """Chat requests received for this model name (as sent) since the last start()."""
        return self._server.requests_by_model[model] if self._server is not None else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m psychosis_tests.servers.reference_server",
        description="Serve the scripted reference models until SIGINT or SIGTERM.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to bind; 0 picks a free one (default)")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds slept per chat request")
    args = parser.parse_args(argv)
    if args.latency < 0:
        parser.error(f"--latency must be >= 0, got {args.latency}")
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    with ReferenceServer(latency=args.latency, host=args.host, port=args.port) as server:
        print(server.url, flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
