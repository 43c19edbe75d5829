"""The Allure report: each case's labels and attachments, and the run's benchmark summary.

The only module that imports allure. The plugin imports it lazily, and only when pytest runs with
``--alluredir``:

* in each case's teardown, :func:`describe_case` gives the running Allure result its title, labels
  (epic = target model, feature = archetype, story = variant), parameters and attachments: the
  transcript (HTML), the per-turn scores (PNG) and the per-phase table against the thresholds
  (HTML); an errored case carries its error text instead;
* :func:`install_stable_case_ids` gives each case a testCaseId (one per scenario) and a historyId
  (one per model and scenario) that depend only on those ids. allure-pytest derives both from the
  test's module path relative to the rootdir, which moves when the package is installed elsewhere
  (e.g. a CI runner's venv), and gives every case of the one parametrized test the same testCaseId.
  Allure 2.46 and Allure 3 key a test's history by md5(testCaseId) + "." + md5 of its non-excluded
  parameters ("name:value" sorted, comma-joined), not by historyId, so the history of a case follows
  its scenario's testCaseId and its model and scenario parameters; judge and repeats are shown but
  excluded. The historyId is set for readers that still use it;
* on the controller, after the run's files are written, :func:`write_allure_summary` adds one
  synthetic "benchmark summary" result with the run's tables and plots, plus environment.properties,
  executor.json and categories.json;
* after a judge calibration, :func:`write_allure_calibration` adds one "judge calibration" result,
  failed when the judge fails the gate, with the calibration tables attached.

Model replies, judge rationales, scenario text, model ids and error messages are untrusted: all text
that goes into an HTML attachment passes through html.escape, and every page also forbids scripts
with a Content-Security-Policy (`reports.html`). Plots (`reports.plots`) are drawn on matplotlib's Agg canvas (no pyplot, no global
backend), imported inside the functions that draw, so importing this module stays cheap.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import uuid
from collections.abc import Callable, Mapping
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import allure
from allure_commons import hookimpl, plugin_manager
from allure_commons.logger import AllureFileLogger
from allure_commons.model2 import (
    ATTACHMENT_PATTERN,
    Attachment,
    Label,
    Parameter,
    Status,
    StatusDetails,
    TestResult,
)
from allure_commons.types import AttachmentType, LabelType

from psychosis_tests.inputs.calibration_result import CalibrationResult
from psychosis_tests.reports.html import phase_table_html, summary_html, transcript_html
from psychosis_tests.reports.plots import (
    model_bars_png,
    phase_trajectories_png,
    turn_plot_png,
    variant_bars_png,
)
from psychosis_tests.reports.tables import markdown_summary

if TYPE_CHECKING:

    from psychosis_tests.analysis.outcome import CaseOutcome
    from psychosis_tests.engine.plan import CaseKey, Plan

BENCH_TAG = "psychosis-bench"
CASE_IDS_LABEL = "psychosis-bench-case"
"""Private label carrying [model id, scenario id] from describe_case to the id hook, which removes it."""
SUMMARY_MESSAGE_PREFIX = "benchmark summary:"


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:32]


def case_history_id(model_id: str, scenario_id: str) -> str:
    """Allure historyId of one case: the same (model, scenario) keeps one history across runs."""
    return _digest(BENCH_TAG, "case", model_id, scenario_id)


def scenario_test_case_id(scenario_id: str) -> str:
    """Allure testCaseId: one per scenario, whichever model plays it (the model is a parameter)."""
    return _digest(BENCH_TAG, "scenario", scenario_id)


SUMMARY_HISTORY_ID = _digest("psychosis-bench-summary")
"""historyId of the session's benchmark summary result, the same in every run so its trend shows."""

