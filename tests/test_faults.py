"""The fault matrix: every way an endpoint can misbehave, run through plain pytest, ends visibly.

Each fault is a fault plan of the reference server (psychosis_tests/servers/faults.py), named by
a models-file entry on a loopback server of the test's own, so requests can be counted per model.
docs/reliability.md lists every fault, what the suite does, and the test here that proves it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from psychosis_tests.analysis.outcome import evaluate_case
from psychosis_tests.common.errors import CaseError, inert, redact, safe_url
from psychosis_tests.engine.limits import HOLD_JITTER
from psychosis_tests.engine.plan import CaseKey, Plan
from psychosis_tests.engine.runner import HEARTBEAT_FILE, Runner, case_file as engine_case_file, wait_for_case_file
from psychosis_tests.inputs.settings import RunSettings
from psychosis_tests.servers.reference_server import ReferenceServer
from tests.benchmark_runner import BenchmarkRunner, outcomes
from psychosis_tests.servers.suite import SuiteServers

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[1]
XDIST = pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["n0", "n2"])
KEY_ENV = "PSYCHOSIS_FAULTS_TEST_KEY"
FAKE_KEY = "sk-faults-UNIQUE-3b9d2f7e1c0a4d68"
CASE = "conduit-explicit"
TURNS, JUDGED = 12, 9
ESC = "\x1b"


@pytest.fixture(autouse=True)
def _fake_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, FAKE_KEY)


def entry(server: ReferenceServer, model_id: str, plan: str, **extra: object) -> dict:
    """A models-file entry for a fault plan on the test's server (retries kept short)."""
    return {"id": model_id, "model": plan, "base_url": server.url, "api_key_env": KEY_ENV, "max_retries": 2, **extra}


def playing(runner: BenchmarkRunner, models: list[dict], targets: list[dict], judge: str = "reference/judge") -> list[str]:
    """Options for a run of `targets` judged by `judge`, with `models` as the models file."""
    models_file = runner.write_models_file(models)
    return [f"--models-file={models_file}", *(arg for m in targets for arg in ("--model", m["id"])), "--judge", judge]


def case_file(run_dir: Path, model_id: str) -> dict:
    return json.loads((run_dir / "cases" / f"{model_id}__{CASE}.json").read_text(encoding="utf-8"))


# -- the matrix: one run, one case per fault -----------------------------------------------
PASSING = {
    "f-429": ("fault:429=1,ok?turns=1-2", {}),
    "f-reset": ("fault:reset,ok?turns=1-3", {}),
    "f-cut": ("fault:cut,ok?turns=1-3", {}),
    "f-badjson": ("fault:badjson,ok?turns=1-3", {}),
    "f-badutf8": ("fault:badutf8,ok?turns=1-3", {}),
    "f-ansi": ("fault:ansi", {}),
    "f-huge": ("fault:huge?turns=1", {}),
}
"""Transient faults are retried and the case is scored; hostile text is scored as text."""
ERRORS = {
    "f-503": ("fault:503", {}, r"failed: HTTP 503: reference fault 503, after 3 attempts", 3),
    "f-500": ("fault:500", {"max_retries": 0}, r"failed: HTTP 500: reference fault 500, after 1 attempt", 1),
    "f-hang": ("fault:hang=5", {"timeout": 0.5, "max_retries": 1}, r"timed out: no answer within 0\.5 s, after 2 attempts", None),
    "f-reset-always": ("fault:reset", {}, r"failed: the connection broke before the answer was complete \(ReadError.*\), after 3 attempts", 3),
    "f-cut-always": ("fault:cut", {}, r"failed: the connection broke before the answer was complete \(RemoteProtocolError: .*\), after 3 attempts", 3),
    "f-badjson-always": ("fault:badjson", {}, r"returned a body that is not complete JSON \(.*\), after 3 attempts", 3),
    "f-html": ("fault:html", {}, r"returned an HTML page, not the chat API: is base_url missing /v1\? \(not retryable, 1 attempt\)", 1),
    "f-empty": ("fault:empty", {}, r"returned an empty reply \(content ''\) \(not retryable", 1),
    "f-null": ("fault:null", {}, r"returned no reply text \(content null\) \(not retryable", 1),
    "f-nochoices": ("fault:nochoices", {}, r"returned no choices", 1),
    "f-nomessage": ("fault:nomessage", {}, r"returned a choice without a message", 1),
    "f-filter": ("fault:filter", {}, r"stopped the reply with its content filter \(finish_reason content_filter\): that is the provider's refusal, not the model's answer", 1),
    "f-surrogate": ("fault:surrogate", {}, r"returned a reply holding a lone surrogate \(\\ud800", 1),
    "f-surrogate-model": ("fault:surrogate-model", {}, r"returned a 'model' field holding a lone surrogate \(\\ud800", 1),
    "f-ansi-error": ("fault:ansi-error", {}, r"failed: HTTP 400: bad request \\x1b\[2J\\x1b\[31mRED\\x1b\[0m\\x0d\\x07\\x08", 1),
    "f-echo-key": ("fault:echo-key", {}, r"failed: HTTP 401: Incorrect API key provided: \[redacted\]\. You passed \[redacted\]", 1),
}
"""Faults that end the case as ERROR: the message's cause, and how many requests it took (the
server may not have read a timed-out attempt's request yet: not counted)."""


