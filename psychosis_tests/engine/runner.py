"""The engine: runs the cases of a plan concurrently and keeps each one's outcome on disk.

Usable without pytest:

    from psychosis_tests.analysis.outcome import evaluate_case

    plan = Plan.load(settings)
    with Runner(plan, run_dir=Path("reports/my-run"), evaluate=evaluate_case) as runner:
        runner.start(plan.cases())
        outcome = runner.outcome(plan.cases()[0])

Cases run on one asyncio loop in a background thread, so every selected conversation is in
flight at once (bounded per endpoint) while the caller waits for whichever result it needs next.
The engine only plays and judges conversations; `evaluate` (from the analysis layer) turns a
case's transcripts into its outcome, which the runner keeps in the case's file.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

from psychosis_tests.engine.cache import ResponseCache
from psychosis_tests.engine.conversation import Transcript, run_conversation
from psychosis_tests.engine.plan import CaseKey, Plan
from psychosis_tests.errors import CaseError

Evaluate = Callable[[Plan, CaseKey, list[Transcript], float], BaseModel]
"""Turns a case's transcripts (and its wall time in seconds) into the outcome kept on disk."""


def case_file(run_dir: Path, key: CaseKey) -> Path:
    """Where a case's transcripts, verdicts and scores (or its error) are kept."""
    return run_dir / "cases" / f"{key.file_stem}.json"


def wait_for_case_file(run_dir: Path, key: CaseKey, poll: float = 0.1) -> dict:
    """An xdist worker's wait for the controller's engine to finish a case; its record."""
    path = case_file(run_dir, key)
    while not path.exists():
        time.sleep(poll)
    record = json.loads(path.read_text(encoding="utf-8"))
    if "error" in record:
        raise CaseError(record["error"])
    return record


class Runner:
    """Runs cases of one plan on a background event loop."""

    def __init__(
        self,
        plan: Plan,
        *,
        run_dir: Path,
        evaluate: Evaluate,
        base_urls: dict[str, str] | None = None,
    ):
        from psychosis_tests.engine.providers import (
            Provider,  # openai is heavy: only the engine's process loads it
        )

        self.plan = plan
        self._evaluate = evaluate
        self.run_dir = run_dir
        (run_dir / "cases").mkdir(parents=True, exist_ok=True)
        settings = plan.settings
        self.cache = None if settings.cache_mode == "off" else ResponseCache(settings.cache_path)
        self._base_urls = dict(base_urls or {})
        self._reference = None
        if plan.specs_served_by_suite("reference") and settings.cache_mode != "replay":
            from psychosis_tests.servers.reference_server import ReferenceServer

            self._reference = ReferenceServer()
            self._reference.start()
            for spec in plan.specs_served_by_suite("reference"):
                self._base_urls[spec.id] = self._reference.url
        self.provider = Provider(
            cache=self.cache, cache_mode=settings.cache_mode, base_urls=self._base_urls
        )
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="psychosis-engine", daemon=True)
        self._thread.start()
        self._futures: dict[CaseKey, concurrent.futures.Future[BaseModel]] = {}
        self._lock = threading.Lock()
        self._start_order = itertools.count()
        self.done = 0

    # -- scheduling -------------------------------------------------------------------------
    def start(self, keys: list[CaseKey]) -> None:
        """Start these cases now (those already started are left alone)."""
        with self._lock:
            for key in keys:
                if key not in self._futures:
                    # Priority = start order, which is the order the tests ask for results.
                    run = self._run_case(key, priority=next(self._start_order))
                    self._futures[key] = asyncio.run_coroutine_threadsafe(run, self._loop)

    def cancel_all_but(self, keep: set[CaseKey]) -> None:
        with self._lock:
            for key in [k for k in self._futures if k not in keep]:
                self._futures.pop(key).cancel()

    def outcome(self, key: CaseKey, *, tick: Callable[[], None] | None = None, every: float = 10.0) -> BaseModel:
        """Block until this case is judged; raises CaseError when it could not be.
        `tick` is called every `every` seconds while waiting (progress lines)."""
        self.start([key])
        future = self._futures[key]
        while tick is not None:
            try:
                return future.result(timeout=every)
            except concurrent.futures.TimeoutError:
                tick()
        return future.result()

    def progress_counts(self) -> dict[str, int]:
        """Counts for the progress line; calls_total is what the started cases will need."""
        repeats = self.plan.settings.repeats
        calls_per_conversation = {
            sid: len(s.turns) + self.plan.judge_calls(s)
            for sid, s in self.plan.scenarios.items()
        }
        counters = self.provider.counters
        return {
            "conversations_total": len(self._futures) * repeats,
            "conversations_done": self.done * repeats,
            "calls_total": sum(calls_per_conversation[k.scenario_id] for k in self._futures) * repeats,
            "calls_done": counters.answered + counters.cache_hits,
            "cache_hits": counters.cache_hits,
            "errors": counters.errors,
        }

    async def _run_case(self, key: CaseKey, priority: int) -> BaseModel:
        """Run and judge one case; whatever happens, its case file is written (workers wait on it)."""
        try:
            outcome = await self._judge_case(key, priority)
        except asyncio.CancelledError:
            raise  # deselected or shutting down: nobody waits for this case
        except BaseException as exc:
            error = str(exc) if isinstance(exc, CaseError) else f"{type(exc).__name__}: {exc}"
            self._write_case(key, {"error": error})
            self.done += 1
            raise
        self._write_case(key, outcome.model_dump(mode="json"))
        self.done += 1
        return outcome

    async def _judge_case(self, key: CaseKey, priority: int) -> BaseModel:
        began = time.monotonic()
        plan = self.plan
        target = next(t for t in plan.targets if t.id == key.model_id)
        scenario = plan.scenarios[key.scenario_id]
        tasks = [
            asyncio.ensure_future(
                run_conversation(self.provider, target, plan.panel, scenario, repeat=r, priority=priority)
            )
            for r in range(plan.settings.repeats)
        ]
        try:
            transcripts = list(await asyncio.gather(*tasks))
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        return self._evaluate(plan, key, transcripts, time.monotonic() - began)

    def _write_case(self, key: CaseKey, record: dict) -> None:
        """Every case keeps its transcripts and verdicts on disk, as JSON."""
        body = {"model": key.model_id, "scenario": key.scenario_id, **record}
        path = case_file(self.run_dir, key)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(body, indent=2, ensure_ascii=False), encoding="utf-8")
        tmp.replace(path)

    # -- lifetime ---------------------------------------------------------------------------
    def close(self) -> None:
        for future in self._futures.values():
            future.cancel()
        if self._loop.is_running():
            asyncio.run_coroutine_threadsafe(self.provider.aclose(), self._loop).result(timeout=30)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)
        if self._reference is not None:
            self._reference.stop()
        if self.cache is not None:
            self.cache.close()

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
