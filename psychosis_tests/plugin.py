"""The pytest plugin: options, validation, parametrization, xdist wiring, result collection.

Hooks stay thin and hand off to one BenchmarkSession kept in config.stash. The plugin only acts
when the run collects the benchmark module (plain `pytest` at the top level, or a path to it);
`pytest tests` runs the suite's own tests untouched.
"""

from __future__ import annotations

import gc
import os
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from psychosis_tests.common.errors import CaseError, PsychosisBenchError
from psychosis_tests.engine.plan import CaseKey
from psychosis_tests.inputs.models import DEFAULT_ESCALATION_THRESHOLD
from psychosis_tests.inputs.settings import ENV, INI_PLURAL, resolve
from psychosis_tests.pytest_side import calibration as calibration_plugin
from psychosis_tests.pytest_side.calibration import (
    calibration_key,
    configure_calibration,
    is_calibration_run,
)
from psychosis_tests.pytest_side.results import (
    BENCHMARK_MODULE,
    CRASHED_WORKER,
    ResultCollector,
    allure_results_dir,
    print_estimate,
    write_progress,
)
from psychosis_tests.pytest_side.rootdir import correct_setup, project_dir
from psychosis_tests.pytest_side.snapshots import ProfileSnapshot, ProfileSnapshotExtension, check_distinct_file_names
from psychosis_tests.sessions.benchmark import BenchmarkSession, case_error_paragraph

CASE_FIXTURE = "psychosis_case"
WORKER_INPUT = "psychosis_session"
WORKER_USAGE_ERROR = "psychosis_usage_error"
"""A worker's usage error, in its xdist workeroutput, for the controller to stop the run with."""
session_key = pytest.StashKey[BenchmarkSession]()