CATEGORIES: list[dict[str, Any]] = [
    {
        "name": "Harm enablement (HES over its limit)",
        "matchedStatuses": ["failed"],
        "messageRegex": r"(?s).*: HES [0-9./]+ > .*",
    },
    {
        "name": "Missing safety intervention (SIS under its limit; HES within)",
        "matchedStatuses": ["failed"],
        "messageRegex": r"(?s).*: SIS [0-9./]+ < .*",
    },
    {
        "name": "Delusion confirmation (DCS over its limit; HES and SIS within)",
        "matchedStatuses": ["failed"],
        "messageRegex": r"(?s).*: DCS [0-9./]+ > .*",
    },
    {
        "name": "Over-caution on a control (pathologises, refuses or over-refers an ordinary user)",
        "matchedStatuses": ["failed"],
        "messageRegex": r"(?s).*: (?:OCC|SIS) [0-9./]+ > .*",
    },
    {
        "name": "Regression against the baseline run (thresholds kept)",
        "matchedStatuses": ["failed"],
        "messageRegex": r"(?s).*\bregression\(s\) for .*",
    },
    {
        "name": "Per-phase profile differs from its snapshot",
        "matchedStatuses": ["failed"],
        "messageRegex": r"(?s).*per-phase profile differs from its snapshot.*",
    },
    {
        "name": "Infrastructure errors (a model or judge call failed; not scored)",
        "matchedStatuses": ["broken"],
    },
    {
        "name": "Benchmark summary: not every case passed",
        "matchedStatuses": ["failed"],
        "messageRegex": rf"(?s){SUMMARY_MESSAGE_PREFIX} .*",
    },
    {
        "name": "Trajectory limit broken (phase thresholds kept)",
        "matchedStatuses": ["failed"],
        "messageRegex": r"(?s).*\btrajectory breach\(es\) for .*",
    },
]
"""categories.json. Allure 2 matches messageRegex against the whole failure message and files a
result under the FIRST category it matches (unmatched failures go to its built-in "Product defects",
broken results to "Test defects"), so the order ranks a case by its worst problem: harm enablement,
then a missing intervention, then delusion confirmation. A threshold breach line reads
"phase 3 solidification: HES 2 > 2/3 (...)" (gate.Breach.message); a regression line
"phase 3 solidification: HES 0.00 -> 1.67 (...)" (baseline.Comparison.message) under an
"N regression(s) for" heading, so the metric categories match breaches only."""


# -- one case ---------------------------------------------------------------------------------


def describe_case(
    key: CaseKey, plan: Plan, outcome: CaseOutcome | None, error: str | None, seconds: float | None = None
) -> None:
    """Title, labels, parameters and attachments of the running case's Allure result; `seconds`,
    the case's conversations' wall time, becomes its duration on the timeline.

    Call in the case's teardown: allure-pytest renames the result after setup, and attachments made
    then land on the test itself rather than on a fixture. `outcome` is None when the case errored
    (then `error` holds the reason) or when its setup failed for another reason.
    """
    scenario = plan.scenarios[key.scenario_id]
    allure.dynamic.title(f"{key.model_id} · {scenario.id}: {scenario.title}")
    allure.dynamic.epic(key.model_id)
    allure.dynamic.feature(scenario.archetype)
    allure.dynamic.story(scenario.variant)
    allure.dynamic.tag(scenario.variant, scenario.archetype, BENCH_TAG)
    allure.dynamic.parent_suite(BENCH_TAG)
    allure.dynamic.suite(key.model_id)
    allure.dynamic.sub_suite(scenario.archetype)
    allure.dynamic.label(CASE_IDS_LABEL, json.dumps([key.model_id, key.scenario_id, seconds]))
    allure.dynamic.parameter("model", key.model_id)
    allure.dynamic.parameter("scenario", key.scenario_id)
    allure.dynamic.parameter("repeats", plan.settings.repeats, excluded=True)
    allure.dynamic.parameter("judge", plan.panel.id, excluded=True)
    if error is not None:
        allure.attach(error, name="error (case not scored)", attachment_type=AttachmentType.TEXT)
    if outcome is not None:
        allure.attach(transcript_html(outcome, scenario), name="transcript", attachment_type=AttachmentType.HTML)
        allure.attach(turn_plot_png(outcome, scenario), name="scores per turn", attachment_type=AttachmentType.PNG)
        allure.attach(
            phase_table_html(outcome, scenario, plan.thresholds),
            name="phases against thresholds",
            attachment_type=AttachmentType.HTML,
        )


class _StableCaseIds:
    """Just before each case's result is written: replaces allure-pytest's ids, drops the raw
    fixture parameter (the model and scenario parameters say it), and makes the result last as
    long as its conversations ran, ending when its test read it."""

    def __init__(self, hidden_parameters: frozenset[str]):
        self.hidden_parameters = hidden_parameters

    @hookimpl(tryfirst=True)
    def report_result(self, result: TestResult) -> None:
        label = next((lb for lb in result.labels if lb.name == CASE_IDS_LABEL), None)
        if label is None:
            return
        result.labels.remove(label)
        model_id, scenario_id, seconds = json.loads(label.value)
        result.historyId = case_history_id(model_id, scenario_id)
        result.testCaseId = scenario_test_case_id(scenario_id)
        result.parameters = [p for p in result.parameters if p.name not in self.hidden_parameters]
        if seconds is not None:
            result.stop = max(result.stop or 0, result.start or 0)
            result.start = result.stop - round(seconds * 1000)


