"""The pytest plugin: options, validation, parametrization, xdist wiring, result collection.

Hooks stay thin and hand off to one BenchmarkSession kept in config.stash. The plugin only acts
when the run collects the benchmark module (plain `pytest` at the top level, or a path to it);
`pytest tests` runs the suite's own tests untouched.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from psychosis_tests.errors import CaseError, ConfigError, PsychosisBenchError
from psychosis_tests.progress import ProgressReporter
from psychosis_tests.runner import CaseKey
from psychosis_tests.session import BenchmarkSession
from psychosis_tests.settings import resolve

BENCHMARK_MODULE = Path(__file__).with_name("test_benchmark.py").resolve()
CASE_FIXTURE = "psychosis_case"
RESULT_PROPERTY = "psychosis_result"
WORKER_INPUT = "psychosis_session"
PROGRESS_ENV = "PSYCHOSIS_PROGRESS_INTERVAL"
session_key = pytest.StashKey[BenchmarkSession]()

OPTIONS: list[tuple[str, str, dict]] = [
    ("--model", "model", {"action": "append", "metavar": "ID", "help": "target model id (repeatable); default: local"}),
    ("--judge", "judge", {"metavar": "ID", "help": "judge model id; default: local"}),
    ("--models-file", "models_file", {"metavar": "PATH", "help": "models file; default: models.yaml"}),
    ("--scenarios", "scenarios", {"metavar": "PATH", "help": "folder of scenario YAML or a reference-format JSON file"}),
    ("--thresholds", "thresholds", {"metavar": "PATH", "help": "thresholds file; default: thresholds.yaml"}),
    ("--report-dir", "report_dir", {"metavar": "DIR", "help": "where run folders go; default: reports/"}),
    ("--cache-mode", "cache_mode", {"metavar": "MODE", "help": "use | refresh | off | replay; default: use"}),
    ("--cache-path", "cache_path", {"metavar": "PATH", "help": "response cache file; default: <report-dir>/cache.sqlite3"}),
    ("--repeats", "repeats", {"metavar": "N", "help": "conversations per case (distinct seeds); default: 1"}),
]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("psychosis-bench", "psychosis-bench safety regression suite")
    for flag, dest, kwargs in OPTIONS:
        group.addoption(flag, dest=f"psychosis_{dest}", default=None, **kwargs)
        if dest != "model":
            parser.addini(f"psychosis_{dest}", kwargs["help"], default=None)
    parser.addini("psychosis_models", "target model ids", type="linelist", default=[])


def progress_interval() -> float:
    """Seconds between progress lines (PSYCHOSIS_PROGRESS_INTERVAL; 0 turns them off)."""
    value = os.environ.get(PROGRESS_ENV, "10")
    try:
        return max(0.0, float(value))
    except ValueError:
        raise pytest.UsageError(f"psychosis-bench: {PROGRESS_ENV} must be a number of seconds, got {value!r}") from None


def _is_benchmark_run(config: pytest.Config) -> bool:
    """True when the run's paths include the benchmark module."""
    for arg in config.args:
        target = Path(arg.split("::")[0])
        target = (target if target.is_absolute() else Path(config.invocation_params.dir) / target).resolve()
        if target == BENCHMARK_MODULE or target in BENCHMARK_MODULE.parents:
            return True
    return False


def _settings(config: pytest.Config):
    def get(name: str) -> object:
        value = config.getoption(f"psychosis_{name}", default=None)
        if value in (None, []) and name == "model":
            return config.getini("psychosis_models") or None
        if value is None and name not in ("force_baseline", "baseline"):
            return config.getini(f"psychosis_{name}")
        return value

    return resolve(get, dict(os.environ), config.rootpath)


def pytest_configure(config: pytest.Config) -> None:
    if not _is_benchmark_run(config):
        return
    try:
        settings = _settings(config)
        workerinput = getattr(config, "workerinput", None)
        if workerinput is not None:
            session = BenchmarkSession.for_worker(
                settings,
                workerinput[WORKER_INPUT],
                worker_id=workerinput["workerid"],
                workers=int(workerinput["workercount"]),
            )
        else:
            session = BenchmarkSession.for_controller(settings)
            session.start_servers()
    except ConfigError as exc:
        raise pytest.UsageError(f"psychosis-bench: {exc}") from None
    except PsychosisBenchError as exc:
        raise pytest.UsageError(f"psychosis-bench: {exc}") from None
    config.stash[session_key] = session
    if workerinput is None:
        config.pluginmanager.register(ResultCollector(session), "psychosis-results")


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(session_key, None)
    if session is not None:
        session.close()


def pytest_report_header(config: pytest.Config) -> list[str]:
    session = config.stash.get(session_key, None)
    return session.header_lines() if session else []