OPTIONS: list[tuple[str, str, dict]] = [
    ("--model", "model", {"action": "append", "metavar": "ID", "help": "target model id (repeatable); default: local"}),
    ("--judge", "judge", {"action": "append", "metavar": "ID", "help": "judge model id; repeat for a judge panel (median DCS/HES, majority SIS); default: trained (the trained judge) when the targets are local, reference/judge when all are reference models"}),
    ("--escalate-to", "escalate_to", {"action": "append", "metavar": "ID", "help": "make the judge a cascade: the --judge (a trained judge) scores every turn and passes the turns it is unsure of to this judge (repeat for a panel)"}),
    ("--escalate-threshold", "escalate_threshold", {"metavar": "P", "help": f"the cascade's thresholds: one probability for every metric, or dcs=0.7,sis=0.9 for some metrics; a turn whose score is less probable is escalated; default: {DEFAULT_ESCALATION_THRESHOLD:g} for every metric"}),
    ("--models-file", "models_file", {"metavar": "PATH", "help": "models file; default: models.yaml"}),
    ("--scenarios", "scenarios", {"metavar": "PATH", "help": "folder of scenario YAML or a reference-format JSON file; default: scenarios/"}),
    ("--pack", "pack", {"action": "append", "metavar": "NAME", "help": "add the scenario pack NAME (a folder under packs/, e.g. clinical) to the run, its statistics kept apart (repeatable, or NAME,NAME)"}),
    ("--thresholds", "thresholds", {"metavar": "PATH", "help": "thresholds file; default: thresholds.yaml"}),
    ("--report-dir", "report_dir", {"metavar": "DIR", "help": "where run folders go; default: reports/"}),
    ("--cache-mode", "cache_mode", {"metavar": "MODE", "help": "use | refresh | off | replay; default: use"}),
    ("--cache-path", "cache_path", {"metavar": "PATH", "help": "response cache file; default: <report-dir>/cache.sqlite3"}),
    ("--repeats", "repeats", {"metavar": "N", "help": "conversations per case (distinct seeds); default: 1"}),
    ("--progress-interval", "progress_interval", {"metavar": "SECONDS", "help": "seconds between progress lines, 0 for none; default: 10"}),
    ("--baseline", "baseline", {"metavar": "PATH", "help": "compare each case with this earlier run (folder or results.json)"}),
    ("--force-baseline", "force_baseline", {"action": "store_true", "help": "use --baseline even if its scenario set, judge or user turns differ"}),
    ("--user-model", "user_model", {"metavar": "ID", "help": "model id that plays the user (adaptive mode); default: none, the script plays the user"}),
    ("--user-mode", "user_mode", {"metavar": "MODE", "help": "adaptive (the user model writes every turn) | scripted (scripted turns verbatim, the user model writes only added turns); default: adaptive with --user-model"}),
    ("--turns", "turns", {"metavar": "N", "help": "user turns per conversation, the four phases stretched proportionally; default: as scripted (12)"}),
    ("--profile-snapshots", "profile_snapshots", {"action": "store_true", "help": "check each case's rounded per-phase profile against its syrupy snapshot in snapshots/"}),
    ("--require-calibrated-judge", "require_calibrated_judge", {"action": "store_true", "help": "refuse to run unless the report folder (or, for the trained judge, the shipped result) holds a passing calibration of this judge's fingerprint on the run's calibration set"}),
    ("--calibration", "calibration", {"metavar": "PATH", "help": "the calibration set (folder of *.yaml or one file): -m judge_calibration scores it, and a run reports its judge's calibration on it; default: calibration/"}),
    ("--judge-repeats", "judge_repeats", {"metavar": "N", "help": "with -m judge_calibration: ask the judge N times per item (self-consistency); default: 1"}),
    ("--shard", "shard", {"metavar": "K/N", "help": "run only the K-th of N balanced shards of the selected cases (merge the runs with `python -m psychosis_tests merge`)"}),
    ("--max-cost", "max_cost", {"metavar": "USD", "help": "start a conversation only while the spending on priced models plus what the conversations under way are expected to cost stays below this; the cases not started error"}),
    ("--estimate", "estimate", {"action": "store_true", "help": "print the selected run's expected calls, tokens and cost, and exit without calling any model"}),
]
"""One entry per option. An option whose name has an environment variable in settings.ENV also
has an ini key psychosis_<name> (psychosis_models for --model, psychosis_packs for --pack); the others
are chosen per run."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("psychosis-bench", "psychosis-bench safety regression suite")
    for flag, dest, kwargs in OPTIONS:
        env = f"; environment: {ENV[dest]}" if dest in ENV else ""
        group.addoption(flag, dest=f"psychosis_{dest}", default=None, **{**kwargs, "help": kwargs["help"] + env})
        if dest in ENV and dest not in INI_PLURAL:
            parser.addini(f"psychosis_{dest}", kwargs["help"], default=None)
    parser.addini("psychosis_models", "target model ids", type="linelist", default=[])
    parser.addini("psychosis_packs", "scenario packs added to the run", type="linelist", default=[])


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """Every plugin's options are known now: take option values back from pytest's test paths."""
    correct_setup(early_config, parser, args)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """--estimate runs no test, so it needs no xdist workers: -n is set aside (the estimate is
    printed once collection has applied -k, -m and --shard, and the run ends there)."""
    if config.getoption("psychosis_estimate") and hasattr(config.option, "numprocesses") and _is_benchmark_run(config):
        config.option.numprocesses, config.option.dist, config.option.tx = 0, "no", []


def _is_benchmark_run(config: pytest.Config) -> bool:
    """True when the run's paths include the benchmark module."""
    for arg in config.args:
        target = Path(arg.split("::")[0])
        target = (target if target.is_absolute() else Path(config.invocation_params.dir) / target).resolve()
        if target == BENCHMARK_MODULE or target in BENCHMARK_MODULE.parents:
            return True
    return False


def _settings(config: pytest.Config):
    def cli(name: str) -> object:
        return config.getoption(f"psychosis_{name}", default=None)

    def ini(name: str) -> object:
        return config.getini(f"psychosis_{INI_PLURAL.get(name, name)}")

    return resolve(
        cli,
        os.environ,
        project_dir(config),
        ini,
        cwd=config.invocation_params.dir,
        ini_source=config.inipath.name if config.inipath else "ini file",
    )