@XDIST
def test_every_fault_ends_its_case_visibly(
    benchmark_runner: BenchmarkRunner, loopback: ReferenceServer, monkeypatch: pytest.MonkeyPatch, xdist: list[str]
) -> None:
    monkeypatch.setenv("PSYCHOSIS_PROGRESS_INTERVAL", "0.25")
    models = [entry(loopback, m, plan, **extra) for m, (plan, extra) in PASSING.items()]
    models += [entry(loopback, m, plan, **extra) for m, (plan, extra, _, _) in ERRORS.items()]
    models.append(entry(loopback, "f-length", "fault:length"))
    models.append(entry(loopback, "f-ansi-fails", "fault:ansi@sycophant"))  # its failure message quotes a reply
    result = benchmark_runner.run(*playing(benchmark_runner, models, models), "-k", CASE, "-rA", *xdist)
    found = outcomes(result)
    assert {m: found.get(f"{m}-{CASE}") for m in PASSING} == dict.fromkeys(PASSING, "PASSED"), result.outlines[-40:]
    assert {m: found.get(f"{m}-{CASE}") for m in ERRORS} == dict.fromkeys(ERRORS, "ERROR")
    run_dir = benchmark_runner.only_run_dir()
    terminal = result.stdout.str()
    for model_id, (plan, _, cause, requests) in ERRORS.items():
        error = case_file(run_dir, model_id)["error"]
        assert re.fullmatch(rf"{model_id} {CASE} repeat 0 turn 1: '{model_id}' at {re.escape(loopback.url)} {cause}.*", error), error
        assert error in terminal, model_id  # the error section shows the whole message
        assert requests is None or loopback.requests_for(plan) == requests, model_id
    # Transient faults cost one extra request per faulty turn, then the turn is answered.
    for model_id, faulty_turns in (("f-429", 2), ("f-reset", 3), ("f-cut", 3), ("f-badjson", 3), ("f-badutf8", 3)):
        assert loopback.requests_for(PASSING[model_id][0]) == TURNS + faulty_turns, model_id
    case = lambda model_id: case_file(run_dir, model_id)  # noqa: E731
    # 429 with Retry-After 1 s on turns 1-2: the case waited as told, and the progress line said so.
    assert case("f-429")["seconds"] >= 2.0
    assert re.search(r"waiting to retry \(up to 1\.[01] s", terminal)  # 1 s, plus the hold's jitter
    # A reply cut at its length limit is scored as it stands and marked on its turn.
    assert found[f"f-length-{CASE}"] in ("PASSED", "FAILED")
    assert {t["finish_reason"] for t in case("f-length")["transcripts"][0]["turns"]} == {"length"}
    # A failure message quotes the worst reply with its escape codes made visible.
    assert found[f"f-ansi-fails-{CASE}"] == "FAILED"
    assert re.search(r"worst reply \(t\d+, \w+=\d\): ['\"]\\x1b\[2J\\x1b\[31mRED", terminal), terminal[-3000:]
    # The 1 MiB reply is kept whole in the case file.
    assert len(case("f-huge")["transcripts"][0]["turns"][0]["reply"]) >= 1 << 20
    # Hostile text never reaches the terminal or the summaries raw; the key never appears anywhere.
    for text in (result.stdout.str(), result.stderr.str(), *(
        (run_dir / name).read_text(encoding="utf-8") for name in ("summary.md", "summary.csv", "results.json")
    )):
        assert ESC not in text and "\r" not in text.replace("\r\n", "\n")
        assert FAKE_KEY not in text
    # What bounds the matrix's length: no request beyond those the plans call for (the hang's
    # timed-out attempts aside, which the server may not have read yet) ...
    hang = ERRORS["f-hang"][0]
    planned = {plan: requests for plan, _, _, requests in ERRORS.values() if requests is not None}
    planned |= {PASSING[m][0]: TURNS + n for m, n in (("f-429", 2), ("f-reset", 3), ("f-cut", 3), ("f-badjson", 3), ("f-badutf8", 3))}
    planned |= dict.fromkeys((PASSING["f-ansi"][0], PASSING["f-huge"][0], "fault:length", "fault:ansi@sycophant"), TURNS)
    assert {plan: loopback.requests_for(plan) for plan in planned} == planned
    assert loopback.request_count == sum(planned.values()) + loopback.requests_for(hang)
    assert loopback.requests_for(hang) <= 2
    # ... and no wait before a retry longer than the longest asked for: Retry-After 1 s (plus at most
    # a tenth of it, the hold's jitter), or the backoff after a second attempt (at most 1 s). The
    # progress lines show every wait under way.
    waits = [float(w) for w in re.findall(r"waiting to retry \(up to (\d+\.\d) s", terminal)]
    assert waits and max(waits) <= 1.0 * (1 + HOLD_JITTER), waits


# -- under load ------------------------------------------------------------------------------
RANDOM_FAULTS = "fault:random:429=0.2,500=0.05"


def test_random_429s_and_500s_under_load_end_every_case_with_a_reason(
    benchmark_runner: BenchmarkRunner, loopback: ReferenceServer
) -> None:
    """16 scenarios x 2 models, the judge too, with 20% 429s and 5% 500s on every request."""
    models = [
        entry(loopback, "load-guardian", f"{RANDOM_FAULTS}@guardian", max_retries=5),
        entry(loopback, "load-sycophant", f"{RANDOM_FAULTS}@sycophant", max_retries=5),
        entry(loopback, "load-judge", f"{RANDOM_FAULTS}@judge", max_retries=5),
    ]
    result = benchmark_runner.run(*playing(benchmark_runner, models, models[:2], judge="load-judge"), "-k", "not control", "-rA")
    found = outcomes(result)
    assert len(found) == 32
    run_dir = benchmark_runner.only_run_dir()
    for test_id, outcome in found.items():
        model_id = next(m["id"] for m in models if test_id.startswith(m["id"] + "-"))
        scenario = test_id.removeprefix(model_id + "-")
        record = json.loads((run_dir / "cases" / f"{model_id}__{scenario}.json").read_text(encoding="utf-8"))
        expected = "PASSED" if model_id == "load-guardian" else "FAILED"
        if outcome == "ERROR":  # possible (0.25^6 per call) but never silent
            assert re.search(r"failed: HTTP (429|500): .*, after 6 attempts", record["error"]), record["error"]
        else:
            assert outcome == expected, (test_id, outcome)
    results = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
    assert len(results["cases"]) == 32
    faulty = sum(loopback.requests_for(m["model"]) for m in models)
    calls = 32 * (TURNS + JUDGED)
    assert loopback.request_count == faulty
    # The faults were met and retried, and only they were: a quarter of the attempts fail, so the
    # 672 calls take about 896 requests (standard deviation about 17); twice the calls is far off.
    assert calls < faulty < 2 * calls


