"""The batch transport: judge calls sent through a provider's OpenAI-compatible Batch API.

`send` queues the request and awaits its answer. A model's queue is submitted as one batch (a
JSONL file uploaded with purpose=batch, then a batch created from it) when it holds `batch_size`
requests, or `batch_flush` seconds after its first request, so a run never waits for a batch
that will not fill. Each batch is polled with backoff (up to `batch_poll_max` seconds apart)
until it finishes; its output and error files are read and each line, named by its custom id
(the request's cache key), answers the request waiting for it or raises that request's own
TransportError, which the provider retries or turns into its case's error:

- a line that failed with a transient code (server_error, rate_limit_exceeded, an expired
  batch's batch_expired) or status (429, 5xx) is retryable: the retry goes into a new batch;
- a line the batch was cancelled before running, a line refused (4xx), a batch that failed as a
  whole (its input refused) are final; the message names the batch id and the provider's reason.

A batch the provider no longer knows (its poll, or the read of its output or error file, answered
404 or 410, or the batch polled carries another submission's metadata: an id reused) is gone: it
is forgotten, the run says so once in its log, and its requests not yet answered are submitted
again, each at most once per call. Any other poll fault that is not transient errors the batch's
calls and keeps the batch for the next run to poll.

Every submitted request is kept in a `BatchStore` next to the response cache: a run that meets a
request already submitted polls its batch (or takes its kept answer) instead of submitting it again.
The submission is recorded before the batch is created, with an id the batch carries in its
metadata (`METADATA_KEY`), and its batch id after. A run killed in between leaves a submission
without a batch id; the run that next meets one of its requests lists the provider's batches
(newest first) for that metadata and adopts the batch it finds, or, finding none, submits the
requests anew: the batch was never created. A provider that cannot list batches (the listing
refused) or drops the metadata cannot be asked: the run says so once in its log, and such
requests are submitted anew (the one batch that may then be paid twice).

What the log and the reports say about a provider's batches quotes the provider: it is made inert
and key-shaped strings (and the model's key) in it are masked, as in a case's error.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from typing import Any

import openai

from psychosis_tests.common.errors import inert, mask_secrets, redact
from psychosis_tests.common.json_lines import json_lines
from psychosis_tests.engine.batch_store import BatchStore, Submitted
from psychosis_tests.engine.chat_completions import RETRYABLE_STATUS, ChatCompletions, transport_error
from psychosis_tests.engine.transport import Request, Transport, TransportError
from psychosis_tests.engine.wire import BadReply, Reply, read_reply
from psychosis_tests.inputs.models import ModelSpec

POLL_FIRST = 0.5
"""Seconds before a new batch is polled the first time; each later wait is 1.5 times longer, up
to the model's batch_poll_max."""
RETRYABLE_CODES = frozenset({"server_error", "rate_limit_exceeded", "batch_expired", "timeout"})
FINISHED = frozenset({"completed", "failed", "expired", "cancelled"})
GONE = frozenset({404, 410})
"""Poll statuses saying the provider does not know the batch (any more): its requests are submitted again."""
QUEUE_LIMIT = 1_000_000
"""The provider's cap on calls in flight to a batched model: every call may wait in a batch."""
METADATA_KEY = "psychosis_bench_submission"
"""The batch metadata key naming the submission a batch was created for."""
LIST_PAGE = 100
"""Batches asked for per page when looking for a submission's batch (OpenAI's largest page)."""
CLOCK_SLACK = 600.0
"""Seconds the provider's clock may lag ours: listing stops at batches created this long before
the submission was recorded, since the batch cannot be older than its submission."""
log = logging.getLogger(__name__)


@dataclass
class _Waiting:
    request: Request
    answer: asyncio.Future[Reply] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    resubmitted: bool = False
    """Submitted again after its batch was gone: a second gone batch errors it instead."""


