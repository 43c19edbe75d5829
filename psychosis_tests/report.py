"""The Allure report: each case's labels, transcript and plots, and the run's benchmark summary.

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
  executor.json and categories.json.

Model replies, judge rationales, scenario text, model ids and error messages are untrusted: all text
that goes into an HTML attachment passes through html.escape, and every page also forbids scripts
with a Content-Security-Policy. Plots are drawn on matplotlib's Agg canvas (no pyplot, no global
backend), imported inside the functions that draw, so importing this module stays cheap.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import html
import io
import json
import math
import os
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
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

from psychosis_tests.judge import METRICS
from psychosis_tests.results import format_number, markdown_summary
from psychosis_tests.scenarios import PHASE_NAMES, PHASE_TITLES
from psychosis_tests.thresholds import HIGHER_IS_WORSE

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from psychosis_tests.conversation import Turn
    from psychosis_tests.plan import CaseKey, Plan
    from psychosis_tests.runner import CaseOutcome
    from psychosis_tests.scenarios import Scenario
    from psychosis_tests.thresholds import Thresholds

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
        "messageRegex": r"(?s).*: HES [0-9.]+ > .*",
    },
    {
        "name": "Missing safety intervention (SIS under its limit; HES within)",
        "matchedStatuses": ["failed"],
        "messageRegex": r"(?s).*: SIS [0-9.]+ < .*",
    },
    {
        "name": "Delusion confirmation (DCS over its limit; HES and SIS within)",
        "matchedStatuses": ["failed"],
        "messageRegex": r"(?s).*: DCS [0-9.]+ > .*",
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
]
"""categories.json. Allure 2 matches messageRegex against the whole failure message and files a
result under the FIRST category it matches (unmatched failures go to its built-in "Product defects",
broken results to "Test defects"), so the order ranks a case by its worst problem: harm enablement,
then a missing intervention, then delusion confirmation. A threshold breach line reads
"phase 3 solidification: HES 2.00 > 0.67 (...)" (thresholds.Breach.message); a regression line
"phase 3 solidification: HES 0.00 -> 1.67 (...)" (baseline.Comparison.message) under an
"N regression(s) for" heading, so the metric categories match breaches only."""

_METRIC_COLOURS = {"dcs": "#c0392b", "hes": "#d68910", "sis": "#1f77b4"}
_VARIANT_COLOURS = {"explicit": "#5d6d7e", "implicit": "#af7ac5"}

# -- HTML -------------------------------------------------------------------------------------

_CSP = "default-src 'none'; style-src 'unsafe-inline'"
_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 1em; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.15em; margin-top: 1.4em; } h3 { font-size: 1em; }
table { border-collapse: collapse; margin: 0.5em 0 1em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f2f2f2; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.breach td { background: #fdecea; } tr.breach td.result { font-weight: bold; color: #a93226; }
dl.facts { display: grid; grid-template-columns: max-content auto; gap: 2px 12px; }
dl.facts dt { font-weight: 600; } dl.facts dd { margin: 0; }
.turn { border: 1px solid #ddd; border-radius: 6px; margin: 0.6em 0; padding: 0.5em 0.7em; }
.who { font-size: 0.85em; color: #666; margin-top: 0.3em; }
.text { white-space: pre-wrap; overflow-wrap: anywhere; }
.user .text { background: #f4f6f7; padding: 4px 6px; border-radius: 4px; }
.reply .text { background: #fbfcfc; padding: 4px 6px; border-left: 3px solid #aab7b8; }
.verdict { margin-top: 0.4em; font-size: 0.92em; }
.score { display: inline-block; padding: 0 6px; margin-right: 4px; border-radius: 3px; font-weight: 600; }
.good { background: #d5f5e3; } .mid { background: #fcf3cf; } .bad { background: #fadbd8; }
.rationale { color: #444; margin-top: 2px; } .note { color: #666; font-size: 0.9em; }
"""


def _e(value: object) -> str:
    """Escape any value for HTML text or a quoted attribute."""
    return html.escape(str(value), quote=True)


def _page(title: str, body: Iterable[str]) -> str:
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
            f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
            *body,
            "</body></html>",
        ]
    )


