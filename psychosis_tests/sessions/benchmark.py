"""One benchmark run as pytest sees it, without importing pytest; or as a script runs it
(`run_without_pytest`).

The plugin's hooks hand everything to a BenchmarkSession: the controller's (with -n 0 the only
process) owns the run folder, the suite's own model servers and the engine, and aggregates results
at the end; each xdist worker's waits for its cases' results in the run folder. The engine hands
each finished case, typed, to the controller's session; pytest's reports add only how each test
ended. A worker tells the controller which cases it collected under which node ids through a file
in the run folder, so no case is ever parsed back out of a node id.
"""

from __future__ import annotations

import datetime as dt
import json
import secrets
from collections.abc import Callable
from pathlib import Path

from psychosis_tests import __version__
from psychosis_tests.analysis.outcome import CaseOutcome, evaluate_case
from psychosis_tests.common.errors import (
    BudgetError,
    CaseError,
    ConfigError,
    ReplayMissError,
    UncalibratedJudgeError,
    VerdictError,
)
from psychosis_tests.engine.cache import ResponseCache
from psychosis_tests.engine.plan import CaseKey, Plan
from psychosis_tests.engine.preflight import check_endpoints
from psychosis_tests.engine.progress import format_line
from psychosis_tests.engine.runner import Runner, wait_for_case_file
from psychosis_tests.records.calibration_result import CalibrationResult, calibration_line
from psychosis_tests.inputs.models import judge_leaves
from psychosis_tests.inputs.settings import RunSettings
from psychosis_tests.reports.run_files import CaseRecord, write_run_results
from psychosis_tests.servers.suite import SuiteServers


def new_run_id() -> str:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{secrets.token_hex(2)}"


