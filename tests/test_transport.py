"""The transport seam: the provider's cache, retries, counters and error text over a transport
that is not HTTP, one that answers in bulk the way a batch API would (queue, submit, answer)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from psychosis_tests.common.errors import ModelCallError
from psychosis_tests.engine.cache import ResponseCache
from psychosis_tests.engine.limits import HOLD_JITTER, EndpointHold
from psychosis_tests.engine.providers import Provider
from psychosis_tests.engine.transport import Request, Transport, TransportError
from psychosis_tests.engine.wire import Reply
from psychosis_tests.inputs.models import ModelSpec
from psychosis_tests.inputs.usage import Usage

SPEC = ModelSpec(id="queued", model="m", base_url="queue://bulk", max_retries=2)


class BulkTransport(Transport):
    """Queues each request; `submit` answers everything queued at once. A request whose last
    message names a fault in `faults` gets it (the first time only when `once`)."""

    def __init__(self, faults: dict[str, TransportError], *, once: bool = True):
        self.faults = faults
        self.once = once
        self.queued: list[tuple[Request, asyncio.Future[Reply]]] = []
        self.submitted: list[int] = []
        """How many requests each submission carried."""

    def address(self, spec: ModelSpec) -> str:
        return spec.base_url or ""

    def concurrency(self, spec: ModelSpec) -> int:
        return 100  # every request may wait in the queue, whatever the model's HTTP cap

    async def send(self, request: Request) -> Reply:
        answer: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self.queued.append((request, answer))
        return await answer

    def submit(self) -> None:
        batch, self.queued = self.queued, []
        self.submitted.append(len(batch))
        for request, answer in batch:
            said = request.body["messages"][-1]["content"]
            fault = self.faults.pop(said, None) if self.once else self.faults.get(said)
            if fault is not None:
                answer.set_exception(fault)
            else:
                answer.set_result(Reply(f"re: {said}", "stop", "m-1", usage=Usage(calls=1, prompt_tokens=3)))

    async def aclose(self) -> None:
        pass


async def ask_all(provider: Provider, transport: BulkTransport, words: list[str]) -> list:
    """Ask one call per word at once; submit the queue whenever every open call is waiting in it."""
    calls = [
        asyncio.ensure_future(
            provider.chat(SPEC, [{"role": "user", "content": w}], role="judge", call_label=f"call {w}", conversation=w)
        )
        for w in words
    ]
    while not all(c.done() for c in calls):
        await asyncio.sleep(0.001)
        if transport.queued and len(transport.queued) == sum(not c.done() for c in calls):
            transport.submit()
    return await asyncio.gather(*calls, return_exceptions=True)


async def test_a_bulk_transport_gets_the_providers_retries_counts_and_cache(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "c.sqlite3")
    transport = BulkTransport({"b": TransportError("line b expired", retryable=True, wait=0.0)})
    provider = Provider(cache=cache, cache_mode="use", transport=transport)
    answers = await ask_all(provider, transport, ["a", "b", "c"])
    assert [a.text for a in answers] == ["re: a", "re: b", "re: c"]
    assert transport.submitted == [3, 1]  # b failed in the first batch and went into the next
    assert (provider.counters.answered, provider.counters.retries, provider.counters.errors) == (3, 1, 0)
    assert answers[0].usage == Usage(calls=1, prompt_tokens=3) and not answers[0].cached

    again = BulkTransport({})
    replayed = await ask_all(Provider(cache=cache, cache_mode="replay", transport=again), again, ["a", "b", "c"])
    assert [(r.text, r.cached) for r in replayed] == [("re: a", True), ("re: b", True), ("re: c", True)]
    assert again.submitted == []
    cache.close()


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        (TransportError("line x was cancelled", retryable=False), "failed: line x was cancelled (not retryable, 1 attempt)"),
        (TransportError("returned a broken line", retryable=True, wait=0.0), "returned a broken line, after 3 attempts"),
    ],
)
async def test_a_failed_request_errors_its_call_in_the_providers_words(fault: TransportError, message: str) -> None:
    transport = BulkTransport({"x": fault}, once=False)
    provider = Provider(cache=None, cache_mode="off", transport=transport)
    ok, failed = await ask_all(provider, transport, ["fine", "x"])
    assert ok.text == "re: fine"
    assert isinstance(failed, ModelCallError)
    assert str(failed) == f"call x: 'queued' at queue://bulk {message}"
    assert provider.counters.errors == 1


class PushingBack(Transport):
    """One request at a time per model; the first request is refused with a 429 asking to wait 0.05 s."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, float]] = []
        """Each request's last message, and when it came (the clock the provider waits on)."""

    def address(self, spec: ModelSpec) -> str:
        return spec.base_url or ""

    def concurrency(self, spec: ModelSpec) -> int:
        return 1

    async def send(self, request: Request) -> Reply:
        said = request.body["messages"][-1]["content"]
        self.sent.append((said, time.monotonic()))
        if len(self.sent) == 1:
            raise TransportError("HTTP 429: rate limited", retryable=True, wait=0.05)
        return Reply(f"re: {said}", "stop", "m-1")

    async def aclose(self) -> None:
        pass


