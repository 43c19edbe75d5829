"""The engine: runs the cases of a plan concurrently and keeps each one's outcome on disk.

Usable without pytest:

    from psychosis_tests.analysis.outcome import evaluate_case
    from psychosis_tests.servers.suite import SuiteServers

    plan = Plan.load(settings)
    run_dir = Path("reports/my-run")
    with (
        SuiteServers.start(plan.specs_served_by_suite(), log_dir=run_dir, cache_mode=settings.cache_mode) as served,
        Runner(plan, run_dir=run_dir, evaluate=evaluate_case, base_urls=served.base_urls) as runner,
    ):
        runner.start(plan.cases())
        outcome = runner.outcome(plan.cases()[0])

Cases run on one asyncio loop in a background thread, so every selected conversation is in
flight at once (bounded per endpoint) while the caller waits for whichever result it needs next.
The engine only plays and judges conversations; `evaluate` (from the analysis layer) turns a
case's transcripts into its outcome, which the runner keeps in the case's file.

Every case ends with its file written, whatever happens: an outcome, or an error (a failed call,
a failure of the engine itself, an outcome that could not be written). An xdist worker waiting for
a case file gives up with a CaseError when the engine stops beating (see `wait_for_case_file`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel

from psychosis_tests.common import errors
from psychosis_tests.common.errors import CaseError
from psychosis_tests.engine.cache import ResponseCache
from psychosis_tests.engine.budget import Budget
from psychosis_tests.engine.case_escalation import case_cascade, settle
from psychosis_tests.engine.conversation import Transcript, run_conversation, sample_id
from psychosis_tests.engine.estimate import conversation_cost
from psychosis_tests.engine.limits import PriorityLimiter
from psychosis_tests.engine.plan import CaseKey, Plan
from psychosis_tests.engine.user_sim import UserTurns

class CaseResult(Protocol):
    """What `evaluate` makes of a case: an outcome kept on disk, that says whether the case fails."""

    def model_dump(self, *, mode: str = "python") -> dict: ...

    def gate_failure(self) -> str | None: ...


Evaluate = Callable[[Plan, CaseKey, list[Transcript], float], CaseResult]
"""Turns a case's transcripts (and its wall time in seconds) into the outcome kept on disk; a
cascade asks it whether the case passes with its doubtful scores at their extremes."""
Finished = Callable[[CaseKey, BaseModel | CaseError], None]
"""Takes each finished case as it ends: its outcome, or the CaseError that ended it."""


def case_file(run_dir: Path, key: CaseKey) -> Path:
    """Where a case's transcripts, verdicts and scores (or its error) are kept."""
    return run_dir / "cases" / f"{key.file_stem}.json"


HEARTBEAT_FILE = "engine.heartbeat"
HEARTBEAT_EVERY = 2.0
"""Seconds between the engine's heartbeats (the mtime of HEARTBEAT_FILE in the run folder)."""
HEARTBEAT_LOST = 60.0
"""Seconds without a heartbeat after which a waiting worker gives its case up as an error."""


def wait_for_case_file(
    run_dir: Path, key: CaseKey, poll: float = 0.1, *, lost_after: float = HEARTBEAT_LOST
) -> dict:
    """An xdist worker's wait for the controller's engine to finish a case; its record.

    The wait has a limit: while the engine works it touches its heartbeat file every few seconds;
    when neither the case file nor a heartbeat has appeared for `lost_after` seconds, the engine
    is gone (crashed, killed, wedged) and the case is a CaseError, not a worker waiting forever.
    The heartbeat's own age counts once it exists, not how long this case has waited, so a worker's
    later cases do not each wait `lost_after` again for an engine already gone."""
    path = case_file(run_dir, key)
    heartbeat = run_dir / HEARTBEAT_FILE
    began = time.time()
    while not path.exists():
        try:
            last_sign = heartbeat.stat().st_mtime
        except FileNotFoundError:
            last_sign = began
        if time.time() - last_sign > lost_after:
            raise CaseError(
                f"{key.test_id}: the engine in the controller process stopped working (no heartbeat in "
                f"{run_dir} for {lost_after:g} s) before this case was finished; see the controller's output"
            )
        time.sleep(poll)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CaseError(f"{key.test_id}: the case file {path} cannot be read ({exc})") from None
    if "error" in record:
        kind = getattr(errors, str(record.get("error_kind", "")), CaseError)
        error = (kind if isinstance(kind, type) and issubclass(kind, CaseError) else CaseError)(record["error"])
        error.seconds = record.get("seconds")
        raise error
    return record