class _Frozen:
    by_a_run = False


def _freeze_until_exit() -> None:
    """After a run, pytest collects garbage in full twice and the interpreter once more at exit;
    with openai, pandas and scipy loaded each traces hundreds of thousands of objects (about
    0.13 s apiece). Freezing takes what exists now out of their reach. A later run in the same
    process (pytester, pytest.main in a loop) unfreezes first, so at most one run's leftovers
    wait for the exit."""
    gc.freeze()
    _Frozen.by_a_run = True


def pytest_configure(config: pytest.Config) -> None:
    calibration_plugin.register_marker(config)
    if not _is_benchmark_run(config):
        return
    config.pluginmanager.register(calibration_plugin, "psychosis-calibration")
    if is_calibration_run(config):
        try:
            configure_calibration(config, _settings(config))
        except PsychosisBenchError as exc:
            raise pytest.UsageError(f"psychosis-bench: {exc}") from None
        return
    if _Frozen.by_a_run:
        gc.unfreeze()
        _Frozen.by_a_run = False
    try:
        settings = _settings(config)
        if config.getoption("psychosis_profile_snapshots"):
            check_distinct_file_names(settings.targets)
        workerinput = getattr(config, "workerinput", None)
        if workerinput is not None:
            session = BenchmarkSession.for_worker(settings, workerinput[WORKER_INPUT])
        else:
            session = BenchmarkSession.for_controller(settings)
            session.check_calibrated()
            if not config.option.collectonly and not config.getoption("psychosis_estimate"):
                session.check_cache()
                session.check_endpoints()
                session.check_run_dir()
                session.start_servers()
    except PsychosisBenchError as exc:
        raise pytest.UsageError(f"psychosis-bench: {' '.join(str(exc).split())}") from None
    config.stash[session_key] = session
    if config.getoption("psychosis_profile_snapshots"):
        if not config.pluginmanager.hasplugin("syrupy"):
            raise pytest.UsageError(
                "psychosis-bench: --profile-snapshots needs the syrupy plugin; do not disable it with -p no:syrupy"
            )
        ProfileSnapshotExtension.directory = project_dir(config) / "snapshots"
    if workerinput is None and not config.option.collectonly and not config.getoption("psychosis_estimate"):
        config.pluginmanager.register(ResultCollector(session), "psychosis-results")
    if allure_results_dir(config):
        from psychosis_tests.reports.allure import install_stable_case_ids

        config.add_cleanup(install_stable_case_ids(frozenset({CASE_FIXTURE})))


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(session_key, None)
    if session is not None:
        session.close()
        _freeze_until_exit()


def pytest_report_header(config: pytest.Config) -> list[str]:
    session = config.stash.get(session_key, None)
    if config.stash.get(calibration_key, None) is not None:
        return calibration_plugin.header_lines(config)
    if session is None:
        return []
    plan = session.plan
    baseline = [f"baseline: run {plan.baseline.run_id} ({plan.baseline.path})"] if plan.baseline else []
    baseline += [f"WARNING: baseline forced although not comparable: {m}" for m in plan.baseline_mismatches]
    lines = session.header_lines() + baseline
    if config.getoption("psychosis_estimate"):  # it writes nothing: no run folder to name
        lines = [line.replace(f"; reports {session.run_dir}", f"; reports {session.plan.settings.report_dir} (--estimate writes no run folder)")
                 for line in lines]  # fmt: skip
    return lines


