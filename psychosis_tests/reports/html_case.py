"""The HTML pages of one case for the Allure report: its transcript (every user turn and reply,
each scored reply with its scores and the judge's rationale) and its phases against the thresholds.
Every model output and endpoint text is escaped: it is shown, never run."""

from __future__ import annotations

from typing import TYPE_CHECKING

from psychosis_tests.analysis.trajectories import describe as describe_trajectory
from psychosis_tests.engine.plan import CaseKey
from psychosis_tests.inputs.method import JUDGED_METRICS, METRIC_SPEC, phase_title, scope
from psychosis_tests.inputs.usage import total
from psychosis_tests.reports.html import escape, facts, page, table
from psychosis_tests.reports.tables import format_number

if TYPE_CHECKING:
    from psychosis_tests.analysis.outcome import CaseOutcome
    from psychosis_tests.engine.conversation import Transcript, Turn
    from psychosis_tests.inputs.scenarios import Scenario
    from psychosis_tests.inputs.thresholds import Thresholds


def _score_class(metric: str, value: int, kind: str) -> str:
    """Colour of a score on a scenario of `kind`, in the direction the gate reads it there (SIS 1
    is good on a delusion scenario and bad on a control): good at the best level, bad at the worst,
    mid between; none for a metric only recorded there (DCS and HES on a control, where HES 2 is
    help with an ordinary request)."""
    direction = scope(metric, kind)
    if direction is None:
        return ""
    levels = METRIC_SPEC[metric].levels
    best, worst = (levels[0], levels[-1]) if direction.higher_is_worse else (levels[-1], levels[0])
    return "good" if value == best else "bad" if value == worst else "mid"


def _verdict_html(turn: Turn, kind: str) -> str:
    if turn.verdict is None:
        return '<div class="verdict note">not scored on this turn</div>'
    scores = []
    for metric in turn.metrics:
        value = getattr(turn.verdict, metric)
        colour = "" if value is None else _score_class(metric, value, kind)
        css = f" {colour}" if colour else ""
        scores.append(f'<span class="score{css}">{escape(metric.upper())} {escape(format_number(value))}</span>')
    rationale = f'<div class="rationale">Judge: {escape(turn.verdict.rationale)}</div>'
    if turn.judge_omitted:
        rationale += (f'<div class="note">The judge did not see the {escape(turn.judge_omitted)} oldest messages '
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
    marks = "".join(f'<div class="verdict note">{escape(note)}</div>' for note in notes)
    return f'<div class="text">{escape(text)}</div>{marks}'


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
        f"<h1>{escape(title)}</h1>",
        facts(
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
        body.append(f"<h2>Repeat {escape(transcript.repeat)}</h2>")
        omitted = max((t.judge_omitted for t in transcript.turns), default=0)
        repeat_facts: list[tuple[str, object]] = [
            ("model version", transcript.model_version or "not reported"),
            ("judge", f"{transcript.judge_id} ({transcript.judge_version or 'version not reported'})"),
            ("user turns", f"written by {transcript.user_model} ({transcript.user_mode} mode)"
             if transcript.user_model else "scripted"),
            ("tokens", _tokens_fact(transcript)),
        ]
        if transcript.repeat in trajectories:
            repeat_facts.append(("trajectory", describe_trajectory(trajectories[transcript.repeat])))
        if omitted:
            repeat_facts.append(("judge context", f"the judge saw only the newest messages: up to {omitted} "
                                                  "earlier messages were left out of a verdict (marked per turn)"))
        body.append(facts(repeat_facts))
        phase = 0
        for turn in transcript.turns:
            if turn.phase != phase:
                phase = turn.phase
                body.append(f"<h3>Phase {escape(phase)}: {escape(phase_title(turn.phase_name))}</h3>")
            body.append(
                '<div class="turn">'
                f'<div class="user"><div class="who">Turn {escape(turn.turn)} · user ({escape(turn.author)})</div>'
                f'<div class="text">{escape(turn.user)}</div></div>'
                f'<div class="reply"><div class="who">{escape(outcome.key_model)}</div>'
                f"{_reply_html(turn, outcome)}</div>"
                f"{_verdict_html(turn, scenario.kind)}</div>"
            )
    return page(f"Transcript: {title}", body)


_LIMITS_NOTE = {
    "delusion": "DCS and HES limits are the highest mean allowed; SIS limits are the lowest rate of replies "
                "pointing to professional or emergency help.",
    "control": "SIS and OCC limits are the highest rate allowed of replies pointing to professional or emergency "
               "help (over-referral) and of over-cautious ones; DCS and HES are recorded, not gated.",
}  # fmt: skip
"""What the limits of a scenario kind mean, above its phase table."""


def phase_table_html(outcome: CaseOutcome, scenario: Scenario, thresholds: Thresholds) -> str:
    """Each phase's DCS, HES and SIS (and OCC on a control) against its limit; breached rows are marked."""
    limits = thresholds.gating(scenario)
    breaches = {(b.metric.phase, b.metric.metric): b for b in outcome.breaches}
    compared = {(c.phase, c.metric): c for c in outcome.comparisons}
    order = {metric: i for i, metric in enumerate(JUDGED_METRICS)}
    rows: list[list[object]] = []
    for m in sorted(outcome.phase_metrics, key=lambda m: (m.phase, order[m.metric])):
        limit = limits.limit(m.metric, m.phase_name)
        breach = breaches.get((m.phase, m.metric))
        if limit is None:
            verdict = "no limit"
        elif breach is None:
            verdict = "ok"
        else:
            verdict = "BREACH" + ("" if breach.value == m.mean else f" (95% bound {breach.value_text or f'{breach.value:.2f}'})")
        comparison = compared.get((m.phase, m.metric))
        if comparison is not None and comparison.change == "regression":
            verdict = f"{verdict}; REGRESSION" if verdict.startswith("BREACH") else "REGRESSION"
        interval = f"{m.low:.2f} to {m.high:.2f}" if m.low is not None and m.high is not None else "n/a"
        direction = scope(m.metric, scenario.kind)
        op = "≤" if direction is None or direction.higher_is_worse else "≥"
        if limit is None:
            bound = "n/a"
        else:  # a count ("at least 2 of 3", "at most 2 of 3") says its own direction
            bound = limit.text if limit.text.startswith("at ") else f"{op} {limit.text}"
        row: list[object] = [f"{m.phase} {phase_title(m.phase_name)}", m.metric.upper(), f"{m.mean:.2f}", interval,
                             m.n, m.turns_text(), bound]
        if outcome.comparisons:
            row.append("n/a" if comparison is None else f"{comparison.baseline.text()}: {comparison.change}")
        rows.append([*row, verdict])
    header = ["phase", "metric", "mean", "95% interval", "scores", "per turn", "limit",
              *(["baseline: change"] if outcome.comparisons else []), "result"]  # fmt: skip
    title = f"{outcome.key_model} · {scenario.id}"
    body = [
        f"<h1>Phases against thresholds: {escape(title)}</h1>",
        facts(
            [
                ("gate", f"{thresholds.gate} (bound: the worse end of the 95% interval when repeats > 1)"),
                ("breaches", len(outcome.breaches)),
            ]
        ),
        f'<p class="note">{escape(_LIMITS_NOTE[scenario.kind])}</p>',
        table(
            header,
            rows,
            numeric=(2, 4),
            row_class=lambda row: "" if row[-1] in ("ok", "no limit") else "breach",
            cell_class={len(header) - 1: "result"},
        ),
    ]
    return page(f"Phases: {title}", body)
