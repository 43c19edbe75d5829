"""A loopback test double of the OpenAI Batch API, answering with the reference models.

    POST /v1/files                 upload a JSONL input file (multipart, purpose=batch)
    POST /v1/batches               create a batch from an uploaded file (its metadata kept)
    GET  /v1/batches               the batches, newest first, a page at a time (limit, after, has_more)
    GET  /v1/batches/{id}          the batch's status (and, once finished, its output and error files)
    GET  /v1/files/{id}/content    a file's content
    POST /v1/batches/{id}/cancel   cancel a batch that has not finished

Each line is answered the way the reference server answers one chat request
(`servers.reference_chat.complete`). What a test can set: `delay`, the seconds from creation to
completion; `expire_after`, the seconds after which an unfinished batch expires (every line then
goes to the error file as batch_expired); `fail_lines`, custom id (or a line's last message text)
-> how many more times that line fails with a server_error in the error file; `refuse_batches`, a
message with which every new batch fails as a whole; `garble_lines`, custom ids (or a line's last
message text) whose output line is written cut short, not JSON. A cancelled batch puts every line in the
error file as batch_cancelled. `batches_created`, `lines_received` and `custom_ids_received` count
what was submitted, `pages_listed` the listing's pages served.

For a run killed or cut off while it creates a batch: `create_reply` "dropped" creates the batch
and closes the connection unanswered; "stalled" creates it and holds the connection, unanswered,
until `released` is set (stop() sets it). `lists_batches` False answers the listing with 404, as
a provider without it; `keeps_metadata` False drops the metadata a batch is created with;
`page_cap` caps a listing's page below the `limit` asked for.
"""

from __future__ import annotations

import collections
import email.parser
import email.policy
import itertools
import json
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

from psychosis_tests.servers.reference_chat import APIError, complete


@dataclass
class _Batch:
    id: str
    input_file_id: str
    lines: list[dict[str, Any]]
    metadata: dict[str, str] | None
    created: float
    """time.monotonic() at creation: the clock of `delay` and `expire_after`."""
    created_at: int = field(default_factory=lambda: int(time.time()))
    status: str = "in_progress"
    output_file_id: str | None = None
    error_file_id: str | None = None
    counts: dict[str, int] = field(default_factory=lambda: {"total": 0, "completed": 0, "failed": 0})
    refusal: str | None = None
    """Why the whole batch failed validation (status failed), as the provider's errors list says."""

    def wire(self) -> dict[str, Any]:
        return {
            "id": self.id, "object": "batch", "endpoint": "/v1/chat/completions",
            "errors": None if self.refusal is None
            else {"object": "list", "data": [{"code": "invalid_request", "message": self.refusal}]},
            "input_file_id": self.input_file_id, "completion_window": "24h", "status": self.status,
            "output_file_id": self.output_file_id, "error_file_id": self.error_file_id,
            "created_at": self.created_at, "request_counts": self.counts, "metadata": self.metadata,
        }  # fmt: skip