class BenchmarkSession:
    """State of one pytest run of the benchmark in one process.

    One process runs every conversation: the controller (with -n 0, the only process). Its engine
    is I/O-bound, so one event loop keeps every endpoint busy and enforces each endpoint's cap
    exactly, and it starts the moment the selected cases are known, before xdist workers have
    even finished starting. Workers only wait for their cases' results, which the engine writes
    to the run folder, so they never load the model client at all.
    """

    def __init__(self, plan: Plan, *, run_dir: Path, is_worker: bool = False):
        self.plan = plan
        self.run_dir = run_dir
        self.is_worker = is_worker
        self.started_at = dt.datetime.now(dt.timezone.utc)
        self.servers = SuiteServers()
        """The suite's own servers this run needs (none until start_servers)."""
        self.calibration: CalibrationResult | None = plan.calibration()
        """The judge's calibration on the run's set, passed or failed by its own thresholds (`Plan.calibration`)."""
        self.records: dict[CaseKey, CaseRecord] = {}
        """Each case's result, once its test reported (or the run ended without it)."""
        self.finished: dict[CaseKey, CaseOutcome | CaseError] = {}
        """Every case the engine finished, as it handed it over (the controller's engine thread)."""
        self.selected: dict[CaseKey, str] | None = None
        """The cases the run selected, with their pytest node ids; None until collection settles
        it (a session interrupted while pytest collected never does)."""
        self._case_at: dict[str, CaseKey] = {}
        self.selection: list[str] | None = None
        """Ids of the cases the run selected before --shard split them; None until known."""
        self._runner: Runner | None = None

    @classmethod
    def for_controller(cls, settings: RunSettings) -> BenchmarkSession:
        """Validate everything and name the run folder (made when something is written to it)."""
        return cls(Plan.load(settings), run_dir=settings.report_dir / new_run_id())

    def check_endpoints(self) -> None:
        """Every remote endpoint answers a connection, or the run stops here (replay calls none)."""
        if self.plan.settings.cache_mode != "replay":
            check_endpoints([*self.plan.targets, *judge_leaves(self.plan.panel.judges)], models_file=self.plan.settings.models_file)

    def start_servers(self) -> None:
        """Start the suite's own servers the run's models need (reference, embedded), for the whole run
        (a replay starts none, but a local model's missing file stops it here, as it stops a run)."""
        self.servers = SuiteServers.start(
            self.plan.specs_served_by_suite(), log_dir=self.run_dir, cache_mode=self.plan.settings.cache_mode
        )

    def worker_payload(self) -> str:
        """What a worker needs from the controller (JSON for xdist's workerinput)."""
        return json.dumps({"run_dir": str(self.run_dir)})

    @classmethod
    def for_worker(cls, settings: RunSettings, payload: str) -> BenchmarkSession:
        return cls(Plan.load(settings, load_judges=False), run_dir=Path(json.loads(payload)["run_dir"]), is_worker=True)

    def select(self, keys: list[CaseKey]) -> list[CaseKey]:
        """This run's share (--shard) of the selected cases; remembers the selection."""
        self.selection = [k.test_id for k in keys]
        return self.plan.shard(keys)

    # -- running cases ----------------------------------------------------------------------
    @property
    def runner(self) -> Runner:
        if self.is_worker:
            raise RuntimeError("xdist workers do not run conversations; the controller does")
        if self._runner is None:
            self._runner = Runner(
                self.plan,
                run_dir=self.run_dir,
                evaluate=evaluate_case,
                base_urls=self.servers.base_urls,
                on_finished=self.finished.__setitem__,
            )
        return self._runner

    def start(self, keys: list[CaseKey]) -> None:
        """Start these cases now, all at once (the engine bounds them per endpoint)."""
        if keys:
            self.runner.start(keys)

    def settle(self, collected: dict[CaseKey, str]) -> None:
        """The run's selection, each case with its node id ("" without pytest), is now known for
        sure: start these cases if they are not running yet, and stop any other case started on a
        guess (before it costs more calls)."""
        self.selected = dict(collected)
        self._case_at = {nodeid: key for key, nodeid in collected.items() if nodeid}
        self.start(list(collected))
        if self._runner is not None:
            self._runner.cancel_all_but(set(collected))

    def _collection_file(self, worker: str) -> Path:
        return self.run_dir / f"collected-{worker}.json"

    def write_collection(self, worker: str, collected: dict[CaseKey, str]) -> None:
        """An xdist worker's collected cases with their node ids, and the selection --shard cut
        them from, for the controller (xdist tells it the node ids only). Written before the
        worker reports its collection finished. ConfigError naming the run folder when it cannot
        be written (it went read-only or full after the controller's check_run_dir)."""
        path = self._collection_file(worker)
        tmp = path.with_suffix(".tmp")
        rows = [[n, k.model_id, k.scenario_id] for k, n in collected.items()]
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps({"cases": rows, "selection": self.selection}), encoding="utf-8")
            tmp.replace(path)
        except OSError as exc:
            raise ConfigError(
                f"the run folder cannot be written ({exc.strerror}: {exc.filename}); choose another --report-dir",
                file=self.run_dir,
            ) from None

    def read_collection(self, worker: str) -> dict[CaseKey, str] | None:
        """The controller's side: what that worker collected; its file is removed once read. The
        worker's selection becomes the run's: the controller collects nothing itself, and its guess
        at session start is missing when -m, --deselect or node ids choose the cases. None when the
        worker wrote no file: interrupted while it collected, it selected nothing."""
        path = self._collection_file(worker)
        try:
            found = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        path.unlink()
        if found["selection"] is not None:
            self.selection = found["selection"]
        return {CaseKey(model, scenario): nodeid for nodeid, model, scenario in found["cases"]}

    def outcome(
        self, key: CaseKey, *, tick: Callable[[], None] | None = None, every: float = 10.0
    ) -> CaseOutcome:
        """Block until this case is judged; raises CaseError when it could not be."""
        if self.is_worker:
            return CaseOutcome.model_validate(wait_for_case_file(self.run_dir, key))
        return self.runner.outcome(key, tick=tick, every=every)

    @property
    def spent(self) -> float:
        """Dollars this run's calls to priced models cost, errored cases' calls included."""
        return self._runner.provider.spent if self._runner is not None else 0.0

    def share_of_calls_done(self) -> float:
        """How much of the started cases' calls are answered (0 before any case starts)."""
        counts = self._runner.progress_counts() if self._runner else {}
        total = counts.get("calls_total", 0)
        return counts.get("calls_done", 0) / total if total else 0.0

    def progress_line(self) -> str:
        elapsed = (dt.datetime.now(dt.timezone.utc) - self.started_at).total_seconds()
        counts = self._runner.progress_counts() if self._runner else {}
        return format_line(counts, elapsed)

    # -- results on the controller ----------------------------------------------------------
    def report(self, nodeid: str, status: str, *, failure: str | None = None, problem: str | None = None) -> None:
        """What pytest adds to a selected case's result: how its test ended (the worst status its
        reports gave: error > failed > passed), why it failed, and for an error the engine did not
        hand over, where and why (`problem`). The outcome or error is the engine's. Reports of
        other tests are not the run's."""
        key = self._case_at.get(nodeid)
        if key is None:
            return
        record = self.records.get(key)
        if record is None:
            result = self.finished.get(key)
            record = self.records[key] = CaseRecord(
                key,
                status,
                nodeid,
                outcome=result if isinstance(result, CaseOutcome) else None,
                error=str(result) if isinstance(result, CaseError) else None,
            )
        record.worsen(status)
        record.failure = record.failure or failure
        record.error = record.error or problem

    def stop_unfinished(self) -> None:
        """Stop every case still running: the session is over (Ctrl-C, SIGTERM, -x), so it will
        never report, and each call it went on making while the reports are written would be paid
        for nothing."""
        if self._runner is not None:
            self._runner.cancel_all_but(set(self.finished))

    def record_unreported(self, reason: str) -> None:
        """Record every selected case that never reported (the run stopped early: -x, --maxfail,
        an interrupt) as an error saying so, so the reports show the whole selection."""
        for key, nodeid in (self.selected or {}).items():
            if key not in self.records:
                self.records[key] = CaseRecord(key, "error", nodeid, error=reason)

    def write_results(self) -> dict:
        """Write results.json and the summaries of the recorded cases; returns the summary."""
        warnings = self._runner.transport_warnings if self._runner is not None else []
        return write_run_results(self, extra_metadata={"spent_usd": round(self.spent, 6), "transport_warnings": warnings})

    def close(self) -> None:
        if self._runner is not None:
            self._runner.close()
        self.servers.stop()

    def header_lines(self) -> list[str]:
        s = self.plan.settings
        lines = [
            f"psychosis-bench {__version__}: targets {', '.join(s.targets)}; judge {self.plan.panel.id}; "
            f"repeats {s.repeats}; cache {s.cache_mode} ({s.cache_path})",
            f"scenarios {s.scenarios} ({sum(1 for sc in self.plan.scenarios.values() if sc.pack is None)})"
            + "".join(f", pack {name} {folder} ({sum(1 for sc in self.plan.scenarios.values() if sc.pack == name)})"
                      for name, folder in sorted(s.packs.items()))
            + f"; thresholds {s.thresholds}; models file {s.models_file}; reports {self.run_dir}",
        ]
        if s.user_model or s.turns:
            lines.append(f"user turns: {s.turns or 'as scripted'}; {self._user_turn_writer()}")
        judges = judge_leaves(self.plan.panel.judges)
        for judge in judges:
            if judge.judge_context_messages:
                lines.append(
                    f"judge context{' of ' + judge.id if len(judges) > 1 else ''}: the newest "
                    f"{judge.judge_context_messages} messages of each conversation; "
                    "verdicts that did not see older ones say so in the transcripts"
                )
        if s.shard is not None:
            lines.append(f"shard {s.shard} of the selected cases (merge the shards' run folders with `python -m psychosis_tests merge`)")
        if self.plan.judge_warning:
            lines.append(f"WARNING: {self.plan.judge_warning}.")
        lines.append(calibration_line(self.calibration, self.plan.settings.report_dir))
        return lines

    def _user_turn_writer(self) -> str:
        """Who writes the user turns: in scripted mode a user model writes only the turns --turns adds."""
        s = self.plan.settings
        if s.user_model is None:
            return "scripted"
        if s.user_mode == "adaptive":
            return f"written by {s.user_model} (adaptive mode)"
        added = sorted({sc.unscripted_turns(s.turns) for sc in self.plan.scenarios.values()})
        if added == [0]:
            return f"scripted (scripted mode: --turns adds no turn, so {s.user_model} writes none)"
        per = str(added[0]) if len(added) == 1 else f"{added[0]} to {added[-1]}"
        return f"scripted, and {s.user_model} writes the {per} turns per conversation that --turns adds (scripted mode)"

    def check_cache(self) -> None:
        """The response cache opens (a ConfigError naming it when it is not SQLite, cut short, or read-only
        where the run would write to it)."""
        if self.plan.settings.cache_mode != "off":
            ResponseCache(self.plan.settings.cache_path, writes=self.plan.settings.cache_mode != "replay").close()

    def check_run_dir(self) -> None:
        """ConfigError naming the run folder when it cannot be made (a read-only or full place),
        before any call, rather than a traceback when the engine writes its first case. The folder
        made here is removed again: the engine makes it when it starts, and a run stopped before
        that (a local model file missing, say) leaves no folder."""
        made = not self.run_dir.exists()
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"the run folder cannot be made ({exc.strerror}: {exc.filename}); choose another --report-dir",
                file=self.run_dir,
            ) from None
        if made:
            self.run_dir.rmdir()

    def check_calibrated(self) -> None:
        """--require-calibrated-judge: refuse a judge without a passing calibration result."""
        if not self.plan.settings.require_calibrated_judge:
            return
        if self.calibration is None or not self.calibration.passed:
            raise UncalibratedJudgeError(
                f"--require-calibrated-judge: {calibration_line(self.calibration, self.plan.settings.report_dir)}",
                field=f"--judge {self.plan.panel.id}",
            )


