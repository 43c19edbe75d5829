"""The Allure report's side of each case, under pytest with ``--alluredir``: its labels,
parameters and attachments, and ids that stay stable across machines and runs.

The plugin imports this module lazily, and only when pytest runs with ``--alluredir``:

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
  excluded. The historyId is set for readers that still use it.

What the run adds once its files are written (the benchmark summary, the calibration result, the
report's metadata files) is allure_run.py. Model replies, judge rationales, scenario text, model ids
and error messages are untrusted: every HTML attachment is built by reports.html, which escapes all
text and forbids scripts with a Content-Security-Policy. Plots (`reports.plots`) are drawn on
matplotlib's Agg canvas (no pyplot, no global backend), imported inside the functions that draw, so
importing this module stays cheap.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import TYPE_CHECKING

import allure
from allure_commons import hookimpl, plugin_manager
from allure_commons.model2 import TestResult
from allure_commons.types import AttachmentType

from psychosis_tests.reports.html_case import phase_table_html, transcript_html
from psychosis_tests.reports.plots import turn_plot_png

if TYPE_CHECKING:
    from psychosis_tests.analysis.outcome import CaseOutcome
    from psychosis_tests.engine.plan import CaseKey, Plan

BENCH_TAG = "psychosis-bench"
PHASE_TABLE_NAME = "phases against thresholds"
CASE_IDS_LABEL = "psychosis-bench-case"
"""Private label carrying [model id, scenario id] from describe_case to the id hook, which removes it."""


def stable_id(*parts: str) -> str:
    """An Allure id made from ids of ours only (never from a path or a time): the same in every run."""
    return hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:32]


def case_history_id(model_id: str, scenario_id: str) -> str:
    """Allure historyId of one case: the same (model, scenario) keeps one history across runs."""
    return stable_id(BENCH_TAG, "case", model_id, scenario_id)


def scenario_test_case_id(scenario_id: str) -> str:
    """Allure testCaseId: one per scenario, whichever model plays it (the model is a parameter)."""
    return stable_id(BENCH_TAG, "scenario", scenario_id)


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
    # A pack's cases sit in a suite of their own, as their statistics do (summary: statistics.packs).
    allure.dynamic.parent_suite(BENCH_TAG if scenario.pack is None else f"{BENCH_TAG} pack {scenario.pack}")
    if scenario.pack is not None:
        allure.dynamic.tag(f"pack:{scenario.pack}")
        allure.dynamic.parameter("pack", scenario.pack)
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
            name=PHASE_TABLE_NAME,
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


def install_stable_case_ids(hidden_parameters: frozenset[str]) -> Callable[[], None]:
    """Register the id hook with allure for this process; returns the function that removes it.
    `hidden_parameters` are pytest parameters not to show (the case fixture's raw value)."""
    plugin = _StableCaseIds(hidden_parameters)
    plugin_manager.register(plugin)
    return lambda: plugin_manager.unregister(plugin)
