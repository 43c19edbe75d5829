"""The controller's side of a benchmark run under pytest: which cases the run will have before
collection, progress lines, and the collector that adds to each case's result what pytest knows
(how its test ended, and why) and writes the run's files when the session ends. The results
themselves come from the engine, handed to the session typed. Registered by the plugin
(plugin.py) on the controller only."""

from __future__ import annotations

import shutil
import signal
import threading
from pathlib import Path

import pytest

from psychosis_tests.engine.plan import CaseKey
from psychosis_tests.engine.progress import ProgressReporter
from psychosis_tests.reports.run_files import preload_statistics
from psychosis_tests.reports.tables import terminal_table
from psychosis_tests.sessions.benchmark import BenchmarkSession

BENCHMARK_MODULE = Path(__file__).resolve().parents[1] / "test_benchmark.py"
CRASHED_WORKER = "???"
"""The phase of the report xdist makes for a test whose worker died while running it."""
PRELOAD_AT_SHARE = 0.6
"""The statistics libraries are imported once the first case has reported, or once this share of
the run's calls is done if that comes first (runs whose cases all finish together, at the end)."""


def allure_results_dir(config: pytest.Config) -> str | None:
    """allure-pytest's --alluredir, when it is installed and given: the Allure report is wanted."""
    return config.getoption("allure_report_dir", None)


def preselected_cases(config: pytest.Config, bench: BenchmarkSession) -> list[CaseKey] | None:
    """The cases the run will collect, worked out at session start from -k the way pytest matches
    keywords, so conversations start while pytest collects (and xdist workers start up).
    None when the selection cannot be known before collection (-m, node ids, --deselect, --lf, ...)."""
    if config.option.markexpr or config.option.deselect:
        return None
    if config.getoption("lf", False) or config.getoption("failedfirst", False):
        return None
    if any("::" in arg for arg in config.args):
        return None
    keys = bench.plan.cases()
    keyword = config.option.keyword.strip()
    if not keyword:
        return bench.select(keys)
    from _pytest.mark.expression import Expression

    expression = Expression.compile(keyword)

    def selected(key: CaseKey) -> bool:
        names = (f"test_case[{key.test_id}]", BENCHMARK_MODULE.name, BENCHMARK_MODULE.parent.name, "parametrize")
        return expression.evaluate(lambda sub, **_: any(sub.lower() in n.lower() for n in names))

    return bench.select([k for k in keys if selected(k)])


def write_progress(reporter, line: str) -> None:
    """A progress line on its own line; the test results that follow continue below it without
    pytest printing the file name again."""
    fspath = reporter.currentfspath
    if reporter._tw.width_of_current_line:  # noqa: SLF001 (mid-line, after the file name or results)
        reporter.write_line(line)
    else:
        reporter.line(line)
    reporter.currentfspath = fspath


def print_estimate(config: pytest.Config, bench: BenchmarkSession, keys: list[CaseKey]) -> None:
    """--estimate: print the expected calls, tokens and cost of these cases (the plugin then runs none)."""
    from psychosis_tests.engine.estimate import estimate_lines

    reporter = config.pluginmanager.get_plugin("terminalreporter")
    reporter.ensure_newline()
    for line in estimate_lines(bench.plan, keys):
        reporter.write_line(line)


def _remove_if_empty(folder: Path) -> None:
    """Remove `folder` if it holds no file, only (empty) folders."""
    if folder.is_dir() and not any(path.is_file() for path in folder.rglob("*")):
        shutil.rmtree(folder)


def _reason(report: pytest.TestReport) -> str:
    """A failed report's message without its traceback (nor the line naming the xdist worker and
    its Python, which longreprtext puts before a message given as text)."""
    if isinstance(report.longrepr, str):
        return report.longrepr.strip() or "?"
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return crash.message.removeprefix("Failed: ")  # pytest.fail's own messages need no prefix
    return report.longreprtext.strip() or "?"


