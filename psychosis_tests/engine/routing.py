"""The run's transport: each request goes the way its model's entry asks.

A model with `batch: true` (judges only; `engine.plan` refuses it on a target or user model) is
sent through the Batch API (`engine.batch_transport`), every other one as one chat-completions
request per call (`engine.chat_completions`). The batch side is built, and its store next to the
response cache opened, only when a batched model is first called.
"""

from __future__ import annotations

from pathlib import Path

from psychosis_tests.engine.batch_store import BatchStore, store_path
from psychosis_tests.engine.batch_transport import BatchCounters, BatchTransport
from psychosis_tests.engine.chat_completions import ChatCompletions
from psychosis_tests.engine.transport import Request, Transport
from psychosis_tests.engine.wire import Reply
from psychosis_tests.inputs.models import ModelSpec


class RoutedTransport(Transport):
    """Chat completions, or batches for the models that ask for them."""

    def __init__(self, base_urls: dict[str, str] | None, cache_path: Path):
        self.http = ChatCompletions(base_urls)
        self.cache_path = cache_path
        """The response cache's file: the batch store is kept next to it (`batch_store.store_path`)."""
        self.batches: BatchTransport | None = None

    def _for(self, spec: ModelSpec) -> Transport:
        if not spec.batch:
            return self.http
        if self.batches is None:
            self.batches = BatchTransport(self.http, BatchStore(store_path(self.cache_path)))
        return self.batches

    @property
    def warnings(self) -> list[str]:
        """What the run's reports must say about how its requests were sent (batches that may be paid twice)."""
        return list(self.batches.warnings) if self.batches is not None else []

    @property
    def batch_counters(self) -> BatchCounters:
        return self.batches.counters if self.batches is not None else BatchCounters()

    def address(self, spec: ModelSpec) -> str:
        return self._for(spec).address(spec)

    def concurrency(self, spec: ModelSpec) -> int:
        return self._for(spec).concurrency(spec)

    async def send(self, request: Request) -> Reply:
        return await self._for(request.spec).send(request)

    def waiting_on(self, request: Request) -> str:
        """Where a call that gave up waiting stood: the batch a batched call waited on; "" otherwise."""
        return self.batches.waiting_on(request) if request.spec.batch and self.batches is not None else ""

    async def aclose(self) -> None:
        if self.batches is not None:
            await self.batches.aclose()
        await self.http.aclose()