# -- nothing lost: kill -9, resume, concurrent runs ---------------------------------------
def start_in_own_process(runner: BenchmarkRunner, models: list[dict], *extra: str, report: str = "reports") -> subprocess.Popen:
    """The benchmark in a process of its own: models[0] the target, models[1] the judge."""
    options = playing(runner, models, models[:1], judge=models[1]["id"])
    args = runner.args(*options, *extra, f"--report-dir={runner.path / report}")
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", *args], cwd=runner.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def cached_rows(path: Path) -> int:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]


def conversations(run_dir: Path) -> dict[str, list]:
    """Each case's replies, finish reasons and verdicts."""
    found = {}
    for path in sorted((run_dir / "cases").glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        found[path.stem] = [
            [(t["reply"], t["finish_reason"], t["verdict"]) for t in transcript["turns"]]
            for transcript in record["transcripts"]
        ]
    return found


def test_a_run_killed_mid_way_resumes_without_repeating_a_completed_call(benchmark_runner: BenchmarkRunner) -> None:
    tmp_path = benchmark_runner.path
    selection = ["-k", "(conduit or turing) and not control"]  # 4 cases, 21 calls each
    total_calls = 4 * (TURNS + JUDGED)
    with ReferenceServer(latency=0.03) as server:
        models = [
            entry(server, "det", "guardian", max_concurrency=2),
            entry(server, "det-judge", "judge", max_concurrency=2),
        ]
        killed = start_in_own_process(benchmark_runner, models, *selection)
        cases = benchmark_runner.report_dir
        deadline = time.monotonic() + 30
        while not list(cases.glob("*/cases/*.json")) and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait()
        finished = len(list(cases.glob("*/cases/*.json")))
        assert 1 <= finished < 4, f"{finished} cases had finished when the run was killed"
        kept = cached_rows(benchmark_runner.cache_path)
        assert finished * (TURNS + JUDGED) <= kept < total_calls

        before = server.request_count
        options = playing(benchmark_runner, models, models[:1], judge="det-judge")
        resumed = benchmark_runner.run(*options, *selection)
        resumed.assert_outcomes(passed=4)
        assert server.request_count - before == total_calls - kept  # no completed call was made again

        fresh = benchmark_runner.run(
            *options, *selection, f"--cache-path={tmp_path / 'fresh.sqlite3'}", f"--report-dir={tmp_path / 'fresh'}"
        )
        fresh.assert_outcomes(passed=4)
    resumed_dir = benchmark_runner.run_dirs()[-1]
    (fresh_dir,) = (tmp_path / "fresh").iterdir()
    assert conversations(resumed_dir) == conversations(fresh_dir)
    assert len(conversations(fresh_dir)) == 4
    resumed_results = json.loads((resumed_dir / "summary.json").read_text(encoding="utf-8"))["cases"]
    fresh_results = json.loads((fresh_dir / "summary.json").read_text(encoding="utf-8"))["cases"]
    # The same results; usage differs only in which calls the response cache answered.
    for case in (*resumed_results, *fresh_results):
        case["usage"] = {role: (u["calls"], u["prompt_tokens"], u["completion_tokens"]) for role, u in case["usage"].items()}
    assert resumed_results == fresh_results


def test_a_run_cancelled_with_sigterm_writes_its_results_with_the_cases_not_run(benchmark_runner: BenchmarkRunner) -> None:
    """CI cancels a job with SIGTERM: the run ends as Ctrl-C ends it, with results.json holding
    every selected case, those that had not reported as errors "not run", never as passed; and the
    engine makes no call after the signal beyond those under way (it went on for a second or two,
    while pytest rendered the interrupt, before the run stopped it)."""
    with ReferenceServer(latency=0.25) as server:
        models = [
            entry(server, "det", "guardian", max_concurrency=2),
            entry(server, "det-judge", "judge", max_concurrency=2),
        ]
        cancelled = start_in_own_process(benchmark_runner, models, "-k", "(conduit or turing) and not control")
        deadline = time.monotonic() + 60
        while not list(benchmark_runner.report_dir.glob("*/cases/*.json")) and time.monotonic() < deadline:
            time.sleep(0.02)
        cancelled.send_signal(signal.SIGTERM)
        at_signal = server.request_count
        out, _ = cancelled.communicate(timeout=120)
        after_signal = server.request_count - at_signal
    assert cancelled.returncode == pytest.ExitCode.INTERRUPTED, out
    assert after_signal <= 4, f"{after_signal} calls were made after the signal (4 can be under way)"
    assert "Traceback" not in out
    cases = json.loads((benchmark_runner.only_run_dir() / "results.json").read_text(encoding="utf-8"))["cases"]
    assert len(cases) == 4
    not_run = [c for c in cases if c["outcome"] == "error"]
    assert not_run and all(c["error"].startswith("not run: ") for c in not_run), cases
    assert all(c["outcome"] in ("passed", "error") for c in cases)


class _SignalWhileCollecting:
    """Sends the signal to this process as pytest hands the collected items to the plugins, before -k deselects any."""

    def __init__(self, signum: signal.Signals):
        self.signum = signum

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self) -> None:
        os.kill(os.getpid(), self.signum)


def _int_handler() -> signal.Handlers | int | None:
    """Let SIGINT raise KeyboardInterrupt, as Ctrl-C in a terminal does: a process started in the
    background by a script (a CI runner's job) inherits SIGINT ignored. Returns the handler it had."""
    return signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_run_interrupted_while_collecting_records_no_case(benchmark_runner: BenchmarkRunner, signum: signal.Signals) -> None:
    """pytest still reports the collection finished, with every case collected and none deselected:
    results.json held all 32 as "not run" where -k selected 2. Nothing was selected, so nothing is recorded."""
    args = benchmark_runner.args("--model", "reference/guardian", "-k", "conduit and not control")
    before = _int_handler()
    try:
        result = benchmark_runner.pytester.runpytest(*args, plugins=[_SignalWhileCollecting(signum)], no_reraise_ctrlc=True)
    finally:
        signal.signal(signal.SIGINT, before)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert not list(benchmark_runner.report_dir.glob("*/results.json"))
    assert any(line.startswith(STOPPED_BEFORE_SELECTION) for line in result.outlines), result.outlines[-10:]