class BatchState:
    """The files and batches of one double, and its settings (safe to change while it serves)."""

    def __init__(self, delay: float = 0.0, expire_after: float | None = None):
        self.delay = delay
        self.expire_after = expire_after
        self.fail_lines: dict[str, int] = {}
        self.refuse_batches: str | None = None
        """When set, every new batch fails as a whole with this message (its input refused)."""
        self.garble_lines: set[str] = set()
        self.create_reply = "sent"
        """How a create is answered: "sent", "dropped" or "stalled" (see the module's docstring)."""
        self.released = threading.Event()
        self.lists_batches = True
        self.keeps_metadata = True
        """False: batches are created without the metadata asked for, as some providers do."""
        self.page_cap = 100
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, _Batch] = {}
        self.batches_created = 0
        self.lines_received = 0
        self.custom_ids_received: collections.Counter[str] = collections.Counter()
        self.pages_listed = 0
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def add_file(self, content: bytes) -> str:
        with self._lock:
            file_id = f"file-{next(self._ids)}"
            self.files[file_id] = content
            return file_id

    def create(self, input_file_id: str, metadata: dict[str, str] | None = None) -> _Batch:
        with self._lock:
            if input_file_id not in self.files:
                raise APIError(404, f"no such file: {input_file_id}", code="not_found")
            try:
                lines = [json.loads(line) for line in self.files[input_file_id].splitlines() if line.strip()]
            except ValueError as exc:
                raise APIError(400, f"the input file is not JSONL: {exc}") from None
            kept = metadata if self.keeps_metadata else None
            batch = _Batch(f"batch_{next(self._ids)}", input_file_id, lines, kept, time.monotonic())
            batch.counts["total"] = len(lines)
            if self.refuse_batches:
                batch.status, batch.refusal = "failed", self.refuse_batches
            self.batches[batch.id] = batch
            self.batches_created += 1
            self.lines_received += len(lines)
            self.custom_ids_received.update(str(line.get("custom_id")) for line in lines)
            return batch

    def listing(self, limit: int, after: str | None) -> dict[str, Any]:
        """A page of the batches, newest first, after the batch `after` (OpenAI's list object)."""
        if not self.lists_batches:
            raise APIError(404, "no such endpoint: GET /v1/batches", code="not_found")
        if not 1 <= limit <= 100:
            raise APIError(400, f"limit must be from 1 to 100, not {limit}")
        with self._lock:
            newest_first = list(reversed(self.batches.values()))
            start = 0 if after is None else [b.id for b in newest_first].index(self._batch(after).id) + 1
            page = newest_first[start : start + min(limit, self.page_cap)]
            data = [batch.wire() for batch in page]
            more = start + len(page) < len(newest_first)
            self.pages_listed += 1
            return {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
                    "last_id": data[-1]["id"] if data else None, "has_more": more}  # fmt: skip

    def retrieve(self, batch_id: str) -> _Batch:
        with self._lock:
            batch = self._batch(batch_id)
            if batch.status == "in_progress":
                age = time.monotonic() - batch.created
                if self.expire_after is not None and age >= self.expire_after and age < self.delay:
                    self._finish(batch, "expired", answered=False)
                elif age >= self.delay:
                    self._finish(batch, "completed", answered=True)
            return batch

    def cancel(self, batch_id: str) -> _Batch:
        with self._lock:
            batch = self._batch(batch_id)
            if batch.status == "in_progress":
                self._finish(batch, "cancelled", answered=False)
            return batch

    def _batch(self, batch_id: str) -> _Batch:
        if batch_id not in self.batches:
            raise APIError(404, f"no such batch: {batch_id}", code="not_found")
        return self.batches[batch_id]

    def _finish(self, batch: _Batch, status: str, *, answered: bool) -> None:
        outputs, errors, garbled = [], [], set()
        for line in batch.lines:
            custom_id = line.get("custom_id")
            if not answered:
                said = f"the batch was {status} before this line ran"
                errors.append(_error_line(custom_id, f"batch_{status}", said))
            elif self.fail_lines.get(failing := self._failing_name(line, self.fail_lines), 0) > 0:
                self.fail_lines[failing] -= 1
                errors.append(_error_line(custom_id, "server_error", "the line failed on the double (fail_lines)"))
            else:
                line_id = f"resp-{next(self._ids)}"
                if self._failing_name(line, self.garble_lines) in self.garble_lines:
                    garbled.add(len(outputs))
                outputs.append({"id": line_id, "custom_id": custom_id, **_answer(line), "error": None})
        batch.status = status
        batch.counts.update(completed=len(outputs), failed=len(errors))
        if outputs:
            batch.output_file_id = self._store(outputs, garbled)
        if errors:
            batch.error_file_id = self._store(errors)

    @staticmethod
    def _failing_name(line: dict[str, Any], names: Collection[str]) -> str:
        """What `fail_lines` or `garble_lines` (`names`) knows a line by: its custom id, or else its
        last message's text."""
        custom_id = str(line.get("custom_id"))
        messages = (line.get("body") or {}).get("messages") or [{}]
        return custom_id if custom_id in names else str(messages[-1].get("content"))

    def _store(self, lines: list[dict[str, Any]], garbled: Collection[int] = ()) -> str:
        """A file of these lines; those at the `garbled` positions are cut short (not JSON)."""
        file_id = f"file-{next(self._ids)}"
        written = (json.dumps(line)[: 20 if i in garbled else None] + "\n" for i, line in enumerate(lines))
        self.files[file_id] = "".join(written).encode()
        return file_id