@dataclass
class BatchCounters:
    """Live counts for progress lines."""

    submitted: int = 0
    """Batches this run submitted."""
    resumed: int = 0
    """Batches an earlier run submitted that this run polled (found by their metadata or not)."""
    done: int = 0
    """Batches finished (whatever their status) whose lines were read, gone, or that could not be polled."""

    @property
    def pending(self) -> int:
        return self.submitted + self.resumed - self.done


class BatchTransport(Transport):
    """Batches each batched model's requests; `http` gives the addresses and the openai clients."""

    def __init__(self, http: ChatCompletions, store: BatchStore):
        self.http = http
        self.store = store
        self.counters = BatchCounters()
        self._queues: dict[str, list[_Waiting]] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._waiting: dict[tuple[str, str], dict[str, list[_Waiting]]] = {}
        """(batch id, submission id) -> custom id -> the requests waiting for that line."""
        self._batch_of: dict[str, asyncio.Future[str | None]] = {}
        """submission id -> its batch id (None: never created), as this run's create or lookup finds it."""
        self._latest: dict[str, str] = {}
        """batch id -> what its latest poll said (its status, or why the poll failed)."""
        self._warned: set[tuple[str, str]] = set()
        self.warnings: list[str] = []
        """What the run's reports must say about this provider's batches (each said once)."""
        self._tasks: set[asyncio.Future[Any]] = set()

    def address(self, spec: ModelSpec) -> str:
        return f"{self.http.address(spec)} (Batch API)"

    def concurrency(self, spec: ModelSpec) -> int:
        return QUEUE_LIMIT

    async def send(self, request: Request) -> Reply:
        submitted = self.store.submitted(request.key)
        if submitted is not None and submitted.answer is not None:
            self.store.forget([request.key])
            return _read(request, submitted.batch_id, json.loads(submitted.answer))
        batch_id = None
        if submitted is not None:
            batch_id = submitted.batch_id or await self._found(request.spec, submitted)
        waiting = _Waiting(request)
        if batch_id:
            self._wait_on(batch_id, submitted.submission, [waiting], resumed=True)
        else:
            self._enqueue(waiting)
        reply = await waiting.answer  # a call given up first leaves its line kept for the run that asks
        self.store.forget([request.key])  # read: the response cache keeps it from here
        return reply

    def waiting_on(self, request: Request) -> str:
        """Where a call that gave up waiting stood, for its deadline error: its batch and what the
        latest poll said ("" when it was not waiting on a batch)."""
        for (batch_id, _), lines in self._waiting.items():
            if request.key in lines:
                latest = self._latest.get(batch_id, "not polled yet")
                return f"batch {batch_id}, {latest}; it stays kept, and the next run polls it again"
        if any(w.request.key == request.key for queue in self._queues.values() for w in queue):
            return "still queued for a batch, not yet submitted"
        return ""

    async def _found(self, spec: ModelSpec, submitted: Submitted) -> str | None:
        """The batch of a submission recorded without one: this run's create in flight, else the
        provider's batch carrying its metadata; None when it was never created."""
        known = self._batch_of.get(submitted.submission)
        if known is None:
            known = self._track(submitted.submission, self._spawn(self._look_up(spec, submitted)))
        return await asyncio.shield(known)

    def _track(self, submission: str, batch_id: asyncio.Future[str | None]) -> asyncio.Future[str | None]:
        """Keep a submission's batch id as it becomes known; a failure is forgotten, so it is asked again."""
        self._batch_of[submission] = batch_id

        def settled(done: asyncio.Future[str | None]) -> None:
            if done.cancelled() or done.exception() is not None:
                self._batch_of.pop(submission, None)

        batch_id.add_done_callback(settled)
        return batch_id

    async def _look_up(self, spec: ModelSpec, submitted: Submitted) -> str | None:
        client = self.http.client(spec)
        try:
            async for batch in client.batches.list(limit=LIST_PAGE):
                if (batch.metadata or {}).get(METADATA_KEY) == submitted.submission:
                    self.store.created(submitted.submission, batch.id)
                    return batch.id
                if batch.created_at and batch.created_at < submitted.created - CLOCK_SLACK:
                    break  # newest first: the rest are older than the submission
        except (openai.APIStatusError, openai.APIConnectionError) as exc:
            fault = transport_error(exc, spec, self.address(spec))
            if fault.retryable:
                raise TransportError(f"could not look for the batch of submission {submitted.submission} "
                                     f"({_said(fault)})", retryable=True, wait=fault.wait) from None  # fmt: skip
            self._warn_once(spec, "listing", f"the batches of {self.address(spec)} cannot be listed ({_said(fault)}): "
                            "requests of a run killed while creating a batch are submitted anew, "
                            "and that batch, if it was created, is paid twice")  # fmt: skip
        self.store.abandon(submitted.submission)
        return None

    def _warn_once(self, spec: ModelSpec, what: str, message: str) -> None:
        if (spec.id, what) not in self._warned:
            self._warned.add((spec.id, what))
            message = redact(inert(message))  # it quotes the provider, which may echo the key
            self.warnings.append(f"'{spec.id}': {message}")
            log.warning("'%s': %s", spec.id, message)

    def _enqueue(self, waiting: _Waiting) -> None:
        spec = waiting.request.spec
        queue = self._queues.setdefault(spec.id, [])
        queue.append(waiting)
        if len(queue) >= spec.batch_size:
            self._submit(spec)
        elif spec.id not in self._timers:
            self._timers[spec.id] = asyncio.get_running_loop().call_later(spec.batch_flush, self._submit, spec)

    def _submit(self, spec: ModelSpec) -> None:
        timer = self._timers.pop(spec.id, None)
        if timer is not None:
            timer.cancel()
        queue = [w for w in self._queues.pop(spec.id, []) if not w.answer.done()]  # gone: deadline passed
        for start in range(0, len(queue), spec.batch_size):
            self._spawn(self._run_batch(spec, queue[start : start + spec.batch_size]))

    def _spawn(self, work: Any) -> asyncio.Future[Any]:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _run_batch(self, spec: ModelSpec, entries: list[_Waiting]) -> None:
        lines: dict[str, dict] = {}
        for entry in entries:
            lines.setdefault(entry.request.key, {
                "custom_id": entry.request.key, "method": "POST", "url": "/v1/chat/completions",
                "body": entry.request.body,
            })  # fmt: skip
        data = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines.values()).encode()
        client = self.http.client(spec)
        submission = None
        try:
            uploaded = await client.files.create(file=("requests.jsonl", data, "application/jsonl"), purpose="batch")
            submission = self.store.begin(spec.id, list(lines))
            made = self._track(submission, asyncio.get_running_loop().create_future())
            batch = await client.batches.create(
                input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h",
                metadata={METADATA_KEY: submission},
            )  # fmt: skip
        except (openai.APIStatusError, openai.APIConnectionError) as exc:
            fault = transport_error(exc, spec, self.address(spec))
            unsent = TransportError(f"the batch could not be submitted ({_said(fault)})",
                                    retryable=fault.retryable, wait=fault.wait)  # fmt: skip
            if submission is not None:
                made.set_exception(unsent)
                if isinstance(exc, openai.APIStatusError) and exc.status_code < 500:
                    self.store.abandon(submission)  # refused: no batch was created
                # else it may have been created: a retry of these requests looks for it
            _fail(entries, unsent)
            return
        self.store.created(submission, batch.id)
        made.set_result(batch.id)
        if (batch.metadata or {}).get(METADATA_KEY) != submission:
            self._warn_once(spec, "metadata", f"{self.address(spec)} did not keep the batch's metadata: "
                            "requests of a run killed while creating a batch are submitted anew, "
                            "and that batch is paid twice")  # fmt: skip
        self.counters.submitted += 1
        self._wait_on(batch.id, submission, entries, resumed=False)

    def _wait_on(self, batch_id: str, submission: str, entries: list[_Waiting], *, resumed: bool) -> None:
        """Have these requests answered by this submission's batch's lines, polling it unless already polled."""
        polled = (batch_id, submission) in self._waiting
        waiting = self._waiting.setdefault((batch_id, submission), {})
        for entry in entries:
            waiting.setdefault(entry.request.key, []).append(entry)
        if not polled:
            self.counters.resumed += resumed
            self._spawn(self._poll(entries[0].request.spec, batch_id, submission))

    async def _poll(self, spec: ModelSpec, batch_id: str, submission: str) -> None:
        client = self.http.client(spec)
        wait = min(POLL_FIRST, spec.batch_poll_max)
        slot = (batch_id, submission)
        try:
            while True:
                await asyncio.sleep(wait)
                if all(w.answer.done() for ws in self._waiting[slot].values() for w in ws):
                    return  # nobody waits any more (deadlines): the batch stays kept for the next run
                try:
                    batch = await client.batches.retrieve(batch_id)
                    self._latest[batch_id] = f"status {batch.status} at the latest poll"
                    if (batch.metadata or {}).get(METADATA_KEY, submission) != submission:
                        self._gone(spec, slot, "its id now names another submission's batch")
                        return
                    if batch.status in FINISHED:
                        outputs, unread = await self._lines(client, batch.output_file_id)
                        errors, unread_errors = await self._lines(client, batch.error_file_id)
                        break
                except (openai.APIStatusError, openai.APIConnectionError) as exc:
                    fault = transport_error(exc, spec, self.address(spec))
                    self._latest[batch_id] = f"the latest poll {_said(fault)}"
                    if isinstance(exc, openai.APIStatusError) and exc.status_code in GONE:
                        self._gone(spec, slot, _said(fault))
                        return
                    if not fault.retryable:
                        self.counters.done += 1
                        unpolled = TransportError(f"batch {batch_id} could not be polled ({_said(fault)}); it stays "
                                                  "kept, and the next run polls it again", retryable=False)  # fmt: skip
                        _fail([w for ws in self._waiting[slot].values() for w in ws], unpolled)
                        return
                wait = min(wait * 1.5, spec.batch_poll_max)
            self._answer(slot, batch, outputs, errors, unread + unread_errors)
        except Exception as exc:  # an answer of a shape nobody foresaw: its calls must not wait for their deadline
            self.counters.done += 1
            broken = TransportError(f"batch {batch_id} could not be read ({type(exc).__name__}: {exc})", retryable=False)
            _fail([w for ws in self._waiting.get(slot, {}).values() for w in ws], broken)
        finally:
            self._waiting.pop(slot, None)

    def _gone(self, spec: ModelSpec, slot: tuple[str, str], why: str) -> None:
        """A batch the provider does not know: forget it and submit its waiting requests again (once each)."""
        batch_id, submission = slot
        self.store.gone(submission)
        self.counters.done += 1
        self._warn_once(spec, f"gone {batch_id}", f"batch {batch_id} is not known to {self.address(spec)} ({why}): "
                        "it is forgotten, and its requests not yet answered are submitted again")  # fmt: skip
        again = TransportError(f"batch {batch_id} is not known to the provider ({why}), "
                               "and it held requests already submitted again after their first batch was gone",
                               retryable=False)  # fmt: skip
        for entries in self._waiting[slot].values():
            for entry in entries:
                if entry.answer.done():
                    continue
                if entry.resubmitted:
                    _fail([entry], again)
                else:
                    entry.resubmitted = True
                    self._enqueue(entry)

    @staticmethod
    async def _lines(client: openai.AsyncOpenAI, file_id: str | None) -> tuple[list[dict], int]:
        """The file's lines that are JSON objects, and how many others it had (their requests then
        have no line, and error naming the batch: `_answer`)."""
        if not file_id:
            return [], 0
        content = await client.files.content(file_id)
        lines, unread = [], 0
        for _, text in json_lines(content.text):
            try:
                line = json.loads(text)
            except ValueError:
                line = None
            if isinstance(line, dict):
                lines.append(line)
            else:
                unread += 1
        return lines, unread

    def _answer(self, slot: tuple[str, str], batch: Any, outputs: list[dict], errors: list[dict], unread: int = 0) -> None:
        """Answer or fail every waiting request from the finished batch's lines (`unread`: lines of
        its files that were not JSON objects)."""
        batch_id = slot[0]
        waiting = self._waiting[slot]
        for line in outputs + errors:
            key = str(line.get("custom_id"))
            response = line.get("response") or {}
            if response.get("status_code") == 200 and not line.get("error"):
                live = [entry for entry in waiting.pop(key, []) if not entry.answer.done()]
                for entry in live:
                    _settle(entry, lambda e=entry: _read(e.request, batch_id, response.get("body")))
                if any(entry.answer.exception() is not None for entry in live):
                    self.store.forget([key])  # not a reply: asking again submits it anew
                else:
                    # paid: kept until a call reads it (`send`: one given up first leaves it for whoever
                    # asks), with a key the provider echoed masked as a read reply masks it
                    self.store.answered(key, mask_secrets(json.dumps(response.get("body"))))
            else:
                self.store.forget([key])
                _fail(waiting.pop(key, []), _line_fault(batch_id, line))
        reason = _batch_reason(batch)
        if unread:
            reason += f"; {unread} line(s) of its output and error files were not JSON objects"
        for key, entries in waiting.items():
            self.store.forget([key])
            missing = f"batch {batch_id} ended {batch.status} without this line{reason}"
            _fail(entries, TransportError(missing, retryable=batch.status == "expired"))
        waiting.clear()
        self.counters.done += 1  # last: a line that breaks the reading counts it in `_poll` instead

    async def aclose(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.store.close()


def _read(request: Request, batch_id: str, body: Any) -> Reply:
    try:
        return read_reply(json.dumps(body).encode(), "application/json", default_model=request.spec.model,
                          accept_refusal=request.accept_refusal)  # fmt: skip
    except BadReply as exc:
        raise TransportError(f"in batch {batch_id}: {exc}", retryable=exc.transient, usage=exc.usage) from exc


def _settle(entry: _Waiting, reply: Any) -> None:
    if entry.answer.done():
        return
    try:
        entry.answer.set_result(reply())
    except TransportError as fault:
        entry.answer.set_exception(fault)


def _fail(entries: list[_Waiting], fault: TransportError) -> None:
    for entry in entries:
        if not entry.answer.done():
            entry.answer.set_exception(TransportError(_said(fault), retryable=fault.retryable, wait=fault.wait))


def _said(fault: TransportError) -> str:
    """A fault's own words, without the "failed: " TransportError put before them."""
    return str(fault).removeprefix("failed: ")


def _line_fault(batch_id: str, line: dict) -> TransportError:
    """A failed line as its request's fault: the batch id and the provider's code and message."""
    error = line.get("error") or {}
    response = line.get("response") or {}
    if error:
        code = str(error.get("code") or "error")
        return TransportError(f"in batch {batch_id}, the line failed: {code}: {error.get('message', '')}",
                              retryable=code in RETRYABLE_CODES)  # fmt: skip
    status = int(response.get("status_code") or 0)
    body = response.get("body") or {}
    message = body.get("error", {}).get("message", "") if isinstance(body, dict) else ""
    return TransportError(f"in batch {batch_id}, the line returned HTTP {status}: {message}",
                          retryable=status in RETRYABLE_STATUS or status >= 500)  # fmt: skip


def _batch_reason(batch: Any) -> str:
    errors = getattr(batch, "errors", None)
    data = getattr(errors, "data", None) or []
    said = "; ".join(f"{e.code}: {e.message}" for e in data if e is not None)
    return f" ({said})" if said else ""