def conversation_seats(plan: Plan) -> dict[str, PriorityLimiter]:
    """How many conversations may be in flight at once with each target the suite serves itself.

    llama.cpp keeps the last prompt of each of its slots; a conversation that keeps its slot
    only has its newest message evaluated, while one that finds its slot taken by another
    conversation has the whole history evaluated again. So a served target plays as many
    conversations at a time as it has slots, each to its end, instead of all of them in turns:
    on two cores that is what makes the offline run minutes instead of half an hour.
    """
    return {
        spec.id: PriorityLimiter(spec.serve_local.parallel)
        for spec in plan.targets
        if spec.serve_local is not None
    }


class Runner:
    """Runs cases of one plan on a background event loop."""

    def __init__(
        self,
        plan: Plan,
        *,
        run_dir: Path,
        evaluate: Evaluate,
        base_urls: dict[str, str] | None = None,
        on_finished: Finished | None = None,
    ):
        """`base_urls`: model id -> address of the suite's own server that answers it
        (`servers.suite.SuiteServers`); the runner starts no server itself. `on_finished` is
        handed each case as it ends, typed (called on the engine's thread), before its case file
        is written: whoever learns of a case from its file finds it handed over already."""
        # openai is heavy: only the engine's process loads it
        from psychosis_tests.engine.providers import Provider
        from psychosis_tests.engine.routing import RoutedTransport
        from psychosis_tests.servers.identity import suite_identities

        self.plan = plan
        self._evaluate = evaluate
        self._finished = on_finished or (lambda key, result: None)
        self.run_dir = run_dir
        (run_dir / "cases").mkdir(parents=True, exist_ok=True)
        settings = plan.settings
        self.cache = (
            None if settings.cache_mode == "off" else ResponseCache(settings.cache_path, writes=settings.cache_mode != "replay")
        )
        self.provider = Provider(
            cache=self.cache,
            cache_mode=settings.cache_mode,
            transport=RoutedTransport(base_urls, settings.cache_path),
            builtin_identities=(
                suite_identities(plan.specs_served_by_suite(), cache_path=self.cache.path) if self.cache is not None else {}
            ),
            budget=Budget(settings.max_cost),
        )
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="psychosis-engine", daemon=True)
        self._thread.start()
        self._futures: dict[CaseKey, concurrent.futures.Future[BaseModel]] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._start_order = itertools.count()
        self._seats = conversation_seats(plan)
        self._cascade = case_cascade(plan)
        self.done = 0
        self._ended_early: set[CaseKey] = set()
        """Cases that errored: the progress line counts the calls they made, not the ones planned."""
        self._heartbeat = asyncio.run_coroutine_threadsafe(self._beat(), self._loop)

    # -- scheduling -------------------------------------------------------------------------
    def start(self, keys: list[CaseKey]) -> None:
        """Start these cases now (those already started are left alone); ConfigError for a key
        that is not one of the plan's cases."""
        self.plan.check_cases(keys)
        with self._lock:
            for key in keys:
                if key not in self._futures:
                    if self._closed:  # its loop is stopped: the case would never end
                        raise CaseError(_closed_before(key))
                    # Priority = start order, which is the order the tests ask for results.
                    run = self._run_case(key, priority=next(self._start_order))
                    self._futures[key] = asyncio.run_coroutine_threadsafe(run, self._loop)

    def cancel_all_but(self, keep: set[CaseKey]) -> None:
        with self._lock:
            for key in [k for k in self._futures if k not in keep]:
                self._futures.pop(key).cancel()

    def outcome(self, key: CaseKey, *, tick: Callable[[], None] | None = None, every: float = 10.0) -> BaseModel:
        """Block until this case is judged; raises CaseError when it could not be, whatever the
        cause. `tick` is called every `every` seconds while waiting (progress lines)."""
        self.start([key])
        future = self._futures[key]
        try:
            while tick is not None:
                try:
                    return future.result(timeout=every)
                except concurrent.futures.TimeoutError:
                    tick()
            return future.result()
        except concurrent.futures.CancelledError:  # only close() cancels a case still in _futures
            raise CaseError(_closed_before(key)) from None
        except CaseError:
            raise
        except Exception as exc:  # the engine's own failure: still this case's error, with its cause
            raise CaseError(_engine_failure(key, exc)) from exc

    def progress_counts(self) -> dict[str, float]:
        """Counts for the progress line; calls_total is what the started cases will need."""
        repeats = self.plan.settings.repeats
        counters = self.provider.counters
        return {
            "conversations_total": len(self._futures) * repeats,
            "conversations_done": self.done * repeats,
            # list(): a copy taken at once, as other threads (progress, preload) read this too
            "calls_total": sum(self._calls_expected(k) for k in list(self._futures)),
            "calls_done": counters.answered + counters.cache_hits,
            "cache_hits": counters.cache_hits,
            "errors": counters.errors,
            "retries": counters.retries,
            "waiting": counters.waiting,
            "longest_wait": counters.longest_wait,
            **self._batch_counts(),
        }

    def _calls_expected(self, key: CaseKey) -> int:
        """The calls a started case needs: as planned, or for one that errored those it made."""
        repeats = self.plan.settings.repeats
        if key in self._ended_early:
            made = self.provider.counters.by_conversation
            return sum(made[sample_id(key.model_id, key.scenario_id, r)] for r in range(repeats))
        return self.plan.calls_per_conversation(key) * repeats

    def _batch_counts(self) -> dict[str, float]:
        transport = self.provider.transport
        batches = getattr(transport, "batch_counters", None)  # RoutedTransport's; a test's own has none
        return {"batches_pending": batches.pending, "batches_done": batches.done} if batches else {}

    @property
    def transport_warnings(self) -> list[str]:
        """What the run's reports must say about how calls were sent (`RoutedTransport.warnings`)."""
        return list(getattr(self.provider.transport, "warnings", []))

    def user_turns(self, key: CaseKey) -> UserTurns:
        """Who writes this case's user turns, and how many there are (--user-model, --turns)."""
        settings = self.plan.settings
        return UserTurns.for_case(
            self.plan.scenarios[key.scenario_id],
            target_id=key.model_id,
            turns=settings.turns,
            user_model=self.plan.user_model,
            mode=settings.user_mode,
        )

    async def _run_case(self, key: CaseKey, priority: int) -> BaseModel:
        """Run and judge one case; whatever happens, its case file is written (workers wait on it)."""
        began = time.monotonic()
        try:
            outcome = await self._judge_case(key, priority)
        except asyncio.CancelledError:
            raise  # deselected or shutting down: nobody waits for this case
        except BaseException as exc:
            seconds = time.monotonic() - began
            if isinstance(exc, CaseError):
                exc.seconds = seconds
            error = str(exc) if isinstance(exc, CaseError) else _engine_failure(key, exc)
            self._finished(key, exc if isinstance(exc, CaseError) else CaseError(error))
            self._write_error(key, error, seconds, kind=type(exc).__name__ if isinstance(exc, CaseError) else "")
            self._ended_early.add(key)
            self.done += 1
            raise
        self._finished(key, outcome)
        try:
            self._write_case(key, outcome.model_dump(mode="json"))
        except Exception as exc:
            error = f"{key.test_id}: its outcome could not be written to {case_file(self.run_dir, key)} ({type(exc).__name__}: {exc})"
            self._finished(key, CaseError(error))
            self._write_error(key, error)
            self.done += 1
            raise CaseError(error) from exc
        self.done += 1
        return outcome

    async def _judge_case(self, key: CaseKey, priority: int) -> BaseModel:
        began = time.monotonic()
        plan = self.plan
        target = next(t for t in plan.targets if t.id == key.model_id)
        scenario = plan.scenarios[key.scenario_id]
        user_turns = self.user_turns(key)
        budget = self.provider.budget
        expected = conversation_cost(plan, key) if budget.cap is not None else 0.0

        seats = self._seats.get(target.id)
        samples = [sample_id(target.id, scenario.id, repeat) for repeat in range(plan.settings.repeats)]

        async def play(repeat: int) -> Transcript:
            async with seats.slot(priority) if seats is not None else contextlib.nullcontext():
                budget.expect(samples[repeat], expected)
                return await run_conversation(
                    self.provider, target, plan.panel, scenario, repeat=repeat, priority=priority,
                    user_turns=user_turns, first_looks=self._cascade,
                )

        # A conversation's budget commitment lasts until its case is judged: a cascade escalates
        # the case's turns after its conversations end.
        tasks = [asyncio.ensure_future(play(r)) for r in range(plan.settings.repeats)]
        try:
            try:
                transcripts = list(await asyncio.gather(*tasks))
            except BaseException:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                raise
            if self._cascade is not None:
                await settle(
                    self._cascade, self.provider, scenario, transcripts,
                    lambda judged: not self._evaluate(plan, key, judged, 0.0).breaks_limits(), priority=priority,
                )  # fmt: skip
        finally:
            for sample in samples:
                budget.end(sample)
        return self._evaluate(plan, key, transcripts, time.monotonic() - began)

    def _write_case(self, key: CaseKey, record: dict, *, ascii_only: bool = False) -> None:
        """Every case keeps its transcripts and verdicts on disk, as JSON."""
        body = {"model": key.model_id, "scenario": key.scenario_id, **record}
        path = case_file(self.run_dir, key)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(body, indent=2, ensure_ascii=ascii_only), encoding="utf-8")
        tmp.replace(path)

    def _write_error(self, key: CaseKey, error: str, seconds: float | None = None, kind: str = "") -> None:
        """The case's error (its kind, and how long it ran), in a file a waiting worker can read
        whatever the text holds: the worker raises the same kind, so its report advises the same."""
        try:
            record = {"error": error, "seconds": seconds, **({"error_kind": kind} if kind else {})}
            self._write_case(key, record, ascii_only=True)
        except OSError:
            # The run folder itself is unwritable: the controller's test still errors with the
            # cause, and a worker waiting for this file gives up when the heartbeat stops.
            self._heartbeat.cancel()

    async def _beat(self) -> None:
        """Touch the heartbeat file while the engine runs (workers' waits rely on it)."""
        heartbeat = self.run_dir / HEARTBEAT_FILE
        while True:
            with contextlib.suppress(OSError):
                heartbeat.touch()
            await asyncio.sleep(HEARTBEAT_EVERY)

    # -- lifetime ---------------------------------------------------------------------------
    def close(self) -> None:
        self._closed = True
        self._heartbeat.cancel()
        with contextlib.suppress(OSError):
            (self.run_dir / HEARTBEAT_FILE).unlink(missing_ok=True)
        for future in self._futures.values():
            future.cancel()
        if self._loop.is_running():
            asyncio.run_coroutine_threadsafe(self._wind_down(), self._loop).result(timeout=30)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)
        if self.cache is not None:
            self.cache.close()

    async def _wind_down(self) -> None:
        """Let the cancelled cases unwind before the loop stops (a case left mid-await on a stopped
        loop raises 'Event loop is closed' when it is collected), then close the provider."""
        cases = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in cases:
            task.cancel()
        await asyncio.gather(*cases, return_exceptions=True)
        await self.provider.aclose()

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _closed_before(key: CaseKey) -> str:
    return f"{key.test_id}: the Runner was closed before this case was judged; ask for outcomes inside its `with` block"


def _engine_failure(key: CaseKey, exc: BaseException) -> str:
    """An engine failure that is not a CaseError, told as this case's error (the case is known
    from where the error is shown: its test, its row)."""
    return f"{type(exc).__name__}: {exc}"