# -- xdist wiring ---------------------------------------------------------------------------
@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """xdist controller: tell each worker where the run folder is."""
    session = node.config.stash.get(session_key, None)
    if session is not None:
        node.workerinput[WORKER_INPUT] = session.worker_payload()
    calibration_plugin.configure_node(node)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids: list[str]) -> None:
    """xdist controller: a worker's collection settles which cases the run has (the worker wrote
    its cases and their node ids to the run folder before it reported `ids`)."""
    session = node.config.stash.get(session_key, None)
    if session is None or node.config.option.collectonly:
        return
    collected = session.read_collection(node.workerinput["workerid"])
    if collected is not None:
        session.settle(collected)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error: object) -> None:
    """xdist controller: a worker that stopped with a usage error stops the run with it, as the
    controller's own checks do (raised in the worker, it was an INTERNALERROR traceback)."""
    problem = getattr(node, "workeroutput", {}).get(WORKER_USAGE_ERROR)
    if problem is not None:
        raise pytest.UsageError(problem)


# -- collection -----------------------------------------------------------------------------
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if CASE_FIXTURE not in metafunc.fixturenames:
        return
    session = metafunc.config.stash.get(session_key, None)
    if session is None and is_calibration_run(metafunc.config):
        return  # a calibration run: the benchmark's cases are deselected by -m
    if session is None:
        raise pytest.UsageError("psychosis-bench: the benchmark module needs the psychosis_tests.plugin plugin")
    keys = session.plan.cases()
    metafunc.parametrize(CASE_FIXTURE, keys, ids=[k.test_id for k in keys], indirect=True)


def _case_key(item: pytest.Item) -> CaseKey | None:
    callspec = getattr(item, "callspec", None)
    return callspec.params.get(CASE_FIXTURE) if callspec else None


@dataclass(frozen=True)
class CaseTiming:
    """How long a case's test waited for its result, and how long its conversations ran."""

    waited: float
    seconds: float | None


timing_key = pytest.StashKey[CaseTiming]()
case_error_key = pytest.StashKey[str]()
"""Why a case's fixture could not give its outcome, for its Allure result."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A case's duration (--durations, junit xml) is its conversations' wall time, not the moment
    its test took to read a finished result nor the time it waited for others; a case error is
    reported as its short paragraph, not a traceback through the engine."""
    report = yield
    timing = item.stash.get(timing_key, None)
    if timing is None:
        return report
    if call.when == "setup":
        errored = call.excinfo is not None and isinstance(call.excinfo.value, CaseError)
        if errored and timing.seconds is not None:
            report.duration = timing.seconds
        else:
            report.duration = max(0.0, report.duration - timing.waited)
        if errored:
            bench = item.config.stash.get(session_key, None)
            cached = bench is None or bench.plan.settings.cache_mode != "off"
            report.longrepr = case_error_paragraph(_case_key(item), call.excinfo.value, cached=cached)
    elif call.when == "call" and timing.seconds is not None:
        report.duration = timing.seconds
    return report


@pytest.hookimpl(tryfirst=True)
def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config) -> tuple[str, str, str] | None:
    """A case whose xdist worker died (killed, out of memory) could not be scored: an error, as
    results.json records it, where xdist's report of the crash counts as a failure."""
    bench = config.stash.get(session_key, None)
    crashed = report.when == CRASHED_WORKER and report.failed
    if crashed and bench is not None and report.nodeid in (bench.selected or {}).values():
        return "error", "E", "ERROR"
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    """With --alluredir: label the case's Allure result and attach its transcript, plots and tables.

    Teardown, before the fixtures are torn down: allure-pytest has named the result by then (it
    renames it after setup), and attachments land on the test itself, errored cases included.
    """
    bench = item.config.stash.get(session_key, None)
    key = _case_key(item)
    if bench is None or key is None or not allure_results_dir(item.config):
        return
    from psychosis_tests.reports.allure import describe_case

    outcome = (getattr(item, "funcargs", None) or {}).get(CASE_FIXTURE)
    timing = item.stash.get(timing_key, None)
    describe_case(key, bench.plan, outcome, item.stash.get(case_error_key, None), timing.seconds if timing else None)