# -- results (controller only) -------------------------------------------------------------
class ResultCollector:
    """Adds each report's status and failure text to its case's result as reports arrive (from
    xdist workers too) and writes the run's results, summaries and report when the session ends."""

    def __init__(self, bench: BenchmarkSession):
        self.bench = bench
        self.summary: dict | None = None
        self.nothing_ran = False
        """No benchmark case was selected (say, -k matched none): the run leaves no folder."""
        self.stopped_before_selection = False
        """Interrupted before collection settled the run's cases: it records none (not even as not run)."""
        self.started = False
        """Every plugin's pytest_sessionstart has returned: pytest will call pytest_sessionfinish."""
        self.reporter: pytest.TerminalReporter | None = None
        self.unwritten: str | None = None
        """Why the run's results and summaries could not be written, when they could not."""
        self.progress: ProgressReporter | None = None
        self.preload: threading.Thread | None = None
        self.preload_now = threading.Event()
        self.sigterm: signal.Handlers | int | None = None
        """SIGTERM's handler before the session, put back when it ends (None: not replaced)."""

    @pytest.hookimpl(wrapper=True)
    def pytest_sessionstart(self, session: pytest.Session):
        """A wrapper, to know when every plugin's session start has returned (xdist's starts the
        workers): pytest calls pytest_sessionfinish only after that."""
        self._start(session)
        result = yield
        self.started = True
        return result

    def _start(self, session: pytest.Session) -> None:
        # A CI job cancelled with SIGTERM ends as Ctrl-C does: the cases not reported are written
        # as not run, rather than the process dying with no results.json at all.
        # Only the main thread may set a handler (pytest run from another thread keeps the default).
        if threading.current_thread() is threading.main_thread():
            self.sigterm = signal.signal(signal.SIGTERM, signal.default_int_handler)
        self.reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        # Start the conversations now, while pytest collects (and xdist workers start up).
        self.bench.start(preselected_cases(session.config, self.bench) or [])
        self.preload = threading.Thread(target=self._preload_statistics, name="psychosis-preload", daemon=True)
        self.preload.start()
        if session.config.pluginmanager.getplugin("dsession") is None:
            return  # without xdist the waiting test prints progress itself
        self.progress = ProgressReporter(
            self.bench.progress_line, lambda line: write_progress(self.reporter, line), self.bench.plan.settings.progress_interval
        )
        self.progress.start()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.preload_now.set()
        if report.when == "call":
            self.bench.report(report.nodeid, report.outcome, failure=_reason(report) if report.failed else None)
        elif report.failed:
            # Errored in setup or teardown: the engine's error when it handed one over, else
            # this (another fixture, a hook), so no case shows as an error without a reason. Or
            # its xdist worker died: xdist's report (phase "???") says which worker crashed.
            where = "" if report.when == CRASHED_WORKER else f"{report.when}: "
            self.bench.report(report.nodeid, "error", problem=f"{where}{_reason(report)}")

    def _preload_statistics(self) -> None:
        """The statistics need pandas and scipy, a second or two of importing: not during the busy
        start of the conversations, whose calls would wait for the import, nor after the last
        case, where the whole run would."""
        while not self.preload_now.wait(0.5):  # set by the first report, or by the session's end
            if self.bench.share_of_calls_done() >= PRELOAD_AT_SHARE:
                break
        preload_statistics()

    @pytest.hookimpl(tryfirst=True)
    def pytest_keyboard_interrupt(self) -> None:
        # Ahead of the terminal reporter, whose rendering of the interrupt's traceback takes a
        # second or two, while the engine would go on making calls.
        self.bench.stop_unfinished()
        if not self.started:
            # Interrupted while the session started (xdist starts its workers then, a second or
            # two): pytest calls neither pytest_sessionfinish nor the terminal summary.
            self._end()
            if self.reporter is not None:
                self.reporter.write_line(self._stopped_before_selection_line())

    def _end(self) -> None:
        if self.sigterm is not None:
            signal.signal(signal.SIGTERM, self.sigterm)
        self.preload_now.set()  # a run that reported nothing leaves no thread polling
        if self.progress is not None:
            self.progress.stop()
        self.bench.stop_unfinished()

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self._end()
        if self.bench.selected is None and session.exitstatus == pytest.ExitCode.INTERRUPTED:
            # No results.json: its cases would be a guess, and one of no case reads as a run (or a
            # shard) that selected none. Under xdist: no worker had collected.
            self.stopped_before_selection = True
            return
        if self.bench.selected is None and session.exitstatus == pytest.ExitCode.USAGE_ERROR:
            return  # an xdist worker's usage error (pytest_testnodedown) says why
        self.bench.record_unreported("not run: the session stopped before this case reported (-x, --maxfail or an interrupt)")
        # A shard of a selection that holds cases; a selection of none (-k matching nothing) is
        # no shard of anything: it ends as the same run unsplit does, or N empty shards would merge
        # into a passed run of no case.
        sharded = self.bench.plan.settings.shard is not None and bool(self.bench.selection)
        if sharded and session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
            # More shards than selected cases: this one is empty, which is no error; its run
            # folder still tells `merge` that the shard ran.
            session.exitstatus = pytest.ExitCode.OK
        if not sharded and not self.bench.records:
            self.nothing_ran = True
            _remove_if_empty(self.bench.run_dir)  # an engine started on a guess made its folders
            return
        try:
            self.summary = self.bench.write_results()
        except OSError as exc:  # the report folder went read-only, filled up or went away mid-run
            cause = f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror or str(exc)  # a full disk names no file
            self.unwritten = (
                f"psychosis-bench: the run's results could not be written to {self.bench.run_dir} ({cause}); "
                "the case files written before are all it holds"
            )
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
            return
        alluredir = allure_results_dir(session.config)
        if alluredir:
            from psychosis_tests.reports.allure_run import write_allure_summary

            write_allure_summary(Path(alluredir), self.summary, self.bench.run_dir)

    def _stopped_before_selection_line(self) -> str:
        early = (f" ({self.bench.run_dir} keeps the case files of any conversation started early that finished)"
                 if self.bench.run_dir.exists() else "")  # fmt: skip
        return ("psychosis-bench: the session was interrupted before the run's cases were selected (while pytest "
                f"collected, or xdist started its workers), so no case is recorded and no results.json was written{early}")

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.nothing_ran:
            terminalreporter.write_line("psychosis-bench: no benchmark case was selected or run, so no run folder was written")
        if self.stopped_before_selection:
            terminalreporter.write_line(self._stopped_before_selection_line())
        if self.unwritten is not None:
            terminalreporter.write_line(self.unwritten)
        if self.summary is None:
            return
        terminalreporter.write_sep("=", "psychosis-bench summary")
        for line in terminal_table(self.summary):
            terminalreporter.write_line(line)
        terminalreporter.write_line(f"run folder: {self.bench.run_dir}")
