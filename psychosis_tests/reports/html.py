"""HTML pages for the Allure report: each case's transcript and phase table, and the run's
benchmark summary. Every model output and endpoint text is escaped: it is shown, never run."""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from psychosis_tests.engine.plan import CaseKey
from psychosis_tests.inputs.method import (
    HIGHER_IS_WORSE,
    METRICS,
    OCC,
    PHASE_NAMES,
    PHASE_TITLES,
)
from psychosis_tests.analysis.trajectories import describe as describe_trajectory
from psychosis_tests.inputs.usage import total
from psychosis_tests.reports.tables import format_number, over_caution_cell

if TYPE_CHECKING:

    from psychosis_tests.analysis.outcome import CaseOutcome
    from psychosis_tests.engine.conversation import Transcript, Turn
    from psychosis_tests.inputs.scenarios import Scenario
    from psychosis_tests.inputs.thresholds import Thresholds

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
    if turn.judge_omitted:
        rationale += (f'<div class="note">The judge did not see the {_e(turn.judge_omitted)} oldest messages '
                      "(its judge_context_messages window).</div>")
    return f'<div class="verdict">{"".join(scores)}{rationale}</div>'


REPLY_CHARS = 20_000
"""Replies longer than this are shown cut in reports; the case file keeps every character."""


def _reply_html(turn: Turn, outcome: CaseOutcome) -> str:
    """A reply, cut at REPLY_CHARS with a note where, and marked when the endpoint cut it."""
    text = turn.reply
    notes = []
    if turn.finish_reason == "length":
        notes.append("the endpoint cut this reply at its length limit (finish_reason length); it was scored as it stands")
    if len(text) > REPLY_CHARS:
        stem = CaseKey(outcome.key_model, outcome.key_scenario).file_stem
        notes.append(
            f"shown cut at {REPLY_CHARS:,} of {len(text):,} characters; the whole reply is in cases/{stem}.json"
        )
        text = text[:REPLY_CHARS] + " [...]"
    marks = "".join(f'<div class="verdict note">{_e(note)}</div>' for note in notes)
    return f'<div class="text">{_e(text)}</div>{marks}'
def _tokens_fact(transcript: Transcript) -> str:
    """Prompt and completion tokens of the conversation's calls per role."""
    roles = dict.fromkeys(role for turn in transcript.turns for role in turn.usage)
    parts = []
    for role in roles:
        used = total([turn.usage[role] for turn in transcript.turns if role in turn.usage])
        hits = f", {used.cache_hits} from the response cache" if used.cache_hits else ""
        parts.append(f"{role} {used.prompt_tokens} in / {used.completion_tokens} out ({used.calls} calls{hits})")
    return "; ".join(parts) or "not reported"


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
    trajectories = {t.repeat: t for t in outcome.trajectories}
    for transcript in outcome.transcripts:
        body.append(f"<h2>Repeat {_e(transcript.repeat)}</h2>")
        omitted = max((t.judge_omitted for t in transcript.turns), default=0)
        facts: list[tuple[str, object]] = [
            ("model version", transcript.model_version or "not reported"),
            ("judge", f"{transcript.judge_id} ({transcript.judge_version or 'version not reported'})"),
            ("user turns", f"written by {transcript.user_model} ({transcript.user_mode} mode)"
             if transcript.user_model else "scripted"),
            ("tokens", _tokens_fact(transcript)),
        ]
        if transcript.repeat in trajectories:
            facts.append(("trajectory", describe_trajectory(trajectories[transcript.repeat])))
        if omitted:
            facts.append(("judge context", f"the judge saw only the newest messages: up to {omitted} "
                                           "earlier messages were left out of a verdict (marked per turn)"))
        body.append(_facts(facts))
        phase = 0
        for turn in transcript.turns:
            if turn.phase != phase:
                phase = turn.phase
                body.append(f"<h3>Phase {_e(phase)}: {_e(_phase_title(turn.phase_name))}</h3>")
            body.append(
                '<div class="turn">'
                f'<div class="user"><div class="who">Turn {_e(turn.turn)} · user ({_e(turn.author)})</div>'
                f'<div class="text">{_e(turn.user)}</div></div>'
                f'<div class="reply"><div class="who">{_e(outcome.key_model)}</div>'
                f"{_reply_html(turn, outcome)}</div>"
                f"{_verdict_html(turn)}</div>"
            )
    return _page(f"Transcript: {title}", body)


