"""Plots for the Allure report (PNG via matplotlib, no display needed)."""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from psychosis_tests.inputs.method import JUDGED_METRICS, METRIC_SPEC, METRICS, PHASE_NAMES, phase_title

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from psychosis_tests.analysis.outcome import CaseOutcome
    from psychosis_tests.records.results_file import Trajectory
    from psychosis_tests.inputs.scenarios import Scenario

_METRIC_COLOURS = {"dcs": "#c0392b", "hes": "#d68910", "sis": "#1f77b4"}
_MARKERS = "osD^v<>"


def _colour(metric: str) -> str:
    """The metric's own colour; a metric without one takes matplotlib's cycle after the three."""
    return _METRIC_COLOURS.get(metric, f"C{3 + JUDGED_METRICS.index(metric)}")


def _centred(i: int, step: float, count: int = len(METRICS)) -> float:
    """Offset of the i-th of `count` metrics side by side, centred on the tick."""
    return (i - (count - 1) / 2) * step
_VARIANT_COLOURS = {"explicit": "#5d6d7e", "implicit": "#af7ac5"}


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


def _ticks(model_ids: Sequence[str]) -> list[str]:
    """Model ids short enough for axis ticks: the end of an id is what tells models apart, unless
    two ids end alike (one model through two providers), which are then shown whole."""
    ticks = [model_id if len(model_id) <= 26 else "…" + model_id[-25:] for model_id in model_ids]
    return [_plain(model_id if ticks.count(tick) > 1 else tick) for model_id, tick in zip(model_ids, ticks, strict=True)]


def _value(value: object) -> float:
    return float(value) if isinstance(value, int | float) else float("nan")


def _set_statistics(summary: Mapping[str, Any], pack: str | None) -> Mapping[str, Any]:
    """The statistics of one scenario set: the main set's (`pack` None) or a pack's."""
    return summary["statistics"] if pack is None else summary["statistics"]["packs"][pack]


def set_title(summary: Mapping[str, Any], pack: str | None) -> str:
    """Which set a summary plot shows when the run has packs ("main set", "pack NAME"); "" without."""
    if not summary["statistics"].get("packs"):
        return ""
    return "main set" if pack is None else f"pack {pack}"


def has_plots(summary: Mapping[str, Any], pack: str | None = None) -> bool:
    """Whether the set has scored delusion turns to draw: a set without any (no case of it, its
    cases all errored, controls only) gets no summary plots rather than empty ones."""
    return bool(_set_statistics(summary, pack)["per_model"])


def _title_figure(figure: Figure, summary: Mapping[str, Any], pack: str | None) -> None:
    if title := set_title(summary, pack):
        figure.suptitle(_plain(title), fontsize=11)


def _bar_labels(values: Sequence[float]) -> list[str]:
    """Value labels for bars; an undefined mean (NaN) draws no bar and gets no label."""
    return ["" if math.isnan(value) else f"{value:.2f}" for value in values]


def turn_plot_png(outcome: CaseOutcome, scenario: Scenario) -> bytes:
    """DCS, HES and SIS per turn (mean over repeats), and OCC on a control, whose failure it is,
    with the phase boundaries and, for the first repeat, the trajectory marks: first DCS 2, first
    HES 2, the longest stretch without help."""
    played = outcome.transcripts[0].turns if outcome.transcripts else []
    phase_of_turn = [t.phase for t in played] or scenario.phase_of_turn()
    figure = _figure(max(8.5, 0.3 * len(phase_of_turn) + 4.5), 3.8)
    axes = figure.add_subplot()
    metrics = [m for m in JUDGED_METRICS if m in scenario.metric_first_phase]
    for i, metric in enumerate(metrics):
        offset, marker = _centred(i, 0.08, len(metrics)), _MARKERS[i]
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
                color=_colour(metric),
                label=METRIC_SPEC[metric].label,
            )
    for index in range(1, len(phase_of_turn)):
        if phase_of_turn[index] != phase_of_turn[index - 1]:
            axes.axvline(index + 0.5, color="#888888", linestyle="--", linewidth=1)
    for number, phase in enumerate(scenario.phases, start=1):
        turns = [t for t, p in enumerate(phase_of_turn, start=1) if p == number]
        axes.text((turns[0] + turns[-1]) / 2, 2.3, phase_title(phase.name), ha="center", fontsize=8, color="#555555")
    if outcome.trajectories:
        _mark_trajectory(axes, outcome.trajectories[0], [t.turn for t in played if t.verdict and t.verdict.sis is not None],
                         {t.turn: t.verdict.sis for t in played if t.verdict and t.verdict.sis is not None})
    axes.set_xlim(0.5, len(phase_of_turn) + 0.5)
    axes.set_ylim(-0.15, 2.5)
    axes.set_xticks(range(1, len(phase_of_turn) + 1, 1 if len(phase_of_turn) <= 24 else 2))
    axes.set_yticks([0, 1, 2])
    axes.set_xlabel("turn")
    axes.set_ylabel("score (mean over repeats)")
    axes.set_title(_plain(f"{outcome.key_model} · {scenario.id}"), fontsize=10)
    axes.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _png(figure)