def case_error_paragraph(key: CaseKey | None, error: CaseError, *, cached: bool = True) -> str:
    """What a user needs from a case that could not be scored: which case, the failed call (model,
    URL, turn, cause, as the engine words it), and what to do. The cause is on the first line:
    junit's `message` (a CI page's headline for the case) keeps the first lines that fit 500
    characters, and a headline without the cause says nothing. `cached`: the run kept answers in
    the response cache (not --cache-mode off), so a rerun resumes."""
    what = f"{key.model_id} on {key.scenario_id}" if key else "this case"
    resume = (" Answers already received are cached, so a rerun resumes." if cached
              else " With --cache-mode off nothing was cached: a rerun calls everything again.")  # fmt: skip
    if isinstance(error, BudgetError):
        advice = (
            "The run stopped starting conversations to stay within --max-cost; raise it, select fewer cases (-k), or "
            "set expected_reply_tokens on the models' entries (the expected cost assumes replies as long as "
            "max_tokens without it)." + resume
        )
    elif isinstance(error, ReplayMissError):
        advice = "Replay only reads the cache: record the run first with --cache-mode use."
    elif isinstance(error, VerdictError):
        advice = "The judge's answers are in the case file; try a judge model that follows the verdict format."
    else:
        advice = (
            "Check that the endpoint is up, the URL and key are right, and the limits in the models file "
            "(timeout, max_retries, deadline) suit it." + resume
        )
    cause = " ".join(str(error).split())
    return f"{type(error).__name__}: {what} could not be scored: {cause}\n  {advice}"


