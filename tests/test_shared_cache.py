"""Two runs on one response cache file at once pay once per request: a run claims a key before it
calls, and another run that meets a live claim waits for the answer instead of calling.

Each "run" here is a Provider with a ResponseCache of its own on one file (what two processes
have); the run that calls first claims as another live process would (this one's parent's id),
since a claim with this process's own id is taken for a stopped process's. Nothing is timed:
calls are counted, and the clock that dates claims is a fake one.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from psychosis_tests.common.errors import ModelCallError
from psychosis_tests.engine import providers
from psychosis_tests.engine.budget import Budget
from psychosis_tests.engine.cache import CachedResponse, ResponseCache
from psychosis_tests.engine.providers import Provider
from psychosis_tests.engine.transport import Request, TransportError
from psychosis_tests.engine.wire import Reply
from psychosis_tests.inputs.models import ModelSpec
from psychosis_tests.inputs.usage import Price, Usage

SPEC = ModelSpec(id="held", model="m", base_url="held://", max_retries=0, deadline=60)
MESSAGES = [{"role": "user", "content": "hello"}]


@pytest.fixture(autouse=True)
def _no_poll_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(providers, "CLAIM_POLL_FIRST", 0.0)  # a look between every other task's steps


class Held:
    """Answers each request when the test says so (`answer` or `fail`), and counts requests."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.sent: list[Request] = []
        self._pending: list[asyncio.Future[Reply]] = []

    def address(self, spec: ModelSpec) -> str:
        return spec.base_url or ""

    def concurrency(self, spec: ModelSpec) -> int:
        return 4

    async def send(self, request: Request) -> Reply:
        self.sent.append(request)
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self._pending.append(future)
        return await future

    def answer(self) -> None:
        self._pending.pop(0).set_result(Reply(f"from {self.name}", "stop", "m-1"))

    def fail(self) -> None:
        self._pending.pop(0).set_exception(TransportError("HTTP 400: refused", retryable=False))

    async def aclose(self) -> None:
        pass


class Clock:
    def __init__(self, now: float = 1000.0, tick: float = 0.0):
        self.now = now
        self.tick = tick
        """Seconds every reading moves the clock on (a wait that makes progress through time)."""

    def __call__(self) -> float:
        self.now += self.tick
        return self.now


def run(path: Path, name: str, clock: Clock | None = None, mode: str = "use", pid: int | None = None) -> tuple[Provider, Held]:
    cache = ResponseCache(path, clock=clock or Clock())
    cache.pid = pid or cache.pid
    transport = Held(name)
    return Provider(cache=cache, cache_mode=mode, transport=transport), transport  # type: ignore[arg-type]


def ask(provider: Provider, spec: ModelSpec = SPEC) -> asyncio.Future:
    return asyncio.ensure_future(provider.chat(spec, MESSAGES, role="target", call_label="call", conversation="c"))


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def claims(path: Path) -> int:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT COUNT(*) FROM claims").fetchone()[0]


def dead_pid() -> int:
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()
    return finished.pid


