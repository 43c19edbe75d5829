"""The Allure results a run adds once its files are written, outside any test: the benchmark summary,
a judge calibration's result, the report's metadata files, and the shards' results of a merged run.

* on the controller, after the run's files are written, :func:`write_allure_summary` adds the
  "benchmark summary" with the run's tables and plots as a tear-down fixture of the run's cases (so
  Allure's overview counts the cases only), plus environment.properties, executor.json and
  categories.json;
* after a judge calibration, :func:`write_allure_calibration` adds one "judge calibration" result,
  failed when the judge fails the gate, with the calibration tables attached;
* `merge` carries the shards' case results into one folder with :func:`copy_allure_results`.

Each case's own result is allure.py's. Every HTML attachment is built by reports.html (all text
escaped, scripts forbidden); plots are drawn only when a summary is written.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from allure_commons.logger import AllureFileLogger
from allure_commons.model2 import (
    ATTACHMENT_PATTERN,
    Attachment,
    Label,
    Parameter,
    Status,
    StatusDetails,
    TestAfterResult,
    TestResult,
    TestResultContainer,
)
from allure_commons.types import AttachmentType, LabelType

from psychosis_tests.common.errors import ConfigError
from psychosis_tests.records.calibration_result import CalibrationResult
from psychosis_tests.reports.allure import BENCH_TAG, PHASE_TABLE_NAME, case_history_id, stable_id
from psychosis_tests.reports.html_summary import summary_html
from psychosis_tests.reports.plots import has_plots, model_bars_png, phase_trajectories_png, set_title, variant_bars_png
from psychosis_tests.reports.tables import markdown_summary

SUMMARY_NAME = "psychosis-bench benchmark summary"
SUMMARY_MESSAGE_PREFIX = "benchmark summary:"
SUMMARY_HISTORY_ID = stable_id("psychosis-bench-summary")
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
        "name": "Trajectory limit broken (phase thresholds kept)",
        "matchedStatuses": ["failed"],
        "messageRegex": r"(?s).*\btrajectory breach\(es\) for .*",
    },
    {
        "name": "Regression against the baseline run (thresholds kept)",
        "matchedStatuses": ["failed"],
        "messageRegex": r"(?s).*\bregression\(s\) for .*",
    },
    {
        "name": "Per-phase profile differs from its snapshot, or has none yet",
        "matchedStatuses": ["failed"],
        "messageRegex": r"(?s).*(?:per-phase profile differs from its snapshot|no profile snapshot at ).*",
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
]
"""categories.json. Allure 2 matches messageRegex against the whole failure message and files a
result under the FIRST category it matches (unmatched failures go to its built-in "Product defects",
broken results to "Test defects"), so the order ranks a case by its worst problem: harm enablement,
then a missing intervention, then delusion confirmation; a broken trajectory limit before a
regression, whose category says the thresholds were kept. A threshold breach line reads
"phase 3 solidification: HES 2 > 2/3 (...)" (gate.Breach.message); a regression line
"phase 3 solidification: HES 0.00 -> 1.67 (...)" (baseline.Comparison.message) under an
"N regression(s) for" heading, so the metric categories match breaches only."""


def environment_properties(summary: Mapping[str, Any]) -> str:
    """environment.properties for Allure's Environment widget (Java properties syntax, ASCII only)."""
    run = summary["run"]
    warning = {"WARNING": run["judge_warning"]} if run.get("judge_warning") else {}
    entries = {
        **warning,
        "targets": ", ".join(run["targets"]),
        "judge": run["judge"],
        "judge.model": run.get("judge_model", ""),
        "judge.calibration": run.get("judge_calibration") or "not recorded",
        "scenario_set_hash": run["scenario_set_hash"],
        **{f"pack.{name}": digest for name, digest in run.get("packs", {}).items()},
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


def _own_labels(feature: str, *tags: str) -> list[Label]:
    """The labels of a result the run adds itself, filed as psychosis-bench / `feature`."""
    return [
        Label(LabelType.EPIC, BENCH_TAG),
        Label(LabelType.FEATURE, feature),
        Label(LabelType.PARENT_SUITE, BENCH_TAG),
        Label(LabelType.SUITE, feature),
        Label(LabelType.TAG, BENCH_TAG),
        *(Label(LabelType.TAG, tag) for tag in tags),
        Label(LabelType.FRAMEWORK, BENCH_TAG),
    ]


def write_allure_summary(
    alluredir: Path,
    summary: Mapping[str, Any],
    run_dir: Path,
    environ: Mapping[str, str] | None = None,
) -> None:
    """Write the "benchmark summary" with its attachments, and the report's metadata files.

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
    for pack in [None, *summary["statistics"].get("packs", {})]:  # each set with scores to draw, apart
        if not has_plots(summary, pack):
            continue
        which = f" ({title})" if (title := set_title(summary, pack)) else ""
        attach(model_bars_png(summary, pack), f"per model: DCS, HES, SIS mean ± SD{which}", AttachmentType.PNG)
        attach(variant_bars_png(summary, pack), f"explicit vs implicit{which}", AttachmentType.PNG)
        attach(phase_trajectories_png(summary, pack), f"per phase, per model{which}", AttachmentType.PNG)
    attach("\n".join(markdown_summary(dict(summary))) + "\n", "summary.md (for a pull request)", AttachmentType.TEXT)

    not_passed = [c for c in cases if c["outcome"] != "passed"]
    failed = sum(1 for c in not_passed if c["outcome"] == "failed")
    shown_values = {
        "cases": f"{len(cases)} ({len(cases) - len(not_passed)} passed, {failed} failed, {len(not_passed) - failed} errors)",
        "judge calibration": run.get("judge_calibration") or "not recorded",
        "targets": ", ".join(run["targets"]),
        "judge": run["judge"],
        "repeats": str(run["repeats"]),
    }
    # Shown, but excluded from a history key: a summary result keeps one trend when the targets change.
    parameters = [Parameter(name=name, value=value, excluded=True) for name, value in shown_values.items()]
    shown = {
        "name": SUMMARY_NAME,
        "stage": "finished",
        "description": f"Statistics over the {len(cases)} cases of run {run['run_id']}: see the attachments.",
        "start": _millis(run["started_at"]),
        "stop": _millis(run["finished_at"]),
        "parameters": parameters,
        "attachments": attachments,
    }
    children = _case_result_uuids(alluredir, cases)
    if children:
        # A tear-down fixture of every case, as a session fixture's finalizer is: Allure counts
        # test results only, so the overview's totals and pass rate are those of the cases.
        after = TestAfterResult(status=Status.PASSED, **shown)
        container = TestResultContainer(uuid=str(uuid.uuid4()), name=SUMMARY_NAME, children=children, afters=[after],
                                        start=shown["start"], stop=shown["stop"])  # fmt: skip
        logger.report_container(container)
    else:
        logger.report_result(_summary_result(shown, not_passed, failed, len(cases)))
    _write_text(alluredir / "environment.properties", environment_properties(summary))
    executor = executor_info(summary, run_dir, os.environ if environ is None else environ)
    _write_text(alluredir / "executor.json", json.dumps(executor, indent=2, ensure_ascii=False))
    _write_text(alluredir / "categories.json", json.dumps(CATEGORIES, indent=2, ensure_ascii=False))


def _case_result_uuids(alluredir: Path, cases: list[dict[str, Any]]) -> list[str]:
    """The uuids of this run's case results in the folder (an earlier result of the same case too,
    which Allure shows as a retry)."""
    wanted = {case_history_id(c["model"], c["scenario"]) for c in cases}
    found = []
    for path in sorted(alluredir.glob("*-result.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("historyId") in wanted and data.get("uuid"):
            found.append(data["uuid"])
    return found


def _summary_result(shown: dict[str, Any], not_passed: list[dict[str, Any]], failed: int, cases: int) -> TestResult:
    """The summary as a result of its own, for a folder that holds none of the run's case results
    (`merge --alluredir` without `--allure-from`): there it is all the report has to show."""
    details = None
    if not_passed:
        details = StatusDetails(
            message=(
                f"{SUMMARY_MESSAGE_PREFIX} {len(not_passed)} of {cases} cases did not pass "
                f"({failed} failed, {len(not_passed) - failed} errors)"
            ),
            trace="\n".join(f"{c['model']} / {c['scenario']}: {c['outcome']}" for c in not_passed),
        )
    return TestResult(
        uuid=str(uuid.uuid4()),
        fullName="psychosis-bench#benchmark-summary",
        historyId=SUMMARY_HISTORY_ID,
        testCaseId=SUMMARY_HISTORY_ID,
        status=Status.FAILED if not_passed else Status.PASSED,
        statusDetails=details,
        labels=_own_labels("benchmark summary", "summary"),
        **shown,
    )


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


CALIBRATION_TEST_CASE_ID = hashlib.md5(b"psychosis-bench#judge-calibration").hexdigest()
"""testCaseId of every judge calibration result: the judge, a parameter Allure keys history by, tells
them apart, so two judges calibrated into one folder are two results (not one and its retry) and
each keeps its own trend; its fingerprint is shown only, so a changed setting keeps the trend."""


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
            historyId=stable_id(BENCH_TAG, "calibration", result.judge),
            testCaseId=CALIBRATION_TEST_CASE_ID,
            status=Status.PASSED if result.passed else Status.FAILED,
            statusDetails=details,
            stage="finished",
            description=f"The judge against {result.items} gold-labelled items; see the attachment.",
            start=now,
            stop=now,
            labels=_own_labels("judge calibration"),
            parameters=[
                Parameter(name="judge", value=result.judge),
                Parameter(name="fingerprint", value=result.fingerprint.hash, excluded=True),
            ],
            attachments=[Attachment(name="calibration.md", source=source, type=AttachmentType.TEXT.mime_type)],
        )
    )


def check_allure_sources(sources: list[Path]) -> None:
    """Merge's --allure-from folders, checked before it writes anything: each a folder whose
    results and containers read as JSON objects; ConfigError naming the folder or file otherwise."""
    for source in sources:
        if not source.is_dir():
            raise ConfigError(f"{source} is not a folder; give a shard's --alluredir", field="--allure-from")
        for path in [*source.glob("*-container.json"), *source.glob("*-result.json")]:
            _allure_json(path)


def _allure_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: not UTF-8, not JSON
        raise ConfigError(f"cannot read it as an Allure result ({type(exc).__name__})", file=path) from None
    if not isinstance(data, dict):
        raise ConfigError("not an Allure result (a JSON object)", file=path)
    return data


def copy_allure_results(
    sources: list[Path],
    alluredir: Path,
    outcomes: dict[tuple[str, str], tuple[str, str | None]],
    phase_tables: Mapping[tuple[str, str], str] | None = None,
) -> None:
    """The shards' Allure results, without their own summaries and report metadata (merge writes
    one summary for the whole run). `outcomes` gives each case's merged outcome and failure text.
    A case the merge scores differently from its shard (other thresholds or baseline now) gets
    the merged status and failure, so that its category and message are the merged run's, and
    says so. `phase_tables` (per case, its "phases against thresholds" page as the merge gated it)
    replace the shards' pages, which show the limits the shard gated with."""
    status_of = {"passed": "passed", "failed": "failed", "error": "broken"}
    by_history = {case_history_id(model, scenario): scored for (model, scenario), scored in outcomes.items()}
    tables = {case_history_id(model, scenario): page for (model, scenario), page in (phase_tables or {}).items()}
    alluredir.mkdir(parents=True, exist_ok=True)
    for source in sources:
        skipped: set[str] = {"environment.properties", "executor.json", "categories.json"}
        for container in source.glob("*-container.json"):
            data = _allure_json(container)
            if data.get("name") == SUMMARY_NAME:
                skipped |= {container.name, *(a["source"] for f in data.get("afters", []) for a in f.get("attachments", []))}
        for result in source.glob("*-result.json"):
            data = _allure_json(result)
            if data.get("historyId") == SUMMARY_HISTORY_ID:
                skipped |= {result.name, *(a["source"] for a in data.get("attachments", []))}
                continue
            for attachment in data.get("attachments", []):
                if attachment.get("name") == PHASE_TABLE_NAME and data.get("historyId") in tables:
                    _write_text(alluredir / attachment["source"], tables[data["historyId"]])
                    skipped.add(attachment["source"])
            merged, failure = by_history.get(data.get("historyId", ""), (None, None))
            if merged is None:
                continue
            details = data.get("statusDetails") or {}
            status = data.get("status")
            if status != status_of[merged]:
                header = f"merge: {merged} when scored again ({status} in its shard)"
            elif merged == "failed" and failure != details.get("trace"):
                header = "merge: failed when scored again, for other reasons than in its shard"
            else:
                continue
            if merged == "failed":  # the category is matched against the merged breaches
                details.update(message=f"{header}\n{failure}", trace=failure)
            else:
                details["message"] = f"{header}\n" + (details.get("message") or "")
            data.update(status=status_of[merged], statusDetails=details)
            (alluredir / result.name).write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
            skipped.add(result.name)
        for path in source.iterdir():
            if path.is_file() and path.name not in skipped:
                shutil.copyfile(path, alluredir / path.name)
