"""Per-endpoint concurrency caps whose waiters are served in the order the run needs them, and the
hold of an endpoint that asked its callers to wait."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import random
import time
from collections.abc import AsyncIterator, Callable

HOLD_JITTER = 0.1
"""An endpoint's hold lasts the wait it asked for plus up to this share of it, never less."""


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


class EndpointHold:
    """Until when no request may go to one endpoint, after it refused one asking to wait (a 429
    with Retry-After).

    The wait is the endpoint's word to every caller, not only to the refused one: over a rate
    limit, any request sent before the wait is over is refused too. So every call to the endpoint,
    retries and first attempts alike, waits until the longest wait asked so far is over, plus up
    to HOLD_JITTER of it (never less than asked), which keeps clients of one endpoint that were
    refused together from coming back together. The held calls then start together in a limit
    window the hold has emptied; sent as each call's own wait ran out instead, the retries met the
    calls that had kept sending and were refused again until some ran out of attempts.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic, jitter: Callable[[], float] = random.random):
        self._clock = clock
        self._jitter = jitter
        self.until = 0.0
        """No request to the endpoint goes before this time (on the clock given)."""

    def refused(self, wait: float) -> float:
        """The endpoint refused a request asking to wait `wait` seconds: hold every call. Returns the
        end of the hold."""
        self.until = max(self.until, self._clock() + wait * (1 + HOLD_JITTER * self._jitter()))
        return self.until