def _answer(line: dict[str, Any]) -> dict[str, Any]:
    """The line's response: the reference model's completion, or its error with its status."""
    try:
        body = complete(line.get("body"))
        status = 200
    except APIError as error:
        body, status = error.body(), error.status
    return {"response": {"status_code": status, "request_id": f"req-{line.get('custom_id')}", "body": body}}


def _error_line(custom_id: Any, code: str, message: str) -> dict[str, Any]:
    return {"id": f"err-{custom_id}", "custom_id": custom_id, "response": None,
            "error": {"code": code, "message": message}}  # fmt: skip


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, state: BatchState):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.state = state


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Silent."""

    def _send(self, status: int, data: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _route(self, method: str) -> None:
        state = self.server.state
        path, _, query = self.path.partition("?")
        parts = path.strip("/").split("/")
        try:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            match method, parts:
                case "POST", ["v1", "files"]:
                    content = _uploaded_file(self.headers.get("Content-Type", ""), body)
                    file_id = state.add_file(content)
                    reply = {"id": file_id, "object": "file", "bytes": len(content), "created_at": int(time.time()),
                             "filename": "batch.jsonl", "purpose": "batch", "status": "processed"}  # fmt: skip
                case "POST", ["v1", "batches"]:
                    asked = json.loads(body or b"{}")
                    reply = state.create(str(asked.get("input_file_id")), asked.get("metadata")).wire()
                    if state.create_reply != "sent":
                        if state.create_reply == "stalled":
                            state.released.wait()
                        self.close_connection = True  # the batch exists; its creator never hears of it
                        return
                case "GET", ["v1", "batches"]:
                    asked = {name: values[-1] for name, values in parse_qs(query).items()}
                    reply = state.listing(int(asked.get("limit", 20)), asked.get("after"))
                case "GET", ["v1", "batches", batch_id]:
                    reply = state.retrieve(batch_id).wire()
                case "POST", ["v1", "batches", batch_id, "cancel"]:
                    reply = state.cancel(batch_id).wire()
                case "GET", ["v1", "files", file_id, "content"]:
                    if file_id not in state.files:
                        raise APIError(404, f"no such file: {file_id}", code="not_found")
                    self._send(200, state.files[file_id], "application/jsonl")
                    return
                case _:
                    raise APIError(404, f"no such endpoint: {method} {self.path}", code="not_found")
            self._send(200, json.dumps(reply).encode())
        except APIError as error:
            self._send(error.status, json.dumps(error.body()).encode())

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")


def _uploaded_file(content_type: str, body: bytes) -> bytes:
    """The `file` part of a multipart upload whose `purpose` is batch."""
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + body
    )
    parts = {part.get_param("name", header="content-disposition"): part for part in message.iter_parts()}
    if "file" not in parts:
        raise APIError(400, "upload the JSONL as the multipart part 'file'")
    purpose = parts.get("purpose")
    if purpose is None or purpose.get_payload(decode=True).decode().strip() != "batch":
        raise APIError(400, "this double takes files with purpose=batch only")
    return parts["file"].get_payload(decode=True)


class BatchServer:
    """The double on a loopback port; use as a context manager or start()/stop()."""

    def __init__(self, delay: float = 0.0, expire_after: float | None = None):
        self.state = BatchState(delay, expire_after)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> BatchServer:
        self._server = _Server(self.state)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="batch-double", daemon=True)  # fmt: skip
        self._thread.start()
        return self

    def stop(self) -> None:
        self.state.released.set()
        if self._server is not None and self._thread is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join()
            self._server = self._thread = None

    def __enter__(self) -> BatchServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the batch double is not running; call start() first")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"