def _facts(pairs: Iterable[tuple[str, object]]) -> str:
    items = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in pairs)
    return f'<dl class="facts">{items}</dl>'


def _table(
    header: Sequence[str],
    rows: Iterable[Sequence[object]],
    *,
    numeric: Sequence[int] = (),
    row_class: Callable[[Sequence[object]], str] | None = None,
    cell_class: Mapping[int, str] | None = None,
) -> str:
    """An HTML table; every cell is escaped. `numeric` lists right-aligned columns."""
    lines = ["<table><thead><tr>", *(f"<th>{_e(h)}</th>" for h in header), "</tr></thead><tbody>"]
    for row in rows:
        css = row_class(row) if row_class else ""
        lines.append(f'<tr class="{_e(css)}">' if css else "<tr>")
        for i, cell in enumerate(row):
            classes = " ".join(c for c in ("num" if i in numeric else "", (cell_class or {}).get(i, "")) if c)
            lines.append(f'<td class="{classes}">{_e(cell)}</td>' if classes else f"<td>{_e(cell)}</td>")
        lines.append("</tr>")
    lines.append("</tbody></table>")
    return "".join(lines)


def _phase_title(name: str) -> str:
    return PHASE_TITLES.get(name, name)


def _phase_label(phase: int) -> str:
    """A phase number with its name, e.g. "2 pattern seeking"."""
    return f"{phase} {_phase_title(PHASE_NAMES[phase - 1])}" if 1 <= phase <= len(PHASE_NAMES) else str(phase)


def _score_class(metric: str, value: int) -> str:
    if metric == "sis":
        return "good" if value == 1 else "bad"
    return ("good", "mid", "bad")[value]


def _verdict_html(turn: Turn) -> str:
    if turn.verdict is None:
        return '<div class="verdict note">not scored on this turn</div>'
    scores = []
    for metric in turn.metrics:
        value = getattr(turn.verdict, metric)
        css = "" if value is None else f" {_score_class(metric, value)}"
        scores.append(f'<span class="score{css}">{_e(metric.upper())} {_e(format_number(value))}</span>')
    rationale = f'<div class="rationale">Judge: {_e(turn.verdict.rationale)}</div>'
    return f'<div class="verdict">{"".join(scores)}{rationale}</div>'


def transcript_html(outcome: CaseOutcome, scenario: Scenario) -> str:
    """Every user turn and reply of every repeat, each scored reply with its scores and rationale."""
    title = f"{outcome.key_model} · {scenario.id}"
    body = [
        f"<h1>{_e(title)}</h1>",
        _facts(
            [
                ("scenario", scenario.title),
                ("archetype", scenario.archetype),
                ("variant", scenario.variant),
                ("theme", scenario.theme),
                ("harm at stake", scenario.harm_type),
                ("repeats", len(outcome.transcripts)),
            ]
        ),
    ]
    for transcript in outcome.transcripts:
        body.append(f"<h2>Repeat {_e(transcript.repeat)}</h2>")
        body.append(
            _facts(
                [
                    ("model version", transcript.model_version or "not reported"),
                    ("judge", f"{transcript.judge_id} ({transcript.judge_version or 'version not reported'})"),
                ]
            )
        )
        phase = 0
        for turn in transcript.turns:
            if turn.phase != phase:
                phase = turn.phase
                body.append(f"<h3>Phase {_e(phase)}: {_e(_phase_title(turn.phase_name))}</h3>")
            body.append(
                '<div class="turn">'
                f'<div class="user"><div class="who">Turn {_e(turn.turn)} · user</div>'
                f'<div class="text">{_e(turn.user)}</div></div>'
                f'<div class="reply"><div class="who">{_e(outcome.key_model)}</div>'
                f'<div class="text">{_e(turn.reply)}</div></div>'
                f"{_verdict_html(turn)}</div>"
            )
    return _page(f"Transcript: {title}", body)


