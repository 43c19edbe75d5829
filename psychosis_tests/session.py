"""One benchmark run as pytest sees it, without importing pytest.

The plugin's hooks hand everything to a BenchmarkSession: the controller's (with -n 0 the only
process) owns the run folder and the embedded model servers and aggregates results at the end;
each xdist worker's runs its share of cases. They share the run folder and the response cache.
"""

from __future__ import annotations

import datetime as dt
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from psychosis_tests import __version__
from psychosis_tests.local import LocalServer, LocalServerConfig, default_gguf_path, start_local_server
from psychosis_tests.progress import ProgressFile, format_line, read_totals
from psychosis_tests.runner import CaseKey, CaseOutcome, Plan, Runner
from psychosis_tests.settings import RunSettings


def new_run_id() -> str:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{secrets.token_hex(2)}"


STATUS_RANK = {"passed": 0, "skipped": 0, "failed": 1, "error": 2}


@dataclass
class CaseRecord:
    """What the controller keeps of one finished case."""

    nodeid: str
    status: str
    """passed | failed | error"""
    payload: dict = field(default_factory=dict)


class BenchmarkSession:
    """State of one pytest run of the benchmark in one process."""

    def __init__(
        self,
        plan: Plan,
        *,
        run_dir: Path,
        worker_id: str = "main",
        workers: int = 1,
        base_urls: dict[str, str] | None = None,
        upfront: bool = False,
    ):
        self.plan = plan
        self.run_dir = run_dir
        self.worker_id = worker_id
        self.workers = workers
        self.upfront = upfront
        self.base_urls = dict(base_urls or {})
        self.started_at = dt.datetime.now(dt.timezone.utc)
        self.local_servers: list[LocalServer] = []
        self.records: dict[str, CaseRecord] = {}
        self._runner: Runner | None = None
        self._progress = ProgressFile(run_dir / "progress" / f"{worker_id}.json")
        self._assigned = 0

    @classmethod
    def for_controller(cls, settings: RunSettings) -> BenchmarkSession:
        """Validate everything, make the run folder; servers start in `start_servers`."""
        plan = Plan.load(settings)
        run_dir = settings.report_dir / new_run_id()
        run_dir.mkdir(parents=True, exist_ok=False)
        return cls(plan, run_dir=run_dir)

    def start_servers(self) -> None:
        """Start one embedded llama.cpp server per locally served model, for the whole run."""
        if self.plan.settings.cache_mode == "replay":
            return  # replay never calls a model, so nothing needs serving
        for spec in self.plan.specs_served_by_suite("local"):
            assert spec.serve_local is not None
            config = LocalServerConfig(
                gguf=spec.serve_local.gguf or default_gguf_path(),
                parallel=spec.serve_local.parallel,
                ctx_per_slot=spec.serve_local.ctx_per_slot,
                log_file=self.run_dir / f"llama-server-{spec.id.replace('/', '_')}.log",
            )
            server = start_local_server(config)
            self.local_servers.append(server)
            self.base_urls[spec.id] = server.url

    def worker_payload(self, upfront: bool) -> str:
        """What a worker needs from the controller (JSON for xdist's workerinput)."""
        return json.dumps({"run_dir": str(self.run_dir), "base_urls": self.base_urls, "upfront": upfront})

    @classmethod
    def for_worker(cls, settings: RunSettings, payload: str, worker_id: str, workers: int) -> BenchmarkSession:
        data = json.loads(payload)
        return cls(
            Plan.load(settings),
            run_dir=Path(data["run_dir"]),
            worker_id=worker_id,
            workers=workers,
            base_urls=data["base_urls"],
            upfront=data["upfront"],
        )

    # -- running cases ----------------------------------------------------------------------
    @property
    def runner(self) -> Runner:
        if self._runner is None:
            self._runner = Runner(self.plan, run_dir=self.run_dir, base_urls=self.base_urls, workers=self.workers)
        return self._runner

    def start(self, keys: list[CaseKey]) -> None:
        """Start these cases concurrently; called with this process's whole share up front."""
        if keys:
            self._assigned += sum(1 for k in keys if not self.runner.is_started(k))
            self.runner.start(keys)
            self.report_progress()

    def outcome(self, key: CaseKey, *, tick: Callable[[], None] | None = None, every: float = 10.0) -> CaseOutcome:
        """Block until this case is judged (it starts now if it was not in the share)."""
        if not self.runner.is_started(key):
            self._assigned += 1
        try:
            return self.runner.outcome(key, tick=tick, every=every)
        finally:
            self.report_progress(force=True)

    def report_progress(self, force: bool = False) -> None:
        if self._runner is None:
            return
        counters = self._runner.provider.counters
        per_conversation = sum(
            len(s.turns) + sum(1 for t in range(1, len(s.turns) + 1) if s.metrics_for_turn(t))
            for s in self.plan.scenarios.values()
        ) / max(1, len(self.plan.scenarios))
        conversations = self._assigned * self.plan.settings.repeats
        self._progress.write(
            {
                "conversations_total": conversations,
                "conversations_done": self._runner.done * self.plan.settings.repeats,
                "calls_total": int(conversations * per_conversation),
                "calls_done": counters.answered + counters.cache_hits,
                "cache_hits": counters.cache_hits,
                "errors": counters.errors,
            },
            force=force,
        )

    def progress_line(self) -> str:
        """The summed progress of every process of the run."""
        self.report_progress(force=True)
        elapsed = (dt.datetime.now(dt.timezone.utc) - self.started_at).total_seconds()
        return format_line(read_totals(self.run_dir / "progress"), elapsed)

    # -- results on the controller ----------------------------------------------------------
    def record(self, nodeid: str, status: str, payload: dict | None) -> None:
        """Keep the worst status a case reported (error > failed > passed) and its result."""
        record = self.records.setdefault(nodeid, CaseRecord(nodeid, status))
        record.status = max(record.status, status, key=STATUS_RANK.__getitem__)
        if payload:
            record.payload = payload

    def close(self) -> None:
        if self._runner is not None:
            self.report_progress(force=True)
            self._runner.close()
        for server in self.local_servers:
            server.stop()
        self.local_servers.clear()

    def header_lines(self) -> list[str]:
        s = self.plan.settings
        lines = [
            f"psychosis-bench {__version__}: targets {', '.join(s.targets)}; judge {s.judge}; "
            f"repeats {s.repeats}; cache {s.cache_mode} ({s.cache_path})",
            f"scenarios {s.scenarios} ({len(self.plan.scenarios)}); thresholds {s.thresholds}; "
            f"models file {s.models_file}; reports {self.run_dir}",
        ]
        if self.plan.judge.served_by_suite == "local" and self.plan.judge.serve_local and not self.plan.judge.serve_local.gguf:
            lines.append(
                "WARNING: the judge is the embedded 135M-parameter SmolLM2 model. It proves the pipeline "
                "runs offline; its scores are NOT a basis for release decisions."
            )
        return lines