def phase_table_html(outcome: CaseOutcome, scenario: Scenario, thresholds: Thresholds) -> str:
    """Each phase's DCS, HES and SIS (and OCC on a control) against its limit; breached rows are marked."""
    control = scenario.kind == "control"
    limits = thresholds.controls if control else thresholds.limits_for(scenario)
    breaches = {(b.metric.phase, b.metric.metric): b for b in outcome.breaches}
    compared = {(c.phase, c.metric): c for c in outcome.comparisons}
    order = {metric: i for i, metric in enumerate((*METRICS, OCC))}
    rows: list[list[object]] = []
    for m in sorted(outcome.phase_metrics, key=lambda m: (m.phase, order[m.metric])):
        limit = limits.limit(m.metric, m.phase_name)
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
        op = "≤" if control or HIGHER_IS_WORSE[m.metric] else "≥"
        if limit is None:
            bound = "n/a"
        else:  # a count ("at least 2 of 3", "at most 2 of 3") says its own direction
            bound = limit.text if limit.text.startswith("at ") else f"{op} {limit.text}"
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


# -- the session's summary --------------------------------------------------------------------


def _metric_cells(row: Mapping[str, Any]) -> list[str]:
    cells = []
    for metric in METRICS:
        mean, sd, n = row.get(f"{metric}_mean"), row.get(f"{metric}_sd"), row.get(f"{metric}_n")
        cells.append("n/a" if mean is None else f"{mean:.2f} ± {format_number(sd)}" + ("" if n is None else f" (n={n})"))
    return cells


def _trajectory_section(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Per model: the trajectory metrics over its conversations (docs/adaptive.md)."""
    if not rows:
        return []

    def turn(value: object) -> str:
        return "n/a" if value is None else f"t{float(value):.1f}"  # type: ignore[arg-type]

    return [
        "<h2>Trajectories</h2>",
        '<p class="note">Per conversation: the first turn that validated the delusion (DCS 2) and that '
        "enabled the harm (HES 2), as a mean over the conversations where it happened; the longest run of "
        "turns without a safety intervention once HES applies; the least-squares slope of DCS per turn; "
        "recoveries (a DCS 2 followed later by a DCS 0).</p>",
        _table(
            ["model", "conversations", "turns", "validated", "first DCS 2", "enabled harm", "first HES 2",
             "longest run without help (mean)", "(max)", "DCS drift per turn", "recovered"],
            (
                [r["model"], r["conversations"], r["turns"], r["validated"], turn(r["first_validation_mean"]),
                 r["harmed"], turn(r["first_harm_mean"]), format_number(r["without_intervention_mean"], 1),
                 r["without_intervention_max"], format_number(r["drift_mean"], 3), r["recovered"]]
                for r in rows
            ),
            numeric=(1, 2, 3, 5, 7, 8, 9, 10),
        ),  # fmt: skip
    ]


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
    caution = stats.get("over_caution", {}).get("per_model", [])
    if caution:
        body += [
            "<h2>Controls: over-caution and over-referral</h2>",
            '<p class="note">The scores above are over delusion scenarios. On control scenarios (ordinary '
            "users, nothing at stake) over-caution is the rate of replies that pathologise the user or refuse "
            "an ordinary request, and referral the rate of replies pointing to professional or emergency "
            "help; lower is better for both.</p>",
            _table(
                ["model", "control cases", "passed", "over-caution", "referral"],
                ([r["model"], r["control_cases"], r["control_passed"], over_caution_cell(r), format_number(r["sis_rate"])]
                 for r in caution),  # fmt: skip
                numeric=(1, 2),
            ),
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
        *_trajectory_section(summary.get("trajectories") or []),
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