def phase_table_html(outcome: CaseOutcome, scenario: Scenario, thresholds: Thresholds) -> str:
    """Each phase's DCS, HES and SIS against its limit; breached rows are marked."""
    limits = thresholds.limits_for(scenario)
    breaches = {(b.metric.phase, b.metric.metric): b for b in outcome.breaches}
    compared = {(c.phase, c.metric): c for c in outcome.comparisons}
    order = {metric: i for i, metric in enumerate(METRICS)}
    rows: list[list[object]] = []
    for m in sorted(outcome.phase_metrics, key=lambda m: (m.phase, order[m.metric])):
        limit = getattr(limits, m.metric).get(m.phase_name)
        breach = breaches.get((m.phase, m.metric))
        if limit is None:
            verdict = "no limit"
        elif breach is None:
            verdict = "ok"
        else:
            verdict = "BREACH" + ("" if breach.value == m.mean else f" (95% bound {breach.value:.2f})")
        comparison = compared.get((m.phase, m.metric))
        if comparison is not None and comparison.change == "regression":
            verdict = f"{verdict}; REGRESSION" if verdict.startswith("BREACH") else "REGRESSION"
        interval = f"{m.low:.2f} to {m.high:.2f}" if m.low is not None and m.high is not None else "n/a"
        bound = "n/a" if limit is None else f"{'≤' if HIGHER_IS_WORSE[m.metric] else '≥'} {limit:.2f}"
        row: list[object] = [f"{m.phase} {_phase_title(m.phase_name)}", m.metric.upper(), f"{m.mean:.2f}", interval,
                             m.n, m.turns_text(), bound]
        if outcome.comparisons:
            row.append("n/a" if comparison is None else f"{comparison.baseline.text()}: {comparison.change}")
        rows.append([*row, verdict])
    header = ["phase", "metric", "mean", "95% interval", "scores", "per turn", "limit",
              *(["baseline: change"] if outcome.comparisons else []), "result"]  # fmt: skip
    title = f"{outcome.key_model} · {scenario.id}"
    body = [
        f"<h1>Phases against thresholds: {_e(title)}</h1>",
        _facts(
            [
                ("gate", f"{thresholds.gate} (bound: the worse end of the 95% interval when repeats > 1)"),
                ("breaches", len(outcome.breaches)),
            ]
        ),
        '<p class="note">DCS and HES limits are the highest mean allowed; SIS limits are the lowest '
        "rate of replies pointing to professional or emergency help.</p>",
        _table(
            header,
            rows,
            numeric=(2, 4),
            row_class=lambda row: "" if row[-1] in ("ok", "no limit") else "breach",
            cell_class={len(header) - 1: "result"},
        ),
    ]
    return _page(f"Phases: {title}", body)


# -- plots ------------------------------------------------------------------------------------


def _figure(width: float, height: float) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def _plain(text: str) -> str:
    """Text for a plot label: a dollar sign would otherwise start matplotlib's math mode."""
    return text.replace("$", r"\$")


def _tick(model_id: str) -> str:
    """A model id short enough for an axis tick; the end of an id is what tells models apart."""
    return _plain(model_id if len(model_id) <= 26 else "…" + model_id[-25:])


def _value(value: object) -> float:
    return float(value) if isinstance(value, int | float) else float("nan")


def _bar_labels(values: Sequence[float]) -> list[str]:
    """Value labels for bars; an undefined mean (NaN) draws no bar and gets no label."""
    return ["" if math.isnan(value) else f"{value:.2f}" for value in values]


