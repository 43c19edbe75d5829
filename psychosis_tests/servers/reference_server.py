"""The reference models behind a real loopback HTTP server (OpenAI chat-completions protocol).

Tests and offline runs need models that need no key and no network, that are reached through the
same `openai` client code as hosted models, and whose behaviour is known in advance, so that the
suite's controls can be checked: `sycophant` must fail everything, `guardian` must pass everything,
`keyword-guard` must fail only the implicit scenarios. The target models are
`servers.reference_models`, the judge `servers.reference_judge`, the user model
`servers.reference_patient`, the fault plans (models that misbehave on purpose: `fault:429,ok`,
`fault:random:429=0.2,500=0.05`, ...) `servers.faults`, the answer to one request
`servers.reference_chat`; this module is the HTTP server.

    python -m psychosis_tests.servers.reference_server --port 8123 --latency 0.5 [--rate-limit 12]

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
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from time import monotonic
from typing import Any

from psychosis_tests.servers import faults
from psychosis_tests.servers.reference_chat import (
    SERVED_MODELS,
    APIError,
    complete,
    fault_plan,
    read_payload,
    requested_model,
)
from psychosis_tests.servers.reference_models import VERSION

# ---------------------------------------------------------------------------------------------
# The server


class _Server(ThreadingHTTPServer):
    """The HTTP server plus the state its handlers share."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 256
    """Listen backlog: the speed benchmark opens 64+ connections at once; the default 5 drops SYNs."""

    def __init__(self, address: tuple[str, int], latency: float, rate_limit: int):
        super().__init__(address, _Handler)
        self.latency = latency
        self.rate_limit = rate_limit
        self._second = -1
        self._admitted = 0
        """Chat requests admitted in that second of the server's clock (with a rate limit)."""
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self.chat_requests = 0
        self.requests_by_model: collections.Counter[str] = collections.Counter()
        self.random = random.Random()
        """Draws of the random fault plans: seeded by nothing, like the faults of a real endpoint."""
        self._attempts: dict[str, int] = {}
        self._connections: set[socket.socket] = set()

    def count_chat_request(self, model: str) -> None:
        with self._lock:
            self.chat_requests += 1
            self.requests_by_model[model] += 1

    def admit(self) -> bool:
        """Whether a chat request fits the rate limit: at most `rate_limit` in each second of the
        server's clock (0: no limit). A fixed window, as many providers count: the requests refused
        in one second and asked to wait 1 s all meet the next one."""
        if not self.rate_limit:
            return True
        second = int(monotonic())
        with self._lock:
            if second != self._second:
                self._second, self._admitted = second, 0
            if self._admitted >= self.rate_limit:
                return False
            self._admitted += 1
            return True

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

    def _send_error(self, error: APIError) -> None:
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
            self._send_error(APIError(404, f"no such endpoint: GET {path}", code="not_found"))

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        try:
            body = self._read_body()
            if path != "/v1/chat/completions":
                raise APIError(404, f"no such endpoint: POST {path}", code="not_found")
            payload = read_payload(body)  # parsed once, for every step below
            self.server.count_chat_request(requested_model(payload))
            if not self.server.admit():
                raise APIError(
                    429, f"rate limited: more than {self.server.rate_limit} requests a second (reference rate limit)",
                    type_="rate_limit_error", code="rate_limit_exceeded", headers={"Retry-After": "1"},
                )
            if self.server.latency and self.server.stopping.wait(self.server.latency):
                self.close_connection = True  # stopping: drop the request rather than answer late
                return
            plan = fault_plan(payload)
            if plan is None:
                self._send_json(200, complete(payload))
                return
            step = plan.step_for(self.server.attempt(body), self.server.random, faults.turn_of(body))
            try:
                faults.serve(
                    step, self, lambda: complete(payload, answer_as=plan.answer_as), self.server.stopping.wait
                )
            except faults.StatusFault as fault:
                raise APIError(
                    fault.status, fault.message, type_=fault.type, code=fault.code, headers=fault.headers
                ) from None
        except APIError as error:
            self._send_error(error)

    def _read_body(self) -> bytes:
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self.close_connection = True
            raise APIError(411, "send the request body with a Content-Length header")
        return self.rfile.read(int(length))

class ReferenceServer:
    """The reference models on a loopback HTTP server; use as a context manager or start()/stop()."""

    def __init__(self, latency: float = 0.0, host: str = "127.0.0.1", port: int = 0, rate_limit: int = 0):
        if latency < 0:
            raise ValueError(f"latency must be >= 0 seconds, got {latency}")
        if rate_limit < 0:
            raise ValueError(f"rate_limit must be >= 0 requests a second, got {rate_limit}")
        self.latency = latency
        self.rate_limit = rate_limit
        """Chat requests admitted in each second, the rest refused with a 429 (0: no limit)."""
        self.host = host
        self.port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> ReferenceServer:
        if self._thread is not None:
            raise RuntimeError("the reference server is already running")
        self._server = _Server((self.host, self.port), self.latency, self.rate_limit)
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
    parser.add_argument(
        "--rate-limit", type=int, default=0, help="chat requests admitted in each second, the rest refused (default 0: no limit)"
    )
    args = parser.parse_args(argv)
    if args.latency < 0:
        parser.error(f"--latency must be >= 0, got {args.latency}")
    if args.rate_limit < 0:
        parser.error(f"--rate-limit must be >= 0, got {args.rate_limit}")
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    with ReferenceServer(latency=args.latency, host=args.host, port=args.port, rate_limit=args.rate_limit) as server:
        print(server.url, flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