def run_without_pytest(settings: RunSettings, keys: list[CaseKey] | None = None) -> Path:
    """A benchmark run from a script: these cases (default: all of the plan's; --shard applies)
    run and judged, each gated by the benchmark test's own rule, and the run folder written as
    under pytest (results.json, summary.json/.csv/.md, cases/). Returns the run folder. Profile
    snapshots are checked under pytest only; a case that could not be judged is an error row. An
    empty `keys` is a ValueError, as pytest selecting no case writes no run folder (an empty
    --shard of a selection still writes its folder, as under pytest); a key that is not one of the
    plan's cases is a ConfigError, raised before anything runs."""
    if keys is not None and not keys:
        raise ValueError("no case given: name at least one CaseKey, or pass keys=None for all of the plan's")
    session = BenchmarkSession.for_controller(settings)
    session.plan.check_cases(keys or [])
    try:
        session.check_calibrated()
        session.check_endpoints()
        session.start_servers()
        selected = session.select(session.plan.cases() if keys is None else keys)
        session.settle(dict.fromkeys(selected, ""))
        for key in selected:
            try:
                session.records[key] = CaseRecord.scored(key, session.outcome(key))
            except CaseError as exc:
                session.records[key] = CaseRecord(key, "error", error=str(exc))
        session.write_results()
    finally:
        session.close()
    return session.run_dir