def turn_plot_png(outcome: CaseOutcome, scenario: Scenario) -> bytes:
    """DCS, HES and SIS per turn (mean over repeats), with the phase boundaries marked."""
    phase_of_turn = scenario.phase_of_turn()
    figure = _figure(8.5, 3.8)
    axes = figure.add_subplot()
    for offset, metric, marker in zip((-0.08, 0.0, 0.08), METRICS, "osD", strict=True):
        per_turn: dict[int, list[float]] = {}
        for transcript in outcome.transcripts:
            for turn in transcript.turns:
                value = getattr(turn.verdict, metric) if turn.verdict is not None else None
                if value is not None:
                    per_turn.setdefault(turn.turn, []).append(float(value))
        if per_turn:
            turns = sorted(per_turn)
            axes.plot(
                [t + offset for t in turns],
                [sum(per_turn[t]) / len(per_turn[t]) for t in turns],
                marker=marker,
                color=_METRIC_COLOURS[metric],
                label=metric.upper(),
            )
    for index in range(1, len(phase_of_turn)):
        if phase_of_turn[index] != phase_of_turn[index - 1]:
            axes.axvline(index + 0.5, color="#888888", linestyle="--", linewidth=1)
    for number, phase in enumerate(scenario.phases, start=1):
        turns = [t for t, p in enumerate(phase_of_turn, start=1) if p == number]
        axes.text((turns[0] + turns[-1]) / 2, 2.3, _phase_title(phase.name), ha="center", fontsize=8, color="#555555")
    axes.set_xlim(0.5, len(phase_of_turn) + 0.5)
    axes.set_ylim(-0.15, 2.5)
    axes.set_xticks(range(1, len(phase_of_turn) + 1))
    axes.set_yticks([0, 1, 2])
    axes.set_xlabel("turn")
    axes.set_ylabel("score (mean over repeats)")
    axes.set_title(_plain(f"{outcome.key_model} · {scenario.id}"), fontsize=10)
    axes.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _png(figure)


def model_bars_png(summary: Mapping[str, Any]) -> bytes:
    """Per model: mean DCS, HES and SIS over scored turns, with SD error bars."""
    rows = summary["statistics"]["per_model"]
    models = [str(r["model"]) for r in rows]
    figure = _figure(max(6.0, 1.5 * len(models) + 2.5), 4.0)
    axes = figure.add_subplot()
    width = 0.26
    for i, metric in enumerate(METRICS):
        means = [_value(r[f"{metric}_mean"]) for r in rows]
        bars = axes.bar(
            [x + (i - 1) * width for x in range(len(models))],
            means,
            width,
            yerr=[_value(r[f"{metric}_sd"]) if r[f"{metric}_sd"] is not None else 0.0 for r in rows],
            capsize=3,
            color=_METRIC_COLOURS[metric],
            label=metric.upper(),
        )
        axes.bar_label(bars, labels=_bar_labels(means), fontsize=7, padding=2)
    axes.set_xticks(range(len(models)), [_tick(m) for m in models], rotation=15, ha="right")
    axes.set_ylim(0, 2.4)
    axes.set_ylabel("mean ± SD over scored turns")
    axes.set_title("Per model", fontsize=10)
    axes.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _png(figure)


def variant_bars_png(summary: Mapping[str, Any]) -> bytes:
    """Per metric and model: explicit against implicit scenarios, mean with SD error bars."""
    rows = {(r["model"], r["variant"]): r for r in summary["statistics"]["per_model_variant"]}
    models = sorted({str(model) for model, _ in rows})
    figure = _figure(max(9.0, 2.4 * len(models) + 3.0), 3.8)
    panels = figure.subplots(1, len(METRICS), sharey=True)
    width = 0.38
    for axes, metric in zip(panels, METRICS, strict=True):
        for i, variant in enumerate(("explicit", "implicit")):
            picked = [rows.get((model, variant), {}) for model in models]
            means = [_value(r.get(f"{metric}_mean")) for r in picked]
            bars = axes.bar(
                [x + (i - 0.5) * width for x in range(len(models))],
                means,
                width,
                yerr=[_value(r.get(f"{metric}_sd")) if r.get(f"{metric}_sd") is not None else 0.0 for r in picked],
                capsize=3,
                color=_VARIANT_COLOURS[variant],
                label=variant,
            )
            axes.bar_label(bars, labels=_bar_labels(means), fontsize=7, padding=2)
        axes.set_xticks(range(len(models)), [_tick(m) for m in models], rotation=15, ha="right")
        axes.set_title(metric.upper(), fontsize=10)
        axes.set_ylim(0, 2.4)
    panels[0].set_ylabel("mean ± SD over scored turns")
    panels[-1].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _png(figure)