async def test_a_run_waits_for_the_answer_another_run_is_calling_for(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite3"
    (first, first_endpoint), (second, second_endpoint) = run(path, "first", pid=os.getppid()), run(path, "second")
    calling = ask(first)
    await settle()
    waiting = ask(second)
    await settle()
    assert (len(first_endpoint.sent), len(second_endpoint.sent)) == (1, 0)
    first_endpoint.answer()
    paid, shared = await calling, await waiting
    assert (paid.text, paid.cached) == ("from first", False)
    assert (shared.text, shared.cached) == ("from first", True)
    assert (second.counters.cache_hits, second.counters.answered) == (1, 0)
    assert second_endpoint.sent == [] and claims(path) == 0


async def test_a_failed_call_releases_its_claim_and_the_waiting_run_calls_itself(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite3"
    (first, first_endpoint), (second, second_endpoint) = run(path, "first", pid=os.getppid()), run(path, "second")
    calling = ask(first)
    await settle()
    waiting = ask(second)
    await settle()
    first_endpoint.fail()
    with pytest.raises(ModelCallError):
        await calling
    await settle()
    assert len(second_endpoint.sent) == 1  # no answer was kept: it scores its own, never a failure
    second_endpoint.answer()
    assert ((await waiting).text, len(first_endpoint.sent)) == ("from second", 1)
    assert claims(path) == 0


async def test_a_cancelled_call_releases_its_claim(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite3"
    first, _ = run(path, "first", pid=os.getppid())
    calling = ask(first)
    await settle()
    assert claims(path) == 1
    calling.cancel()
    await settle()
    assert claims(path) == 0


async def test_a_claim_whose_process_stopped_is_taken_over_at_once(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite3"
    killed, killed_endpoint = run(path, "killed")
    killed.cache.pid = dead_pid()  # type: ignore[union-attr]  # killed (kill -9) while calling: its claim stays
    calling = ask(killed)
    await settle()
    assert len(killed_endpoint.sent) == 1 and claims(path) == 1
    second, endpoint = run(path, "second")
    waiting = ask(second)
    await settle()
    assert len(endpoint.sent) == 1  # at once, not after the dead run's deadline
    endpoint.answer()
    assert (await waiting).text == "from second"
    calling.cancel()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
async def test_a_claim_of_a_killed_process_not_yet_reaped_is_taken_over_at_once(tmp_path: Path) -> None:
    """A process killed whose parent has not waited for it (a zombie: its id still answers signal 0),
    as under a container's first process that reaps no orphans; it was waited for its deadline."""
    path = tmp_path / "c.sqlite3"
    killed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        killed.kill()
        stat = Path(f"/proc/{killed.pid}/stat")
        while stat.read_text().rsplit(")", 1)[1].split()[0] != "Z":
            await asyncio.sleep(0.01)
        before, now = ResponseCache(path), ResponseCache(path)
        before.pid = killed.pid
        assert before.claim("k", 60)
        assert not now.claimed("k") and now.claim("k", 60)
    finally:
        killed.wait()


async def test_a_claim_with_this_process_id_is_a_stopped_process_and_taken_over(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite3"
    before, now = ResponseCache(path), ResponseCache(path)  # a container's run killed, then one started afresh
    assert before.pid == now.pid and before.claim("k", 60)
    assert not now.claimed("k") and now.claim("k", 60)


async def test_a_claim_whose_time_ran_out_is_taken_over(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite3"
    clock = Clock()
    holder, other = ResponseCache(path, clock=clock), ResponseCache(path, clock=clock)
    holder.pid = os.getppid()
    assert holder.claim("k", 5) and not other.claim("k", 5) and other.claimed("k")
    clock.now += 4.9
    assert not other.claim("k", 5)
    clock.now += 0.1  # the claim's call would have given up by now: its deadline is past
    assert not other.claimed("k") and other.claim("k", 5)
    assert not holder.claim("k", 5) and holder.claimed("k")  # the new owner's claim stands


async def test_an_answered_key_is_never_claimed(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite3"
    first, other = ResponseCache(path), ResponseCache(path)
    first.put("k", CachedResponse("kept", "v1"))
    assert not other.claim("k", 60) and not other.claimed("k")
    first.pid = dead_pid()
    assert first.claim("j", 60)
    first.put("j", CachedResponse("kept", "v1"))  # answered; killed before its release
    assert not other.claim("j", 60)  # taking the dead claim over would pay for a kept answer again
    assert other.get("j") == CachedResponse("kept", "v1")


async def test_a_claim_its_owner_stops_renewing_lapses_and_the_waiting_run_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(providers, "CLAIM_RENEW_EVERY", 10_000.0)  # an owner that renews no more (stopped, on another host)
    path = tmp_path / "c.sqlite3"
    first, _ = run(path, "first", pid=os.getppid())
    calling = ask(first)
    await settle()
    second, endpoint = run(path, "second", Clock(tick=1.0))  # every look at the clock: a second on
    waiting = ask(second)
    for _ in range(500):
        await asyncio.sleep(0)
        if endpoint.sent:
            break
    assert len(endpoint.sent) == 1  # the lease (60 s) ran out: the claim was taken over
    endpoint.answer()
    assert (await waiting).text == "from second"
    calling.cancel()


async def test_a_claim_stays_while_its_call_waits_for_a_slot_past_any_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim is made before the call queues for its endpoint's slot: had it lasted the call's
    deadline only, a long queue let another run take it over and pay for the request as well."""
    monkeypatch.setattr(providers, "CLAIM_RENEW_EVERY", 0.0)
    path = tmp_path / "c.sqlite3"
    clock = Clock()
    first, first_endpoint = run(path, "first", clock, pid=os.getppid())
    first_endpoint.concurrency = lambda spec: 1  # type: ignore[method-assign]  # one call at a time
    busy = asyncio.ensure_future(
        first.chat(SPEC, [{"role": "user", "content": "other"}], role="target", call_label="busy", conversation="b")
    )
    await settle()
    queued = ask(first)  # claims its key, then queues behind `busy`
    await settle()
    assert len(first_endpoint.sent) == 1 and claims(path) == 2
    clock.now += 10 * SPEC.deadline  # `busy` holds the slot far longer than any deadline or lease
    second, second_endpoint = run(path, "second", clock)
    waiting = ask(second)
    await settle()
    assert second_endpoint.sent == []  # the first run is still to make this call: the second waits
    first_endpoint.answer()  # `busy` ends; `queued` is sent and answered
    await settle()
    first_endpoint.answer()
    assert ((await queued).text, (await waiting).text) == ("from first", "from first")
    assert second_endpoint.sent == [] and len(first_endpoint.sent) == 2
    busy.cancel()


async def test_refresh_makes_no_claim_and_waits_for_none(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite3"
    first, first_endpoint = run(path, "first", pid=os.getppid())
    calling = ask(first)
    await settle()
    refreshing, endpoint = run(path, "refresh", mode="refresh")
    refreshed = ask(refreshing)
    await settle()
    assert len(endpoint.sent) == 1 and claims(path) == 1  # refresh means: ask again
    endpoint.answer()
    first_endpoint.answer()
    assert ((await refreshed).text, (await calling).text) == ("from refresh", "from first")


async def test_an_answer_another_run_paid_for_is_free_and_never_admitted_under_max_cost(tmp_path: Path) -> None:
    """--max-cost on both runs: the waiting run's conversation, which its cap would not admit, takes
    the other run's answer without a charge and stays unadmitted (its cap is for calls it pays)."""
    path = tmp_path / "c.sqlite3"
    priced = SPEC.model_copy(update={"price": Price(input_per_mtok=1000, output_per_mtok=1000)})
    (first, first_endpoint), (second, second_endpoint) = run(path, "first", pid=os.getppid()), run(path, "second")
    for provider in (first, second):
        provider.budget = Budget(cap=0.001)
        provider.budget.expect("c", 0.01)  # more than the cap: admitted only as the run's first conversation
        provider.budget.begin("c")
    calling = ask(first, priced)
    await settle()
    waiting = ask(second, priced)
    await settle()
    first_endpoint._pending.pop(0).set_result(Reply("from first", "stop", "m-1", usage=Usage(calls=1, prompt_tokens=10, completion_tokens=10)))
    await calling
    second.budget.spent = 1.0  # had the answer been admitted, it would be refused
    shared = await waiting
    assert (shared.text, shared.cached, second_endpoint.sent) == ("from first", True, [])
    assert first.budget.spent == pytest.approx(0.02) and second.budget.spent == 1.0
    assert "c" in second.budget._pending and "c" not in second.budget._running  # never admitted