def test_a_run_whose_xdist_workers_are_interrupted_while_collecting_records_no_case(benchmark_runner: BenchmarkRunner) -> None:
    """Each worker hands the controller the cases it collected; one interrupted while collecting
    handed it every case, none deselected, and the run recorded them all as "not run"."""
    benchmark_runner.pytester.makepyfile(
        interrupter="""
        import os, signal, pytest

        @pytest.hookimpl(tryfirst=True)
        def pytest_collection_modifyitems(config):
            if hasattr(config, "workerinput"):
                signal.signal(signal.SIGINT, signal.default_int_handler)  # a background job inherits SIGINT ignored
                os.kill(os.getpid(), signal.SIGINT)
        """
    )
    args = benchmark_runner.args("--model", "reference/guardian", "-k", "conduit and not control", "-n", "2",
                                 "--max-worker-restart=0", "-p", "interrupter")  # fmt: skip
    result = benchmark_runner.pytester.runpytest_subprocess(*args, timeout=120)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert not [line for line in result.outlines + result.errlines if "INTERNALERROR" in line]
    assert not list(benchmark_runner.report_dir.glob("*/results.json"))
    assert any(line.startswith(STOPPED_BEFORE_SELECTION) for line in result.outlines), result.outlines[-10:]


STOPPED_BEFORE_SELECTION = ("psychosis-bench: the session was interrupted before the run's cases were selected (while pytest "
                            "collected, or xdist started its workers), so no case is recorded and no results.json was written")  # fmt: skip


@pytest.mark.parametrize("hook", ["pytest_configure_node", "pytest_testnodeready"], ids=["workers-starting", "workers-collecting"])
def test_a_run_under_xdist_cancelled_before_its_workers_collected_says_so(benchmark_runner: BenchmarkRunner, hook: str) -> None:
    """SIGTERM to the controller as xdist starts its workers (pytest then skips pytest_sessionfinish and
    the terminal summary: nothing was said at all) or once they are up but have not collected (it said
    "no benchmark case was selected or run, so no run folder was written" beside the run folder its
    engine had made). As without xdist: no results.json, and the line saying why."""
    benchmark_runner.pytester.makepyfile(
        interrupter=f"""
        import os, signal, pytest

        @pytest.hookimpl(optionalhook=True)
        def {hook}(node):
            os.kill(os.getpid(), signal.SIGTERM)
        """
    )
    args = benchmark_runner.args("--model", "reference/guardian", "-k", "conduit and not control", "-n", "2", "-p", "interrupter")
    result = benchmark_runner.pytester.runpytest_subprocess(*args, timeout=120)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert not list(benchmark_runner.report_dir.glob("*/results.json"))
    assert any(line.startswith(STOPPED_BEFORE_SELECTION) for line in result.outlines), result.outlines[-10:]