def install_stable_case_ids(hidden_parameters: frozenset[str] = frozenset()) -> Callable[[], None]:
    """Register the id hook with allure for this process; returns the function that removes it.
    `hidden_parameters` are pytest parameters not to show (the case fixture's raw value)."""
    plugin = _StableCaseIds(hidden_parameters)
    plugin_manager.register(plugin)
    return lambda: plugin_manager.unregister(plugin)


def environment_properties(summary: Mapping[str, Any]) -> str:
    """environment.properties for Allure's Environment widget (Java properties syntax, ASCII only)."""
    run = summary["run"]
    warning = {"WARNING": run["judge_warning"]} if run.get("judge_warning") else {}
    entries = {
        **warning,
        "targets": ", ".join(run["targets"]),
        "judge": run["judge"],
        "judge.model": run.get("judge_model", ""),
        "scenario_set_hash": run["scenario_set_hash"],
        "thresholds_hash": run["thresholds_hash"],
        "repeats": run["repeats"],
        "cache_mode": run.get("cache_mode", ""),
        "user_turns": (f"{run['user_model']} ({run.get('user_mode', 'adaptive')} mode)" if run.get("user_model")
                       else "scripted"),
        "turns": run.get("turns") or "as scripted",
        "run_id": run["run_id"],
        "psychosis_bench.version": run["package_version"],
        "python.version": run["python"],
        "pytest.version": metadata.version("pytest"),
        "allure_pytest.version": metadata.version("allure-pytest"),
    }
    return "".join(f"{_property_text(k, key=True)}={_property_text(str(v), key=False)}\n" for k, v in entries.items())


def _property_text(text: str, *, key: bool) -> str:
    """Escape for a .properties file, read by Java as ISO-8859-1: non-ASCII becomes \\uXXXX."""
    out = []
    for i, char in enumerate(text):
        if char in "\\=:#!" or (char == " " and (key or i == 0)):
            out.append("\\" + char)
        elif char in "\t\n\r\f":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}[char])
        elif " " <= char <= "~":
            out.append(char)
        else:
            units = char.encode("utf-16-be")
            out += [f"\\u{units[j]:02x}{units[j + 1]:02x}" for j in range(0, len(units), 2)]
    return "".join(out)


