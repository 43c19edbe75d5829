"""Per-endpoint concurrency caps whose waiters are served in the order the run needs them."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from collections.abc import AsyncIterator


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