async def test_a_call_waiting_to_retry_keeps_its_slot() -> None:
    # Else a call not yet started takes it, and the endpoint that asked to wait gets the same
    # number of requests: under a rate limit each retry must win its turn again, and runs out.
    transport = PushingBack()
    provider = Provider(cache=None, cache_mode="off", transport=transport)
    calls = [
        provider.chat(SPEC, [{"role": "user", "content": w}], role="target", call_label=w, conversation=w)
        for w in ("a", "b")
    ]
    answers = await asyncio.gather(*calls)
    assert [a.text for a in answers] == ["re: a", "re: b"]
    assert [said for said, _ in transport.sent] == ["a", "a", "b"]
    assert provider.counters.retries == 1


async def test_identical_calls_at_once_send_one_request_and_after_its_failure_one_more() -> None:
    """Three calls with one cache key at once: the first is sent and the others wait for its answer.
    When it fails, one waiting call sends its own request and the last shares that one's answer."""
    transport = BulkTransport({"x": TransportError("line x was cancelled", retryable=False)})
    provider = Provider(cache=None, cache_mode="off", transport=transport)
    calls = [
        asyncio.ensure_future(provider.chat(SPEC, [{"role": "user", "content": "x"}], role="judge", call_label="call", conversation="c"))
        for _ in range(3)
    ]
    for _ in range(2):  # each round: let every call reach the queue or its wait, then answer the queue
        for _ in range(20):
            await asyncio.sleep(0)
        transport.submit()
    answers = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 5)
    assert isinstance(answers[0], ModelCallError)
    assert [a.text for a in answers[1:]] == ["re: x", "re: x"]
    assert transport.submitted == [1, 1]
    assert (provider.counters.answered, provider.counters.cache_hits, provider.counters.errors) == (1, 1, 1)


async def test_a_429_holds_every_call_to_its_endpoint_not_only_the_refused_one() -> None:
    # Sent as each refused call's own wait ran out, the retries met the calls that had kept
    # sending, and under a shared rate limit were refused again until some ran out of attempts.
    transport = PushingBack()
    provider = Provider(cache=None, cache_mode="off", transport=transport)
    one, other = (ModelSpec(id=name, model="m", base_url="http://shared/v1") for name in ("one", "other"))
    calls = [
        provider.chat(spec, [{"role": "user", "content": said}], role="target", call_label=said, conversation=said)
        for spec, said in ((one, "a"), (other, "b"))
    ]
    answers = await asyncio.gather(*calls)
    assert [a.text for a in answers] == ["re: a", "re: b"]
    (first, refused_at), *later = transport.sent
    assert first == "a" and sorted(said for said, _ in later) == ["a", "b"]
    # "b" is another model with a cap of its own, free all along: it waited out the hold too.
    assert all(at >= refused_at + 0.05 for _, at in later)
    assert provider.counters.retries == 1



async def test_a_429_on_a_calls_last_attempt_holds_its_endpoint_too() -> None:
    transport = PushingBack()
    provider = Provider(cache=None, cache_mode="off", transport=transport)
    last = ModelSpec(id="one", model="m", base_url="http://shared/v1", max_retries=0)
    other = ModelSpec(id="other", model="m", base_url="http://shared/v1")
    refused, answered = await asyncio.gather(
        *(
            provider.chat(spec, [{"role": "user", "content": said}], role="target", call_label=said, conversation=said)
            for spec, said in ((last, "a"), (other, "b"))
        ),
        return_exceptions=True,
    )
    assert isinstance(refused, ModelCallError) and answered.text == "re: b"
    (_, refused_at), (said, at) = transport.sent
    assert said == "b" and at >= refused_at + 0.05  # the wait asked for holds the other model as well

def test_an_endpoints_hold_is_its_longest_wait_plus_jitter_never_less() -> None:
    now, draw = [100.0], [0.0]
    hold = EndpointHold(clock=lambda: now[0], jitter=lambda: draw[0])
    assert hold.until <= now[0]  # an endpoint that never refused holds nothing
    assert hold.refused(1.0) == 101.0  # the least jitter: exactly the wait asked
    draw[0] = 1.0
    now[0] = 100.5
    assert hold.refused(1.0) == pytest.approx(100.5 + 1.0 * (1 + HOLD_JITTER))  # the most
    draw[0] = 0.5
    assert hold.refused(0.2) == pytest.approx(100.5 + 1.0 * (1 + HOLD_JITTER))  # a shorter wait does not cut it