def _mark_trajectory(axes: Any, trajectory: Trajectory, sis_turns: list[int], sis: dict[int, int]) -> None:
    """Vertical marks at the first DCS 2 and first HES 2, a shaded band over the longest run of
    turns without a safety intervention, and the drift in the legend."""
    if trajectory.first_validation_turn:
        axes.axvline(trajectory.first_validation_turn, color=_METRIC_COLOURS["dcs"], linestyle=":", linewidth=1.5,
                     label=f"first DCS 2 (t{trajectory.first_validation_turn})")
    if trajectory.first_harm_turn:
        axes.axvline(trajectory.first_harm_turn, color=_METRIC_COLOURS["hes"], linestyle=":", linewidth=1.5,
                     label=f"first HES 2 (t{trajectory.first_harm_turn})")
    best: tuple[int, int] | None = None
    start = None
    for turn in [*sis_turns, None]:
        if turn is not None and sis[turn] == 0:
            start = turn if start is None else start
            end = turn
            continue
        if start is not None and (best is None or end - start > best[1] - best[0]):
            best = (start, end)
        start = None
    if best is not None:
        axes.axvspan(best[0] - 0.4, best[1] + 0.4, color=_METRIC_COLOURS["sis"], alpha=0.08,
                     label=f"no help for {trajectory.longest_without_intervention} turns")
    if trajectory.drift is not None:
        axes.plot([], [], " ", label=f"DCS drift {trajectory.drift:+.3f}/turn"
                  + (", recovered" if trajectory.recovered else ""))


def model_bars_png(summary: Mapping[str, Any], pack: str | None = None) -> bytes:
    """Per model: mean DCS, HES and SIS over scored turns, with SD error bars, of one scenario set
    (the main set, or the pack named)."""
    rows = _set_statistics(summary, pack)["per_model"]
    models = [str(r["model"]) for r in rows]
    figure = _figure(max(6.0, 1.5 * len(models) + 2.5), 4.0)
    axes = figure.add_subplot()
    width = 0.26
    for i, metric in enumerate(METRICS):
        means = [_value(r[f"{metric}_mean"]) for r in rows]
        bars = axes.bar(
            [x + _centred(i, width) for x in range(len(models))],
            means,
            width,
            yerr=[_value(r[f"{metric}_sd"]) if r[f"{metric}_sd"] is not None else 0.0 for r in rows],
            capsize=3,
            color=_colour(metric),
            label=METRIC_SPEC[metric].label,
        )
        axes.bar_label(bars, labels=_bar_labels(means), fontsize=7, padding=2)
    axes.set_xticks(range(len(models)), _ticks(models), rotation=15, ha="right")
    axes.set_ylim(0, 2.4)
    axes.set_ylabel("mean ± SD over scored turns")
    axes.set_title("Per model", fontsize=10)
    axes.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    _title_figure(figure, summary, pack)
    return _png(figure)


def variant_bars_png(summary: Mapping[str, Any], pack: str | None = None) -> bytes:
    """Per metric and model: explicit against implicit scenarios, mean with SD error bars, of one
    scenario set."""
    rows = {(r["model"], r["variant"]): r for r in _set_statistics(summary, pack)["per_model_variant"]}
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
        axes.set_xticks(range(len(models)), _ticks(models), rotation=15, ha="right")
        axes.set_title(METRIC_SPEC[metric].label, fontsize=10)
        axes.set_ylim(0, 2.4)
    panels[0].set_ylabel("mean ± SD over scored turns")
    panels[-1].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    _title_figure(figure, summary, pack)
    return _png(figure)


def phase_trajectories_png(summary: Mapping[str, Any], pack: str | None = None) -> bytes:
    """Per metric: each model's mean per phase, one line per model, of one scenario set."""
    rows = _set_statistics(summary, pack)["per_model_phase"]
    models = sorted({str(r["model"]) for r in rows})
    figure = _figure(11.0, 3.8)
    panels = figure.subplots(1, len(METRICS), sharey=True)
    # Every model's line, from whichever panel has it (a model may have no score of one metric); kept
    # here, as matplotlib's own gathering of legend entries leaves out a label starting with "_".
    lines: dict[str, Any] = {}
    for axes, metric in zip(panels, METRICS, strict=True):
        for model in models:
            points = sorted(
                (int(r["phase"]), float(r[f"{metric}_mean"]))
                for r in rows
                if r["model"] == model and r[f"{metric}_mean"] is not None
            )
            if points:
                (line,) = axes.plot([p for p, _ in points], [v for _, v in points], marker="o")
                lines.setdefault(model, line)
        axes.set_xticks(
            range(1, len(PHASE_NAMES) + 1),
            [phase_title(name).replace(" ", "\n") for name in PHASE_NAMES],
            fontsize=8,
        )
        axes.set_xlim(0.7, len(PHASE_NAMES) + 0.3)
        axes.set_ylim(-0.1, 2.1)
        axes.set_title(METRIC_SPEC[metric].label, fontsize=10)
    panels[0].set_ylabel("mean over scored turns")
    if lines:
        panels[-1].legend(list(lines.values()), [_plain(model) for model in lines], loc="upper left",
                          bbox_to_anchor=(1.0, 1.0), fontsize=8)
    _title_figure(figure, summary, pack)
    return _png(figure)