def executor_info(summary: Mapping[str, Any], run_dir: Path, environ: Mapping[str, str]) -> dict[str, Any]:
    """executor.json: who ran the run; on GitHub Actions it links the workflow run and orders builds."""
    run_id = summary["run"]["run_id"]
    info: dict[str, Any] = {
        "name": BENCH_TAG,
        "type": BENCH_TAG,
        "buildName": run_id,
        "reportName": f"psychosis-bench {run_id}",
        "buildUrl": run_dir.resolve().as_uri(),
    }
    if all(environ.get(k) for k in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID")):
        info["buildUrl"] = (
            f"{environ['GITHUB_SERVER_URL']}/{environ['GITHUB_REPOSITORY']}/actions/runs/{environ['GITHUB_RUN_ID']}"
        )
    if environ.get("GITHUB_RUN_NUMBER", "").isdigit():
        info["buildOrder"] = int(environ["GITHUB_RUN_NUMBER"])
    return info


def _millis(timestamp: str) -> int:
    return int(dt.datetime.fromisoformat(timestamp).timestamp() * 1000)


def write_allure_summary(
    alluredir: Path,
    summary: Mapping[str, Any],
    run_dir: Path,
    environ: Mapping[str, str] | None = None,
) -> None:
    """Write the "benchmark summary" result with its attachments, and the report's metadata files.

    Call once per run, on the controller. Does nothing when no case ran.
    """
    cases = summary["cases"]
    if not cases:
        return
    run = summary["run"]
    logger = AllureFileLogger(alluredir)
    attachments: list[Attachment] = []

    def attach(body: str | bytes, name: str, kind: AttachmentType) -> None:
        source = ATTACHMENT_PATTERN.format(prefix=uuid.uuid4(), ext=kind.extension)
        logger.report_attached_data(body=body, file_name=source)
        attachments.append(Attachment(name=name, source=source, type=kind.mime_type))

    attach(summary_html(summary), "benchmark summary", AttachmentType.HTML)
    attach(model_bars_png(summary), "per model: DCS, HES, SIS mean ± SD", AttachmentType.PNG)
    attach(variant_bars_png(summary), "explicit vs implicit", AttachmentType.PNG)
    attach(phase_trajectories_png(summary), "per phase, per model", AttachmentType.PNG)
    attach("\n".join(markdown_summary(dict(summary))) + "\n", "summary.md (for a pull request)", AttachmentType.TEXT)

    not_passed = [c for c in cases if c["outcome"] != "passed"]
    details = None
    if not_passed:
        failed = sum(1 for c in not_passed if c["outcome"] == "failed")
        details = StatusDetails(
            message=(
                f"{SUMMARY_MESSAGE_PREFIX} {len(not_passed)} of {len(cases)} cases did not pass "
                f"({failed} failed, {len(not_passed) - failed} errors)"
            ),
            trace="\n".join(f"{c['model']} / {c['scenario']}: {c['outcome']}" for c in not_passed),
        )
    result = TestResult(
        uuid=str(uuid.uuid4()),
        name="psychosis-bench benchmark summary",
        fullName="psychosis-bench#benchmark-summary",
        historyId=SUMMARY_HISTORY_ID,
        testCaseId=SUMMARY_HISTORY_ID,
        status=Status.FAILED if not_passed else Status.PASSED,
        statusDetails=details,
        stage="finished",
        description=f"Statistics over the {len(cases)} cases of run {run['run_id']}: see the attachments.",
        start=_millis(run["started_at"]),
        stop=_millis(run["finished_at"]),
        labels=[
            Label(LabelType.EPIC, BENCH_TAG),
            Label(LabelType.FEATURE, "benchmark summary"),
            Label(LabelType.PARENT_SUITE, BENCH_TAG),
            Label(LabelType.SUITE, "benchmark summary"),
            Label(LabelType.TAG, BENCH_TAG),
            Label(LabelType.TAG, "summary"),
            Label(LabelType.FRAMEWORK, BENCH_TAG),
        ],
        # Shown, but excluded from the history key: the summary keeps one trend when the targets change.
        parameters=[
            Parameter(name="targets", value=", ".join(run["targets"]), excluded=True),
            Parameter(name="judge", value=run["judge"], excluded=True),
            Parameter(name="repeats", value=str(run["repeats"]), excluded=True),
        ],
        attachments=attachments,
    )
    logger.report_result(result)
    _write_text(alluredir / "environment.properties", environment_properties(summary))
    executor = executor_info(summary, run_dir, os.environ if environ is None else environ)
    _write_text(alluredir / "executor.json", json.dumps(executor, indent=2, ensure_ascii=False))
    _write_text(alluredir / "categories.json", json.dumps(CATEGORIES, indent=2, ensure_ascii=False))


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


CALIBRATION_HISTORY_ID = hashlib.md5(b"psychosis-bench#judge-calibration").hexdigest()


def write_allure_calibration(alluredir: Path, result: CalibrationResult, markdown: str) -> None:
    """One "judge calibration" result: passed when the judge passes the gate, its tables attached."""
    logger = AllureFileLogger(alluredir)
    source = ATTACHMENT_PATTERN.format(prefix=uuid.uuid4(), ext=AttachmentType.TEXT.extension)
    logger.report_attached_data(body=markdown, file_name=source)
    failing = [m for m in result.metrics if not m.passed]
    details = None
    if not result.passed:
        reasons = [f"{m.metric.upper()} kappa {m.kappa if m.kappa is None else round(m.kappa, 3)} < {m.minimum}" for m in failing]
        if result.errors:
            reasons.append(f"{len(result.errors)} item(s) could not be judged")
        details = StatusDetails(message="judge calibration failed: " + "; ".join(reasons), trace="\n".join(result.errors))
    now = int(dt.datetime.now(dt.timezone.utc).timestamp() * 1000)
    logger.report_result(
        TestResult(
            uuid=str(uuid.uuid4()),
            name=f"judge calibration: {result.judge}",
            fullName="psychosis-bench#judge-calibration",
            historyId=CALIBRATION_HISTORY_ID,
            testCaseId=CALIBRATION_HISTORY_ID,
            status=Status.PASSED if result.passed else Status.FAILED,
            statusDetails=details,
            stage="finished",
            description=f"The judge against {result.items} gold-labelled items; see the attachment.",
            start=now,
            stop=now,
            labels=[
                Label(LabelType.EPIC, BENCH_TAG),
                Label(LabelType.FEATURE, "judge calibration"),
                Label(LabelType.PARENT_SUITE, BENCH_TAG),
                Label(LabelType.SUITE, "judge calibration"),
                Label(LabelType.TAG, BENCH_TAG),
                Label(LabelType.FRAMEWORK, BENCH_TAG),
            ],
            parameters=[
                Parameter(name="judge", value=result.judge, excluded=True),
                Parameter(name="fingerprint", value=result.fingerprint.hash, excluded=True),
            ],
            attachments=[Attachment(name="calibration.md", source=source, type=AttachmentType.TEXT.mime_type)],
        )
    )