def test_a_case_whose_xdist_worker_is_killed_is_an_error_in_every_report(benchmark_runner: BenchmarkRunner) -> None:
    """xdist reports a test whose worker died as failed; the case could not be scored, an error
    in results.json. pytest's summary counted it as failed, and the case's error began with
    xdist's phase "???" and the line naming the worker's Python."""
    benchmark_runner.pytester.makepyfile(
        killer=f"""
        import os, signal

        def pytest_runtest_setup(item):
            if hasattr(item.config, "workerinput") and "{CASE}" in item.nodeid:
                os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    args = benchmark_runner.args("-rA", "--model", "reference/guardian", "-k", "conduit and not control", "-n", "2", "-p", "killer")
    result = benchmark_runner.pytester.runpytest_subprocess(*args, timeout=120)
    result.assert_outcomes(passed=1, errors=1)
    assert outcomes(result) == {f"reference/guardian-{CASE}": "ERROR", "reference/guardian-conduit-implicit": "PASSED"}
    cases = {c["scenario"]: c for c in json.loads((benchmark_runner.only_run_dir() / "results.json").read_text(encoding="utf-8"))["cases"]}
    crashed = re.fullmatch(rf"worker 'gw[01]' crashed while running '\S+::test_case\[reference/guardian-{CASE}\]'", cases[CASE]["error"] or "")
    assert cases[CASE]["outcome"] == "error" and crashed, cases[CASE]["error"]
    assert f"  ERROR reference/guardian / {CASE}: {cases[CASE]['error'][:40]}" in result.stdout.str()


def test_two_runs_share_one_cache_file_at_once(benchmark_runner: BenchmarkRunner) -> None:
    """And pay once for each request: a run waits for the answer the other is calling for."""
    tmp_path = benchmark_runner.path
    with ReferenceServer(latency=0.2) as server:  # slow enough that the two runs overlap
        models = [entry(server, "shared", "guardian"), entry(server, "shared-judge", "judge")]
        other = start_in_own_process(benchmark_runner, models, "-k", "conduit and not control", report="other")
        while not (tmp_path / "other").exists() and other.poll() is None:
            time.sleep(0.02)  # the other run has started its conversations
        this = benchmark_runner.run(*playing(benchmark_runner, models, models[:1], judge="shared-judge"), "-k", "conduit and not control")
        this.assert_outcomes(passed=2)
        out, _ = other.communicate(timeout=120)
        assert other.returncode == 0 and "2 passed" in out, out
        assert server.request_count == 2 * (TURNS + JUDGED)
    with sqlite3.connect(benchmark_runner.cache_path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert cached_rows(benchmark_runner.cache_path) == 2 * (TURNS + JUDGED)


# -- replay reproduces what was recorded -------------------------------------------------------
def test_replay_of_a_model_answering_at_random_gives_the_same_verdicts(benchmark_runner: BenchmarkRunner) -> None:
    args = (*playing(benchmark_runner, [], []), "--model", "reference/random", "-k", "conduit and not control", "--repeats", "2", "-rA")
    recorded = benchmark_runner.run(*args)
    replayed = benchmark_runner.run(*args, "--cache-mode", "replay")
    first, second = benchmark_runner.run_dirs()
    assert outcomes(recorded) == outcomes(replayed) and len(outcomes(recorded)) == 2
    assert conversations(first) == conversations(second)
    # The explicit and implicit variants open with the same words, yet each kept its own answers,
    # which differ (the model tosses a coin per reply).
    replies = [turn[0] for case in conversations(first).values() for transcript in case for turn in transcript]
    assert len(set(replies)) > 2
    comparison = subprocess.run(
        [sys.executable, "-m", "psychosis_tests", "compare", str(first), str(second)],
        capture_output=True, text=True, cwd=REPO,
    )
    assert comparison.returncode == 0, comparison.stdout + comparison.stderr
    assert "**0 regression(s)**, 0 improvement(s), 0 change(s) beyond tolerance but not significant" in comparison.stdout


# -- secrets ---------------------------------------------------------------------------------
def test_no_file_a_run_writes_holds_the_key(benchmark_runner: BenchmarkRunner, loopback: ReferenceServer) -> None:
    models = [entry(loopback, "keyed", "guardian"), entry(loopback, "echoes-key", "fault:echo-key")]
    path = benchmark_runner.path
    args = benchmark_runner.args(*playing(benchmark_runner, models, models))
    del args[args.index("no:cacheprovider") - 1 : args.index("no:cacheprovider") + 1]  # pytest's cache is checked too
    result = benchmark_runner.pytester.runpytest(
        *args, "-k", CASE, "-rA",
        f"--alluredir={path / 'allure-results'}", f"--junitxml={path / 'junit.xml'}",
        f"--log-file={path / 'run.log'}", "--log-file-level=DEBUG",
        "-o", f"cache_dir={path / '.pytest_cache'}",
    )
    assert outcomes(result) == {f"keyed-{CASE}": "PASSED", f"echoes-key-{CASE}": "ERROR"}
    assert "Incorrect API key provided: [redacted]" in result.stdout.str()
    written = [p for p in path.rglob("*") if p.is_file()]
    for must_exist in ("allure-results", "junit.xml", "run.log", ".pytest_cache", "cache.sqlite3", "summary.md"):
        assert any(must_exist in p.parts or p.name == must_exist for p in written), must_exist
    for path in written:
        assert FAKE_KEY.encode() not in path.read_bytes(), path
    assert FAKE_KEY not in result.stdout.str() + result.stderr.str()


# -- the engine never leaves a worker waiting ---------------------------------------------------
def test_a_worker_stops_waiting_when_the_engine_stops_beating(tmp_path: Path) -> None:
    key = CaseKey("reference/guardian", CASE)
    (tmp_path / "cases").mkdir()
    heartbeat = tmp_path / HEARTBEAT_FILE
    heartbeat.touch()
    os.utime(heartbeat, (time.time() - 600, time.time() - 600))  # the engine's last sign, long ago
    began = time.monotonic()
    with pytest.raises(CaseError, match=r"the engine in the controller process stopped working \(no heartbeat"):
        wait_for_case_file(tmp_path, key, poll=0.01, lost_after=0.2)
    assert time.monotonic() - began < 5


def test_a_worker_does_not_wait_again_for_each_case_once_the_heartbeat_is_lost(tmp_path: Path) -> None:
    """The heartbeat's age counts, not the time this case has waited: a worker holding many cases
    of an engine that stopped beating gave each of them its own 60 s (hours over a whole run)."""
    (tmp_path / "cases").mkdir()
    heartbeat = tmp_path / HEARTBEAT_FILE
    heartbeat.touch()
    os.utime(heartbeat, (time.time() - 30, time.time() - 30))  # the engine's last sign, 30 s ago
    began = time.monotonic()
    for scenario in ("conduit-explicit", "conduit-implicit", "turing-test-explicit"):
        with pytest.raises(CaseError, match=r"stopped working \(no heartbeat"):
            wait_for_case_file(tmp_path, CaseKey("reference/guardian", scenario), poll=0.01, lost_after=3)
    assert time.monotonic() - began < 2


def test_an_outcome_that_cannot_be_written_still_ends_its_case_as_an_error(tmp_path: Path) -> None:
    """The hang of issue 16: the engine could not write a case file, and the worker waited for ever."""
    settings = RunSettings(
        targets=["reference/guardian"], judges=["reference/judge"], models_file=tmp_path / "absent.yaml",
        models_file_given=False, scenarios=REPO / "scenarios", thresholds=REPO / "thresholds.yaml",
        report_dir=tmp_path, cache_mode="off", cache_path=tmp_path / "unused.sqlite3",
    )
    plan = Plan.load(settings)
    key = CaseKey("reference/guardian", CASE)

    def unwritable(*args: object):
        outcome = evaluate_case(*args)  # type: ignore[arg-type]
        outcome.transcripts[0].model_version = "broken \ud800"  # cannot be encoded as UTF-8
        return outcome

    with (
        SuiteServers.start(plan.specs_served_by_suite(), log_dir=tmp_path) as served,
        Runner(plan, run_dir=tmp_path / "run", evaluate=unwritable, base_urls=served.base_urls) as runner,
    ):
        with pytest.raises(CaseError, match="its outcome could not be written") as caught:
            runner.outcome(key)
    with pytest.raises(CaseError) as waited:
        wait_for_case_file(tmp_path / "run", key, lost_after=5)
    assert str(waited.value) == str(caught.value)
    assert "UnicodeEncodeError" in engine_case_file(tmp_path / "run", key).read_text(encoding="utf-8")


@XDIST
def test_a_run_whose_results_cannot_be_written_says_so_in_one_line(
    benchmark_runner: BenchmarkRunner, monkeypatch: pytest.MonkeyPatch, xdist: list[str]
) -> None:
    """The report folder filled up (or went read-only) before results.json: not a traceback wall
    after every case passed, and not exit status 0."""
    from psychosis_tests.reports import run_files

    write_json = run_files._write_json

    def full_disk(path: Path, data: object) -> None:
        if path.name == "results.json":
            raise OSError(28, "No space left on device")
        write_json(path, data)

    monkeypatch.setattr(run_files, "_write_json", full_disk)
    result = benchmark_runner.run("--model", "reference/guardian", "-k", CASE, *xdist)
    run_dir = benchmark_runner.only_run_dir()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    output = result.outlines + result.errlines
    assert not [line for line in output if "Traceback" in line or "INTERNALERROR" in line], output
    expected = f"psychosis-bench: the run's results could not be written to {run_dir} (No space left on device); the case files written before are all it holds"
    assert output.count(expected) == 1, output[-20:]
    assert (run_dir / "cases" / f"reference_guardian__{CASE}.json").exists()
    assert not (run_dir / HEARTBEAT_FILE).exists()  # the engine and servers were stopped as usual


def test_engine_failures_that_are_not_case_errors_end_the_case_with_their_cause(tmp_path: Path) -> None:
    settings = RunSettings(
        targets=["reference/guardian"], judges=["reference/judge"], models_file=tmp_path / "absent.yaml",
        models_file_given=False, scenarios=REPO / "scenarios", thresholds=REPO / "thresholds.yaml",
        report_dir=tmp_path, cache_mode="off", cache_path=tmp_path / "unused.sqlite3",
    )
    key = CaseKey("reference/guardian", CASE)

    def broken(*args: object):
        raise ZeroDivisionError("scoring blew up")

    plan = Plan.load(settings)
    with (
        SuiteServers.start(plan.specs_served_by_suite(), log_dir=tmp_path) as served,
        Runner(plan, run_dir=tmp_path / "run", evaluate=broken, base_urls=served.base_urls) as runner,
    ):
        with pytest.raises(CaseError, match="^ZeroDivisionError: scoring blew up$") as caught:
            runner.outcome(key)
    assert isinstance(caught.value.__cause__, ZeroDivisionError)  # its traceback is kept
    with pytest.raises(CaseError, match="^ZeroDivisionError: scoring blew up$"):
        wait_for_case_file(tmp_path / "run", key, lost_after=5)


# -- error text ----------------------------------------------------------------------------------
def test_error_text_is_inert_and_key_shapes_are_masked() -> None:
    hostile = "boom \x1b[31mred\x1b[0m\r\x07 \u202e \ud800 line\nnext\ttab"
    assert inert(hostile) == "boom \\x1b[31mred\\x1b[0m\\x0d\\x07 \\u202e \\ud800 line\nnext\ttab"
    echoed = "Incorrect API key provided: sk-proj-****wxyz. Header was Bearer abc.def-123; key AIzaSyA1234567890abcdefghijk"
    assert redact(echoed) == "Incorrect API key provided: [redacted]. Header was [redacted]; key [redacted]"
    assert redact("the key is hunter2-hunter2", ["hunter2-hunter2"]) == "the key is [redacted]"
    assert str(CaseError(f"401: {FAKE_KEY} \x1b[2J")) == "401: [redacted] \\x1b[2J"


def test_invisible_format_characters_and_unicode_tags_are_made_visible() -> None:
    hidden = "a\u061cb\ufeffc\u2060d\u180ee\U000e0041\U000e007ff\u00adg\ufe0fh"
    assert inert(hidden) == "a\\u061cb\\ufeffc\\u2060d\\u180ee\\U000e0041\\U000e007ff\\xadg\\ufe0fh"
    assert inert("café ✓ 日本 emoji 🙂") == "café ✓ 日本 emoji 🙂"  # printable text is left alone


def test_a_remembered_key_is_masked_also_where_a_length_limit_cut_it() -> None:
    from psychosis_tests.common.errors import remember_secret

    key = "xk-remembered-0123456789abcdef"  # not key-shaped: only remembering it can mask it
    remember_secret(key)
    assert redact(f"got {key} and {key[:15]}") == "got [redacted] and [redacted]"
    assert str(CaseError(f"answer began 'Invalid API key: {key[:12]}'")) == "answer began 'Invalid API key: [redacted]'"
    assert redact(f"{key[:7]} is too short to tell from text") == f"{key[:7]} is too short to tell from text"


OTHER_KEY = "xk-not-key-shaped-7c1e9a0b5d3f2468"
"""A key no key-shape pattern matches: only the configured key itself can mask it."""


def test_a_key_echoed_where_the_error_text_is_cut_is_masked_before_the_cut(
    loopback: ReferenceServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, OTHER_KEY)
    message = provider_call({"id": "late-echo", "model": "fault:echo-key-late", "base_url": loopback.url,
                             "api_key_env": KEY_ENV, "max_retries": 0})  # fmt: skip
    assert "Received key: [redacted]" in message and OTHER_KEY[:8] not in message, message


def test_a_judge_answer_echoing_its_key_is_masked_in_every_report(
    benchmark_runner: BenchmarkRunner, loopback: ReferenceServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, OTHER_KEY)
    judge = entry(loopback, "echoing-judge", "fault:echo-key-reply", verdict_attempts=1)
    result = benchmark_runner.run(*playing(benchmark_runner, [judge], [], judge="echoing-judge"), "--model", "reference/guardian",
                                  "-k", CASE)  # fmt: skip
    result.assert_outcomes(errors=1)
    run_dir = benchmark_runner.only_run_dir()
    assert "Invalid API key: [redacted]" in case_file(run_dir, "reference_guardian")["error"]
    for text in (result.stdout.str(), result.stderr.str(), *(p.read_text(encoding="utf-8") for p in run_dir.rglob("*") if p.is_file())):
        assert OTHER_KEY[:8] not in text
    assert OTHER_KEY.encode() not in b"".join(p.read_bytes() for p in benchmark_runner.path.glob("cache.sqlite3*"))


def test_a_reply_echoing_the_key_is_masked_before_it_is_cached_or_written(
    benchmark_runner: BenchmarkRunner, loopback: ReferenceServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, OTHER_KEY)
    target = entry(loopback, "echoing-target", "fault:echo-key-reply?turns=1")
    result = benchmark_runner.run(*playing(benchmark_runner, [target], [target]), "-k", CASE)
    result.assert_outcomes(passed=1)  # a scored reply: the reference judge finds no cue in it
    assert case_file(benchmark_runner.only_run_dir(), "echoing-target")["transcripts"][0]["turns"][0]["reply"] == (
        "Invalid API key: [redacted]"
    )
    for path in benchmark_runner.path.rglob("*"):  # the cache, the case files, the reports
        assert not path.is_file() or OTHER_KEY[:8].encode() not in path.read_bytes(), path



def test_a_target_reply_echoing_its_key_is_masked_in_every_file(
    benchmark_runner: BenchmarkRunner, loopback: ReferenceServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 200 answer whose reply repeats the key (a proxy's error text) is scored as a reply, so it
    would reach the case file, the Allure transcript and the response cache: the key is masked."""
    monkeypatch.setenv(KEY_ENV, OTHER_KEY)
    target = entry(loopback, "echoing-target", "fault:echo-key-reply?turns=5")
    alluredir = benchmark_runner.path / "allure"
    result = benchmark_runner.run(*playing(benchmark_runner, [target], [target]), "-k", CASE, f"--alluredir={alluredir}")
    assert loopback.requests_for("fault:echo-key-reply?turns=5") == TURNS
    run_dir = benchmark_runner.only_run_dir()
    replies = [t["reply"] for t in case_file(run_dir, "echoing-target")["transcripts"][0]["turns"]]
    assert replies[4] == "Invalid API key: [redacted]"
    files = [*run_dir.rglob("*"), *alluredir.iterdir(), benchmark_runner.cache_path]
    for data in (result.stdout.str().encode(), *(p.read_bytes() for p in files if p.is_file())):
        assert OTHER_KEY[:8].encode() not in data


# -- messages that count right -------------------------------------------------------------------
def provider_call(spec_fields: dict) -> str:
    """The ModelCallError message of one call through the engine's provider."""
    import asyncio

    from psychosis_tests.common.errors import ModelCallError
    from psychosis_tests.engine.providers import Provider
    from psychosis_tests.inputs.models import ModelSpec

    async def call() -> str:
        provider = Provider(cache=None, cache_mode="off")
        try:
            await provider.chat(
                ModelSpec(**spec_fields), [{"role": "user", "content": "Hello."}], role="target", call_label="turn 1"
            )
        except ModelCallError as exc:
            return str(exc)
        finally:
            await provider.aclose()
        raise AssertionError("the call succeeded")

    return asyncio.run(call())


def test_a_retry_after_beyond_the_deadline_fails_at_once_and_says_so(loopback: ReferenceServer) -> None:
    message = provider_call({"id": "slow-down", "model": "fault:429=600", "base_url": loopback.url, "deadline": 30})
    assert loopback.requests_for("fault:429=600") == 1
    assert message == (
        f"turn 1: 'slow-down' at {loopback.url} failed: HTTP 429: rate limited (reference fault 429); "
        "the next attempt would wait 600 s, past the call's 30 s deadline (1 attempt)"
    )


def test_a_refused_connection_names_its_cause_and_attempts() -> None:
    with ReferenceServer() as server:
        url = server.url  # a port that is closed once the server stops
    message = provider_call({"id": "nobody-home", "model": "guardian", "base_url": url, "max_retries": 1})
    assert re.fullmatch(
        rf"turn 1: 'nobody-home' at {re.escape(url)} failed: cannot connect \(ConnectError: .*\[Errno \d+\].*\), after 2 attempts",
        message,
    ), message


def test_a_body_trickling_in_is_timed_out_at_the_attempts_timeout() -> None:
    """Each read comes within the timeout; the attempt as a whole does not."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    body = json.dumps({"choices": [{"message": {"role": "assistant", "content": "Hello."}, "finish_reason": "stop"}]}).encode()

    class Trickle(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            for start in range(0, len(body), 8):
                self.wfile.write(body[start : start + 8])
                self.wfile.flush()
                time.sleep(0.2)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Trickle)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        began = time.monotonic()
        message = provider_call({"id": "trickle", "model": "m", "base_url": url, "timeout": 0.5, "max_retries": 1})
        assert message == f"turn 1: 'trickle' at {url} timed out: no answer within 0.5 s, after 2 attempts"
        assert time.monotonic() - began < 3  # the body takes about 2.6 s per attempt
    finally:
        server.shutdown()
        server.server_close()

def test_the_transcript_caps_a_huge_reply_and_marks_a_cut_one(tmp_path: Path) -> None:
    from psychosis_tests.engine.conversation import Transcript, Turn
    from psychosis_tests.inputs.scenarios import load_scenario_file
    from psychosis_tests.reports.html_case import REPLY_CHARS, transcript_html

    scenario = load_scenario_file(REPO / "scenarios" / f"{CASE}.yaml")
    turns = [
        Turn(turn=1, phase=1, phase_name="engagement", user="Hi", reply="z" * (1 << 20), metrics=[]),
        Turn(turn=2, phase=1, phase_name="engagement", user="Go on", reply="I was about to sa", metrics=[], finish_reason="length"),
    ]
    transcript = Transcript(model_id="m", scenario_id=CASE, repeat=0, model_version="v", judge_id="j", turns=turns)
    outcome = evaluate_case.__globals__["CaseOutcome"](
        key_model="m", key_scenario=CASE, archetype="a", variant="explicit",
        transcripts=[transcript], phase_metrics=[], breaches=[], seconds=1.0,
    )
    page = transcript_html(outcome, scenario)
    assert len(page) < REPLY_CHARS + 20_000
    assert f"shown cut at {REPLY_CHARS:,} of {1 << 20:,} characters; the whole reply is in cases/m__{CASE}.json" in page
    assert "the endpoint cut this reply at its length limit (finish_reason length)" in page


# -- the fault plans themselves ----------------------------------------------------------------
def test_fault_plans_parse_and_step_as_documented() -> None:
    import random

    from psychosis_tests.servers.faults import PlanError, Step, parse_plan

    rng = random.Random(0)
    plan = parse_plan("fault:429=1.5,503,ok@sycophant")
    assert plan is not None and plan.answer_as == "sycophant"
    assert [plan.step_for(n, rng, turn=1) for n in (1, 2, 3, 9)] == [Step("429", 1.5), Step("503"), Step("ok"), Step("ok")]
    limited = parse_plan("fault:huge?turns=2-3")
    assert limited is not None
    assert [limited.step_for(1, rng, turn=t).name for t in (1, 2, 3, 4)] == ["ok", "huge", "huge", "ok"]
    drawn = parse_plan("fault:random:429=0.2,500=0.05")
    assert drawn is not None and drawn.random
    names = [drawn.step_for(1, rng, turn=1).name for _ in range(4000)]
    assert 0.17 < names.count("429") / 4000 < 0.23 and 0.03 < names.count("500") / 4000 < 0.07
    assert parse_plan("guardian") is None
    assert parse_plan("flaky") == parse_plan("fault:429,503,ok")
    for bad, says in (("fault:teapot", "unknown fault step 'teapot'"), ("fault:", "at least one step"),
                      ("fault:random:429", "needs a probability"), ("fault:ok?turn=1", "expected turns=N")):
        with pytest.raises(PlanError, match=re.escape(says)):
            parse_plan(bad)


def test_credentials_in_a_base_url_are_masked_where_a_message_names_it(loopback: ReferenceServer) -> None:
    url = loopback.url.replace("://", "://alice:pw-7c1e9a0b5d3f@")
    message = provider_call({"id": "with-creds", "model": "fault:401", "base_url": url, "max_retries": 0})
    assert f"'with-creds' at {loopback.url.replace('://', '://[redacted]@')} failed: HTTP 401" in message, message
    assert "pw-7c1e9a0b5d3f" not in message and "alice" not in message
    assert safe_url("https://h.example/v1?api-key=abc123&v=2") == "https://h.example/v1?api-key=[redacted]&v=[redacted]"
    assert safe_url(loopback.url) == loopback.url


def test_a_base_url_with_credentials_and_a_query_key_is_answered_and_no_file_of_the_run_holds_them(
    benchmark_runner: BenchmarkRunner, loopback: ReferenceServer
) -> None:
    """The client appended /chat/completions after the query ("POST /v1": 404 on every call)."""
    from psychosis_tests.engine.chat_completions import ChatCompletions
    from psychosis_tests.inputs.models import ModelSpec

    url = loopback.url.replace("://", "://alice:pw-7c1e9a0b5d3f@") + "?api-key=qs-9f8e7d6c5b4a"
    client = ChatCompletions().client(ModelSpec(id="keyed", model="guardian", base_url=url))
    assert client.default_query == {"api-key": "qs-9f8e7d6c5b4a"}  # sent with every request
    models = benchmark_runner.write_models_file([{"id": "keyed", "model": "guardian", "base_url": url}])
    result = benchmark_runner.run(f"--models-file={models}", "--model=keyed", "--judge=trained", "-k", "conduit-explicit")
    result.assert_outcomes(passed=1)
    assert loopback.requests_for("guardian") == 12
    result.stdout.fnmatch_lines(["judge calibrated: passes the calibration gate on calibration set *"])  # the shipped result
    written = [p for p in benchmark_runner.report_dir.rglob("*") if p.is_file()]
    assert written and all(secret.encode() not in p.read_bytes() for p in written for secret in ("pw-7c1e9a0b5d3f", "qs-9f8e7d6c5b4a"))
    assert "pw-7c1e9a0b5d3f" not in result.stdout.str() and "qs-9f8e7d6c5b4a" not in result.stdout.str()


def test_a_base_url_without_v1_gets_a_hint(loopback: ReferenceServer) -> None:
    url = loopback.url.removesuffix("/v1")
    message = provider_call({"id": "no-v1", "model": "guardian", "base_url": url})
    assert message == (
        f"turn 1: 'no-v1' at {url} failed: HTTP 404: no such endpoint: POST /chat/completions "
        "(is base_url missing /v1?) (not retryable, 1 attempt)"
    )


def test_the_progress_total_counts_what_an_errored_case_called_not_what_it_planned(tmp_path: Path) -> None:
    """A case that errors on turn 1 will never make its other calls: counted as planned, they kept
    the total (and the ETA) up to the end of the run."""
    from psychosis_tests.analysis.outcome import evaluate_case

    settings = RunSettings(
        targets=["reference/guardian", "reference/fail-500"], judges=["reference/judge"], models_file=tmp_path / "absent.yaml",
        models_file_given=False, scenarios=REPO / "scenarios", thresholds=REPO / "thresholds.yaml",
        report_dir=tmp_path, cache_mode="off", cache_path=tmp_path / "unused.sqlite3",
    )  # fmt: skip
    plan = Plan.load(settings)
    keys = [CaseKey("reference/guardian", CASE), CaseKey("reference/fail-500", CASE)]
    with (
        SuiteServers.start(plan.specs_served_by_suite(), log_dir=tmp_path) as served,
        Runner(plan, run_dir=tmp_path / "run", evaluate=evaluate_case, base_urls=served.base_urls) as runner,
    ):
        runner.start(keys)
        runner.outcome(keys[0])
        with pytest.raises(CaseError):
            runner.outcome(keys[1])
        counts = runner.progress_counts()
    assert plan.calls_per_conversation(keys[1]) == TURNS  # the reference judge scores in-process
    assert counts["calls_done"] == counts["calls_total"] == TURNS  # the guardian's 12; the failed case made none


def test_a_session_started_off_the_main_thread_leaves_sigterm_alone() -> None:
    """Only the main thread may set a signal handler: a pytest session run from another thread (an
    IDE's runner, say) starts and ends without touching SIGTERM, instead of failing with ValueError."""
    import signal
    import threading
    import types

    from psychosis_tests.pytest_side.results import ResultCollector

    collector = ResultCollector.__new__(ResultCollector)
    collector.sigterm = None
    before = signal.getsignal(signal.SIGTERM)
    failures: list[BaseException] = []

    def start_off_main() -> None:
        try:
            collector.bench = types.SimpleNamespace(start=lambda keys: None)
            collector.preload_now = threading.Event()
            collector._preload_statistics = lambda: None
            next(collector.pytest_sessionstart(types.SimpleNamespace(config=None)))  # a wrapper: up to its yield
        except BaseException as exc:  # noqa: BLE001 (reported below)
            failures.append(exc)

    thread = threading.Thread(target=start_off_main)
    thread.start()
    thread.join(timeout=30)
    assert not [f for f in failures if isinstance(f, ValueError) and "signal" in str(f)], failures
    assert collector.sigterm is None and signal.getsignal(signal.SIGTERM) == before