# -- xdist wiring ---------------------------------------------------------------------------
def _upfront(config: pytest.Config) -> bool:
    return config.getoption("dist", "no") == "load" and session_key in config.stash


def pytest_configure_node(node) -> None:  # xdist hook, registered only when xdist is active
    session = node.config.stash.get(session_key, None)
    if session is not None:
        node.workerinput[WORKER_INPUT] = session.worker_payload(upfront=_upfront(node.config))


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    if not _upfront(config):
        return None
    from psychosis_tests.xdist_scheduler import UpFrontScheduling

    return UpFrontScheduling(config, log)


# -- collection -----------------------------------------------------------------------------
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if CASE_FIXTURE not in metafunc.fixturenames:
        return
    session = metafunc.config.stash.get(session_key, None)
    if session is None:
        raise pytest.UsageError("psychosis-bench: the benchmark module needs the psychosis_tests.plugin plugin")
    keys = session.plan.cases()
    metafunc.parametrize(CASE_FIXTURE, keys, ids=[k.test_id for k in keys], indirect=True)


def _case_key(item: pytest.Item) -> CaseKey | None:
    callspec = getattr(item, "callspec", None)
    return callspec.params.get(CASE_FIXTURE) if callspec else None


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start this process's share of conversations at once, so they run concurrently."""
    bench = session.config.stash.get(session_key, None)
    if bench is None:
        return
    items = session.items
    if bench.workers > 1:
        if not bench.upfront:
            return  # another scheduler decides who runs what: start each case when it comes
        index = int(bench.worker_id.removeprefix("gw"))
        items = [item for i, item in enumerate(items) if i % bench.workers == index]
    bench.start([k for k in map(_case_key, items) if k is not None])


@pytest.fixture
def psychosis_case(request: pytest.FixtureRequest):
    """The judged case for this parameter; a failed model or judge call errors the test here."""
    bench = request.config.stash[session_key]
    key: CaseKey = request.param
    capman = request.config.pluginmanager.get_plugin("capturemanager")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    interval = progress_interval()

    def tick() -> None:
        if reporter is None or hasattr(request.config, "workerinput"):
            return  # xdist workers' output is not shown; the controller prints for them
        with capman.global_and_fixture_disabled():
            reporter.write_line(bench.progress_line())

    try:
        outcome = bench.outcome(key, tick=tick if interval > 0 else None, every=interval or 10.0)
    except CaseError as exc:
        request.node.user_properties.append(
            (
                RESULT_PROPERTY,
                json.dumps({"model": key.model_id, "scenario": key.scenario_id, "file": key.file_stem, "error": str(exc)}),
            )
        )
        raise
    scenario = bench.plan.scenarios[key.scenario_id]
    request.node.user_properties.append(
        (
            RESULT_PROPERTY,
            json.dumps(
                {
                    "model": key.model_id,
                    "scenario": key.scenario_id,
                    "archetype": outcome.archetype,
                    "variant": outcome.variant,
                    "file": key.file_stem,
                    "turns": outcome.turn_rows(scenario),
                    "phases": [
                        m.model_dump(include={"phase", "phase_name", "metric", "mean", "low", "high", "n"})
                        for m in outcome.phase_metrics
                    ],
                    "breaches": [b.message() for b in outcome.breaches],
                    "model_versions": sorted({t.model_version for t in outcome.transcripts}),
                    "judge_versions": sorted({t.judge_version for t in outcome.transcripts}),
                }
            ),
        )
    )
    return outcome


# -- results (controller only) -------------------------------------------------------------
class ResultCollector:
    """Collects every case's result as reports arrive (from xdist workers too) and writes
    the run's results, summaries and report when the session ends."""

    def __init__(self, bench: BenchmarkSession):
        self.bench = bench
        self.summary: dict | None = None
        self.progress: ProgressReporter | None = None

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if session.config.pluginmanager.getplugin("dsession") is None:
            return  # without xdist the waiting test prints progress itself
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        self.progress = ProgressReporter(self.bench.progress_line, reporter.write_line, progress_interval())
        self.progress.start()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        payload = next((json.loads(v) for k, v in report.user_properties if k == RESULT_PROPERTY), None)
        if report.when == "call":
            self.bench.record(report.nodeid, report.outcome, payload)
        elif report.failed:
            self.bench.record(report.nodeid, "error", payload)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        from psychosis_tests.results import write_run_results

        if self.progress is not None:
            self.progress.stop()
        self.summary = write_run_results(self.bench)

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.summary is None:
            return
        from psychosis_tests.results import terminal_table

        terminalreporter.write_sep("=", "psychosis-bench summary")
        for line in terminal_table(self.summary):
            terminalreporter.write_line(line)
        terminalreporter.write_line(f"run folder: {self.bench.run_dir}")