def phase_trajectories_png(summary: Mapping[str, Any]) -> bytes:
    """Per metric: each model's mean per phase, one line per model."""
    rows = summary["statistics"]["per_model_phase"]
    models = sorted({str(r["model"]) for r in rows})
    figure = _figure(11.0, 3.8)
    panels = figure.subplots(1, len(METRICS), sharey=True)
    for axes, metric in zip(panels, METRICS, strict=True):
        for model in models:
            points = sorted(
                (int(r["phase"]), float(r[f"{metric}_mean"]))
                for r in rows
                if r["model"] == model and r[f"{metric}_mean"] is not None
            )
            if points:
                axes.plot([p for p, _ in points], [v for _, v in points], marker="o", label=_plain(model))
        axes.set_xticks(
            range(1, len(PHASE_NAMES) + 1),
            [_phase_title(name).replace(" ", "\n") for name in PHASE_NAMES],
            fontsize=8,
        )
        axes.set_xlim(0.7, len(PHASE_NAMES) + 0.3)
        axes.set_ylim(-0.1, 2.1)
        axes.set_title(metric.upper(), fontsize=10)
    panels[0].set_ylabel("mean over scored turns")
    panels[-1].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    return _png(figure)


# -- one case ---------------------------------------------------------------------------------


def describe_case(key: CaseKey, plan: Plan, outcome: CaseOutcome | None, error: str | None) -> None:
    """Title, labels, parameters and attachments of the running case's Allure result.

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
    allure.dynamic.label(CASE_IDS_LABEL, json.dumps([key.model_id, key.scenario_id]))
    allure.dynamic.parameter("model", key.model_id)
    allure.dynamic.parameter("scenario", key.scenario_id)
    allure.dynamic.parameter("repeats", plan.settings.repeats, excluded=True)
    allure.dynamic.parameter("judge", plan.judge.id, excluded=True)
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
    """Replaces allure-pytest's ids of each case's result just before the result is written."""

    @hookimpl(tryfirst=True)
    def report_result(self, result: TestResult) -> None:
        label = next((lb for lb in result.labels if lb.name == CASE_IDS_LABEL), None)
        if label is None:
            return
        result.labels.remove(label)
        model_id, scenario_id = json.loads(label.value)
        result.historyId = case_history_id(model_id, scenario_id)
        result.testCaseId = scenario_test_case_id(scenario_id)


def install_stable_case_ids() -> Callable[[], None]:
    """Register the id hook with allure for this process; returns the function that removes it."""
    plugin = _StableCaseIds()
    plugin_manager.register(plugin)
    return lambda: plugin_manager.unregister(plugin)


# -- the session's summary --------------------------------------------------------------------


def _metric_cells(row: Mapping[str, Any]) -> list[str]:
    cells = []
    for metric in METRICS:
        mean, sd, n = row.get(f"{metric}_mean"), row.get(f"{metric}_sd"), row.get(f"{metric}_n")
        cells.append("n/a" if mean is None else f"{mean:.2f} ± {format_number(sd)}" + ("" if n is None else f" (n={n})"))
    return cells


def summary_html(summary: Mapping[str, Any]) -> str:
    """The run's statistics as HTML tables (the same numbers as summary.json and summary.md)."""
    run, stats = summary["run"], summary["statistics"]
    per_model = {r["model"]: r for r in stats["per_model"]}
    metric_header = ["DCS", "HES", "SIS"]
    body = [
        f"<h1>psychosis-bench run {_e(run['run_id'])}</h1>",
        _facts(
            [
                ("targets", ", ".join(run["targets"])),
                ("judge", f"{run['judge']} ({run.get('judge_model', '')})"),
                ("repeats", run["repeats"]),
                ("scenario set hash", run["scenario_set_hash"]),
                ("thresholds hash", run["thresholds_hash"]),
                ("psychosis-bench", run["package_version"]),
                ("python", run["python"]),
                ("started", run["started_at"]),
                ("finished", run["finished_at"]),
            ]
        ),
        *([f'<p class="note"><strong>Warning: {_e(run["judge_warning"])}.</strong></p>'] if run.get("judge_warning") else []),
        '<p class="note">Scores: mean ± SD over scored turns (n = scored turns). DCS 0-2 and HES 0-2, '
        "lower is safer; SIS 0/1, higher is safer.</p>",
        "<h2>Models</h2>",
        _table(
            ["rank", "model", "cases", "passed", "failed", "errors", "pass rate", *metric_header],
            (
                [r["rank"], r["model"], r["cases"], r["passed"], r["failed"], r["error"], format_number(r["pass_rate"]),
                 *_metric_cells(per_model.get(r["model"], {}))]
                for r in stats["ranking"]
            ),
            numeric=(0, 2, 3, 4, 5, 6),
        ),  # fmt: skip
        "<h2>All models pooled</h2>",
        _table(metric_header, (_metric_cells(r) for r in stats["overall"])),
    ]
    for title, column in (("Per phase", "phase"), ("Per variant", "variant"), ("Per archetype", "archetype")):
        body += [
            f"<h2>{_e(title)}</h2>",
            _table(
                ["model", column, *metric_header],
                ([r["model"], _phase_label(r[column]) if column == "phase" else r[column], *_metric_cells(r)]
                 for r in stats[f"per_model_{column}"]),  # fmt: skip
            ),
        ]
    gap = stats["variant_gap"]
    body += [
        "<h2>Explicit vs implicit, paired by archetype</h2>",
        '<p class="note">Difference = implicit - explicit (positive: implicit scores higher, worse for '
        "DCS and HES, better for SIS). The Wilcoxon signed-rank test is the primary test: the scores "
        "are ordinal and bounded and a model has few archetype pairs, so normality cannot be assumed. "
        "The paired t-test is shown for comparison with the paper.</p>",
        _table(
            ["model", "metric", "pairs", "explicit", "implicit", "difference", "Wilcoxon p (primary)",
             "paired t-test p", "note"],
            (
                [r.get("model", "all models"), str(r["metric"]).upper(), r["n_pairs"], format_number(r["mean_explicit"]),
                 format_number(r["mean_implicit"]), format_number(r["mean_difference"]), format_number(r["wilcoxon_p"], 4),
                 format_number(r["ttest_p"], 4), "; ".join(dict.fromkeys(filter(None, [r["wilcoxon_note"], r["ttest_note"]])))]
                for r in [*gap["per_model"], *gap["overall"]]
            ),
            numeric=(2, 3, 4, 5, 6, 7),
        ),  # fmt: skip
        "<h2>DCS and HES: Spearman correlation over turns scored on both</h2>",
        _table(
            ["model", "turns", "r_s", "p", "note"],
            (
                [r.get("model", "all models"), r["n"], format_number(r["r_s"]), format_number(r["p"], 4), r["note"] or ""]
                for r in [*stats["dcs_hes_spearman"]["per_model"], *stats["dcs_hes_spearman"]["overall"]]
            ),
            numeric=(1, 2, 3),
        ),
        "<h2>Conversations without any safety intervention</h2>",
        _table(
            ["model", "conversations", "with none at all", "share", "not scored"],
            (
                [r.get("model", "all models"), r["conversations"], r["without_intervention"], format_number(r["share"]),
                 r["unscored_conversations"]]
                for r in [*stats["no_intervention"]["per_model"], *stats["no_intervention"]["overall"]]
            ),
            numeric=(1, 2, 3, 4),
        ),  # fmt: skip
    ]
    not_passed = [c for c in summary["cases"] if c["outcome"] != "passed"]
    if not_passed:
        body += [
            "<h2>Cases not passed</h2>",
            _table(
                ["model", "scenario", "outcome", "why"],
                (
                    [c["model"], c["scenario"], c["outcome"],
                     c["error"] or "; ".join([*c["breaches"], *c.get("regressions", [])])]
                    for c in not_passed
                ),
                row_class=lambda row: "breach",
            ),  # fmt: skip
        ]
    return _page(f"psychosis-bench run {run['run_id']}", body)


def environment_properties(summary: Mapping[str, Any]) -> str:
    """environment.properties for Allure's Environment widget (Java properties syntax, ASCII only)."""
    run = summary["run"]
    entries = {
        "targets": ", ".join(run["targets"]),
        "judge": run["judge"],
        "judge.model": run.get("judge_model", ""),
        "scenario_set_hash": run["scenario_set_hash"],
        "thresholds_hash": run["thresholds_hash"],
        "repeats": run["repeats"],
        "cache_mode": run.get("cache_mode", ""),
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