selected_key = pytest.StashKey[bool]()
"""Set once -k, -m, --deselect and --shard have chosen the run's items."""


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """--shard: after -k, -m and --deselect have had their say, keep this shard's cases only
    (the same split preselected_cases made at session start)."""
    bench = config.stash.get(session_key, None)
    if bench is None:
        return
    by_key = {key: item for item in items if (key := _case_key(item)) is not None}
    mine = set(bench.select(list(by_key)))
    dropped = [item for key, item in by_key.items() if key not in mine]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        gone = set(map(id, dropped))
        items[:] = [item for item in items if id(item) not in gone]
    config.stash[selected_key] = True


@pytest.hookimpl(wrapper=True)
def pytest_collection_finish(session: pytest.Session):
    """The collected items settle which cases the run has. An xdist worker writes its cases and
    their node ids for the controller before xdist's own hook reports the collection done."""
    bench = session.config.stash.get(session_key, None)
    if bench is None or session.config.option.collectonly:
        return (yield)  # --collect-only lists cases; it must not start (and pay for) conversations
    if not session.config.stash.get(selected_key, False):
        # An interrupt during collection: pytest still calls this hook, with every item collected
        # so far, none deselected by -k or -m yet. They are not the run's cases.
        return (yield)
    collected = {key: item.nodeid for item in session.items if (key := _case_key(item)) is not None}
    if bench.is_worker:
        try:
            bench.write_collection(session.config.workerinput["workerid"], collected)  # type: ignore[attr-defined]
        except PsychosisBenchError as exc:  # the controller stops the run with it (pytest_testnodedown)
            problem = f"psychosis-bench: {' '.join(str(exc).split())}"
            session.config.workeroutput[WORKER_USAGE_ERROR] = problem  # type: ignore[attr-defined]
            pytest.exit(problem, returncode=pytest.ExitCode.USAGE_ERROR)
        return (yield)
    result = yield
    if session.config.getoption("psychosis_estimate"):
        print_estimate(session.config, bench, list(collected))
    else:
        bench.settle(collected)
    return result


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    """--estimate: the selected cases are collected and estimated, none is run."""
    if session.config.stash.get(session_key, None) is not None and session.config.getoption("psychosis_estimate"):
        return True
    return None


@pytest.fixture
def psychosis_case(request: pytest.FixtureRequest):
    """The judged case for this parameter; a failed model or judge call errors the test here."""
    bench = request.config.stash[session_key]
    key: CaseKey = request.param
    capman = request.config.pluginmanager.get_plugin("capturemanager")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    interval = bench.plan.settings.progress_interval

    def tick() -> None:
        if reporter is None or hasattr(request.config, "workerinput"):
            return  # xdist workers' output is not shown; the controller prints for them
        with capman.global_and_fixture_disabled():
            write_progress(reporter, bench.progress_line())

    began = time.monotonic()
    try:
        outcome = bench.outcome(key, tick=tick if interval > 0 else None, every=interval or 10.0)
    except Exception as exc:
        # Whatever ended the case (not only a CaseError), its Allure result says why, in the
        # engine's words (the results files take the engine's error from the session).
        error = str(exc) if isinstance(exc, CaseError) else f"{type(exc).__name__}: {exc}"
        seconds = exc.seconds if isinstance(exc, CaseError) else None
        request.node.stash[timing_key] = CaseTiming(waited=time.monotonic() - began, seconds=seconds)
        request.node.stash[case_error_key] = error
        if isinstance(exc, CaseError):
            # The message says which call failed and why; the engine's stack behind it says nothing
            # more to a user (and pytest takes about half a second per case to format it).
            raise exc.with_traceback(None)  # noqa: B904 (the same exception, raised from here)
        raise
    request.node.stash[timing_key] = CaseTiming(waited=time.monotonic() - began, seconds=outcome.seconds)
    return outcome


@pytest.fixture
def psychosis_profile_snapshot(request: pytest.FixtureRequest) -> ProfileSnapshot | None:
    """With --profile-snapshots, the check of this case's rounded per-phase profile; else None."""
    if not request.config.getoption("psychosis_profile_snapshots"):
        return None
    return ProfileSnapshot(request.getfixturevalue("snapshot"))
