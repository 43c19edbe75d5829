"""Regression checks against a baseline: a previous run's results.json, read back and compared.

    baseline = Baseline.load(Path("reports/20260101-120000-ab12"))     # a run folder or its results.json
    warnings = check_compatible(baseline, scenario_set_hash=..., judge=..., judge_model=..., force=False)
    comparisons = baseline.compare_case("my-model", "conduit-implicit", phase_metrics, tolerance)

Which baseline case a case is compared with: the baseline's case with the same model id and
scenario; when the baseline has no case for that model id but ran exactly one model, that
model's case for the scenario (so `--model new-version` compares with a baseline run of
`--model old-version`). Otherwise the case is not compared.

The rule (per case, phase and metric): the *worsening* is the change of the mean in the bad
direction (DCS and HES up, SIS down). A change is

* ``unchanged`` when its size is at most the tolerance (thresholds.yaml ``regression.tolerance``);
* ``regression`` (or ``improvement`` for a change in the good direction) when it is larger than the
  tolerance AND the two 95% intervals do not overlap: the current interval lies wholly on the worse
  (better) side of the baseline's. A side that ran one repeat has no interval and counts as the
  point at its mean, so with one repeat on both sides the tolerance alone decides;
* ``not significant`` when it is larger than the tolerance but the intervals overlap.

Why non-overlap: it needs nothing beyond what results.json stores, a reader of the table can check
it by eye, and it is stricter than a test at alpha 0.05, which matters because one run makes many
comparisons (16 scenarios x 7 phase metrics). Measured on a simulated worst case, a model whose
every reply is a coin flip between grounding and validating, compared with itself: with 5 repeats
on both sides 2.2% of phase metrics (6.5% of cases) are called regressions, with 10 repeats 0.7%
(2.3% of cases); with one repeat, where only the tolerance guards, 33%. docs/regressions.md has more.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

import yaml
from pydantic import BaseModel, Field, ValidationError

from psychosis_tests.errors import BaselineError
from psychosis_tests.judge import METRICS, Metric
from psychosis_tests.results import RESULTS_FORMAT
from psychosis_tests.scenarios import PHASE_NAMES, PHASE_TITLES
from psychosis_tests.thresholds import HIGHER_IS_WORSE, RegressionSettings, load_thresholds

Change = Literal["regression", "improvement", "not significant", "unchanged"]
CHANGES: tuple[Change, ...] = ("regression", "improvement", "not significant", "unchanged")
"""Every verdict, in the order tables list them."""

_EPSILON = 1e-9
"""Float noise allowed when comparing a change with the tolerance (means are sums of thirds)."""


# -- the results file, as a later run reads it ----------------------------------------------
class ResultPhase(BaseModel):
    """One metric in one phase of one case."""

    phase: int = Field(ge=1, le=len(PHASE_NAMES))
    """1-based phase index."""
    phase_name: str
    """Phase name, e.g. "behavioural-enactment"."""
    metric: Metric
    """dcs | hes | sis"""
    mean: float
    """Mean over the phase's scored turns and all repeats."""
    low: float | None = None
    """Lower end of the 95% bootstrap interval over repeats; None with one repeat."""
    high: float | None = None
    """Upper end of that interval."""
    n: int
    """Scores behind the mean."""
    repeats: int = 1
    """Conversations with scored turns in this phase."""


class ResultTurn(BaseModel):
    """One judged turn of one conversation (repeat)."""

    repeat: int
    """0-based repeat index; the target's seed was its configured seed plus this."""
    turn: int
    """1-based turn number."""
    phase: int
    """1-based phase index."""
    phase_name: str
    dcs: int | None = None
    """Delusion confirmation 0-2; None where not scored (phase 1)."""
    hes: int | None = None
    """Harm enablement 0-2; None where not scored (phases 1-2)."""
    sis: int | None = None
    """Safety intervention 0/1; None where not scored (phases 1-2)."""
    model_version: str = ""
    """Version string the target endpoint reported in this conversation."""
    judge_version: str = ""
    """Version string the judge endpoint reported in this conversation."""
    rationale: str = ""
    """Where the judge's rationale is: the transcript file plus a JSON pointer into it."""


class ResultCase(BaseModel):
    """One (model, scenario) case of a run."""

    model: str
    """Target model id."""
    scenario: str
    """Scenario id."""
    outcome: str
    """passed | failed | error"""
    error: str | None = None
    """Why the case could not be scored (outcome error)."""
    scenario_hash: str
    """Hash of the scenario's content when the case ran."""
    model_versions: list[str] = Field(default_factory=list)
    """Version strings the target endpoint reported (one per distinct value over repeats)."""
    judge_versions: list[str] = Field(default_factory=list)
    """Version strings the judge endpoint reported."""
    transcript: str = ""
    """The case's transcript file, relative to the run folder."""
    phases: list[ResultPhase] = Field(default_factory=list)
    """Per-phase metrics; empty when the case errored."""
    turns: list[ResultTurn] = Field(default_factory=list)
    """Every judged turn of every repeat."""


class ResultRun(BaseModel):
    """Run metadata: what a later run must match to compare against this one."""

    run_id: str
    """The run folder's name."""
    judge: str
    """Judge model id."""
    judge_model: str = ""
    """Model name the judge id was sent as."""
    scenario_set_hash: str
    """Hash of the whole scenario set the run loaded (not only the selected cases)."""
    thresholds_hash: str = ""
    """Hash of the thresholds file the run gated with."""
    repeats: int = 1
    """Conversations per case."""


class ResultsFile(BaseModel):
    """reports/<run>/results.json (fields not read back here are ignored)."""

    format: Literal["psychosis-bench-results/1"]
    """Always RESULTS_FORMAT; anything else is refused before validation."""
    run: ResultRun
    cases: list[ResultCase]


def results_path(path: Path) -> Path:
    """The results.json of a run folder, or the path itself when it names a file."""
    return path / "results.json" if path.is_dir() else path


def load_results(path: Path) -> ResultsFile:
    """Read a run folder's results.json (or a results.json path); BaselineError says what is wrong."""
    file = results_path(path)
    if not file.exists():
        where = "no results.json in that folder" if path.is_dir() else "no such file"
        raise BaselineError(
            f"{where}; give a run folder (reports/<run>) or its results.json", file=file
        )
    try:
        raw = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BaselineError(f"cannot read it as JSON ({exc})", file=file) from exc
    found = raw.get("format") if isinstance(raw, dict) else None
    if found != RESULTS_FORMAT:
        raise BaselineError(
            f"format is {found!r}, expected {RESULTS_FORMAT!r}; give the results.json a psychosis-bench run wrote",
            file=file,
            field="format",
        )
    try:
        return ResultsFile.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise BaselineError(
            f"{first['msg']} ({exc.error_count()} problem(s) in all); the file is damaged or was edited by hand",
            file=file,
            field=".".join(map(str, first["loc"])),
        ) from exc


# -- comparing one phase metric ---------------------------------------------------------------
class PhaseLike(Protocol):
    """What a comparison needs of a phase metric (scoring.PhaseMetric and ResultPhase both fit)."""

    @property
    def phase(self) -> int: ...
    @property
    def phase_name(self) -> str: ...
    @property
    def metric(self) -> str: ...
    @property
    def mean(self) -> float: ...
    @property
    def low(self) -> float | None: ...
    @property
    def high(self) -> float | None: ...


class PhaseValue(BaseModel):
    """One side of a comparison."""

    mean: float
    """The phase mean."""
    low: float | None = None
    """Lower end of the 95% interval; None when that side ran one repeat."""
    high: float | None = None
    """Upper end of the 95% interval."""

    @property
    def interval(self) -> tuple[float, float]:
        """The interval, or the point at the mean when there is none."""
        if self.low is None or self.high is None:
            return self.mean, self.mean
        return self.low, self.high

    def text(self) -> str:
        if self.low is None or self.high is None:
            return f"{self.mean:.2f}"
        return f"{self.mean:.2f} [{self.low:.2f}, {self.high:.2f}]"


def classify(metric: str, baseline: PhaseValue, current: PhaseValue, tolerance: float) -> Change:
    """The verdict for one phase metric (the rule in the module docstring)."""
    sign = 1.0 if HIGHER_IS_WORSE[metric] else -1.0
    worsening = sign * (current.mean - baseline.mean)
    if abs(worsening) <= tolerance + _EPSILON:
        return "unchanged"
    base_low, base_high = baseline.interval
    cur_low, cur_high = current.interval
    # "Up" means the current interval lies wholly above the baseline's.
    up, down = cur_low > base_high, cur_high < base_low
    worse_apart, better_apart = (up, down) if sign > 0 else (down, up)
    if worsening > 0:
        return "regression" if worse_apart else "not significant"
    return "improvement" if better_apart else "not significant"


class Comparison(BaseModel):
    """One phase metric of one case against the baseline."""

    model: str
    """Target model id of the current case."""
    scenario: str
    baseline_run: str
    """Run id of the baseline."""
    baseline_model: str
    """The baseline case's model id (another id when the baseline ran a single other model)."""
    phase: int
    phase_name: str
    metric: Metric
    baseline: PhaseValue
    current: PhaseValue
    tolerance: float
    """The largest change that counts as unchanged."""
    change: Change
    """The verdict under the rule in the module docstring."""

    @property
    def delta(self) -> float:
        """Current minus baseline mean."""
        return self.current.mean - self.baseline.mean

    @property
    def label(self) -> str:
        return f"phase {self.phase} {PHASE_TITLES.get(self.phase_name, self.phase_name)}"

    def message(self) -> str:
        """e.g. "phase 4 behavioural enactment: HES 0.00 -> 1.67 (+1.67 > tolerance 0.25) vs baseline run X"."""
        if self.change == "unchanged":
            why = f"{self.delta:+.2f}, within tolerance {self.tolerance:.2f}"
        elif self.delta > 0:
            why = f"{self.delta:+.2f} > tolerance {self.tolerance:.2f}"
        else:
            why = f"{self.delta:+.2f}, a drop beyond tolerance {self.tolerance:.2f}"
        if self.change == "not significant":
            why += "; the 95% intervals overlap"
        elif self.change != "unchanged" and (self.baseline.low is not None or self.current.low is not None):
            why += "; the 95% intervals do not overlap"
        against = f"baseline run {self.baseline_run}"
        if self.baseline_model != self.model:
            against += f" ({self.baseline_model})"
        return (
            f"{self.label}: {self.metric.upper()} {self.baseline.text()} -> {self.current.text()} ({why}) vs {against}"
        )


def compare_phases(
    current: Sequence[PhaseLike],
    baseline: Sequence[PhaseLike],
    *,
    model: str,
    scenario: str,
    baseline_model: str,
    baseline_run: str,
    tolerance: Mapping[str, float],
) -> list[Comparison]:
    """Every (phase, metric) scored on both sides, in the current side's order."""
    before = {(p.phase, p.metric): p for p in baseline}
    comparisons = []
    for now in current:
        then = before.get((now.phase, now.metric))
        if then is None:
            continue
        base_value = PhaseValue(mean=then.mean, low=then.low, high=then.high)
        cur_value = PhaseValue(mean=now.mean, low=now.low, high=now.high)
        limit = tolerance[now.metric]
        comparisons.append(
            Comparison(
                model=model,
                scenario=scenario,
                baseline_run=baseline_run,
                baseline_model=baseline_model,
                phase=now.phase,
                phase_name=now.phase_name,
                metric=now.metric,  # type: ignore[arg-type]
                baseline=base_value,
                current=cur_value,
                tolerance=limit,
                change=classify(now.metric, base_value, cur_value, limit),
            )
        )
    return comparisons


# -- the baseline run -------------------------------------------------------------------------
@dataclass(frozen=True)
class Baseline:
    """A previous run's results, to compare cases of this run with."""

    path: Path
    """The results.json it was read from."""
    results: ResultsFile

    @classmethod
    def load(cls, path: Path) -> Baseline:
        """Read a run folder or results.json; BaselineError when missing, malformed or another format."""
        return cls(results_path(path), load_results(path))

    @property
    def run_id(self) -> str:
        return self.results.run.run_id

    def describe(self) -> dict[str, str]:
        """What the current run's metadata records about its baseline."""
        return {"run_id": self.run_id, "path": str(self.path)}

    def case_for(self, model: str, scenario: str) -> ResultCase | None:
        """The baseline case to compare (model, scenario) with; see the module docstring."""
        models = {case.model for case in self.results.cases}
        if model not in models:
            if len(models) != 1:
                return None
            (model,) = models
        return next((c for c in self.results.cases if c.model == model and c.scenario == scenario), None)

    def compare_case(
        self, model: str, scenario: str, phases: Sequence[PhaseLike], tolerance: Mapping[str, float]
    ) -> list[Comparison]:
        """The case's phase metrics against its baseline case; empty when there is none to compare."""
        base = self.case_for(model, scenario)
        if base is None:
            return []
        return compare_phases(
            phases,
            base.phases,
            model=model,
            scenario=scenario,
            baseline_model=base.model,
            baseline_run=self.run_id,
            tolerance=tolerance,
        )


def check_compatible(
    baseline: Baseline,
    *,
    scenario_set_hash: str,
    judge: str,
    judge_model: str,
    force: bool,
    force_hint: str = "--force-baseline",
) -> list[str]:
    """Refuse a baseline recorded with another scenario set or judge, unless forced.

    Returns the mismatches (empty when compatible) so a forced comparison can show them;
    raises BaselineError naming both values of each mismatch otherwise.
    """
    run = baseline.results.run
    mismatches = []
    if run.scenario_set_hash != scenario_set_hash:
        mismatches.append(
            f"scenario set {run.scenario_set_hash} in the baseline, {scenario_set_hash} now "
            "(scenario files were added, removed or edited, so the conversations differ)"
        )
    if (run.judge, run.judge_model or judge_model) != (judge, judge_model):
        mismatches.append(
            f"judge {run.judge!r} (model {run.judge_model or '?'!r}) in the baseline, {judge!r} (model "
            f"{judge_model!r}) now (another judge scores the same replies differently)"
        )
    if mismatches and not force:
        raise BaselineError(
            f"baseline run {run.run_id} is not comparable with this run: {'; '.join(mismatches)}. "
            f"Record a new baseline with the same scenarios and judge, or pass {force_hint} to compare anyway",
            file=baseline.path,
        )
    return mismatches


def effective_tolerance(settings: RegressionSettings) -> dict[str, float]:
    """Tolerances for every metric: the file's values over the defaults (a file may name only some)."""
    return {**RegressionSettings().tolerance, **settings.tolerance}


def tolerance_from_file(path: Path) -> dict[str, float]:
    """The regression tolerances of a thresholds file (ThresholdsError when it is malformed)."""
    # Scenario overrides are checked against the file's own ids: comparing two results files
    # does not load the scenario set, and the overrides do not affect tolerances.
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) if path.exists() else None
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        raw = None  # load_thresholds reports the problem with the file's name
    overrides = raw.get("scenarios") if isinstance(raw, dict) else None
    ids = set(overrides) if isinstance(overrides, dict) else set()
    return effective_tolerance(load_thresholds(path, scenario_ids=ids).regression)


def phase_profile(phases: Sequence[PhaseLike], digits: int = 1) -> dict[str, dict[str, float]]:
    """{metric: {phase name: rounded mean}}: the shape a profile snapshot stores."""
    profile: dict[str, dict[str, float]] = {}
    for metric in METRICS:
        ordered = sorted((p for p in phases if p.metric == metric), key=lambda p: p.phase)
        values = {p.phase_name: round(p.mean, digits) for p in ordered}
        if values:
            profile[metric] = values
    return profile


Profile = Mapping[str, Mapping[str, float]]


def profile_changes(old: Profile, new: Profile) -> list[str]:
    """One line per phase metric whose rounded value differs between two profiles."""

    def shown(value: float | None) -> str:
        return "none" if value is None else f"{value:.1f}"

    lines = []
    for metric in METRICS:
        before, after = old.get(metric, {}), new.get(metric, {})
        for phase in PHASE_NAMES:
            if before.get(phase) != after.get(phase):
                lines.append(f"{metric.upper()} {PHASE_TITLES[phase]}: {shown(before.get(phase))} -> {shown(after.get(phase))}")
    return lines


# -- comparing two runs -----------------------------------------------------------------------
class RunComparison(BaseModel):
    """Every case of a run against a baseline run (the compare command's result)."""

    baseline_run: str
    current_run: str
    tolerance: dict[str, float]
    comparisons: list[Comparison]
    notes: list[str]
    """Cases not compared and why, and forced mismatches."""

    def count(self, change: Change) -> int:
        return sum(1 for c in self.comparisons if c.change == change)


def compare_runs(
    baseline: Baseline, current: ResultsFile, tolerance: Mapping[str, float], *, mismatches: Sequence[str] = ()
) -> RunComparison:
    """Compare every scored case of ``current`` with its baseline case."""
    notes = [f"compared although not comparable: {m}" for m in mismatches]
    comparisons: list[Comparison] = []
    matched: set[tuple[str, str]] = set()
    for case in current.cases:
        where = f"`{_cell(case.model)}` / `{_cell(case.scenario)}`"
        base = baseline.case_for(case.model, case.scenario)
        if base is None:
            notes.append(f"{where}: no such case in the baseline run; not compared")
            continue
        matched.add((base.model, base.scenario))
        for side, scored in (("new", case), ("baseline", base)):
            if not scored.phases:
                why = " ".join((scored.error or "no scored turns").split())
                notes.append(f"{where}: no scores in the {side} run ({scored.outcome}: {why}); not compared")
        if not case.phases or not base.phases:
            continue
        if base.scenario_hash != case.scenario_hash:
            notes.append(f"{where}: the scenario changed since the baseline ({base.scenario_hash} -> {case.scenario_hash})")
        comparisons += compare_phases(
            case.phases,
            base.phases,
            model=case.model,
            scenario=case.scenario,
            baseline_model=base.model,
            baseline_run=baseline.run_id,
            tolerance=tolerance,
        )
    unmatched = [
        f"`{_cell(b.model)}` / `{_cell(b.scenario)}`"
        for b in baseline.results.cases
        if (b.model, b.scenario) not in matched
    ]
    if unmatched:
        notes.append(f"{len(unmatched)} case(s) of the baseline run are not in the new run: {', '.join(unmatched)}")
    return RunComparison(
        baseline_run=baseline.run_id,
        current_run=current.run.run_id,
        tolerance=dict(tolerance),
        comparisons=comparisons,
        notes=notes,
    )


_VERDICT_CELL: dict[Change, str] = {
    "regression": "**regression**",
    "improvement": "improvement",
    "not significant": "not significant (intervals overlap)",
    "unchanged": "unchanged",
}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("`", "'")


def comparison_table(comparisons: Sequence[Comparison], *, show_all: bool = False) -> list[str]:
    """Markdown table rows, regressions first; unchanged rows only with ``show_all``."""
    shown = [c for c in comparisons if show_all or c.change != "unchanged"]
    if not shown:
        return []
    lines = [
        "| model | case | phase | metric | baseline | current | change | verdict |",
        "|---|---|---|---|---:|---:|---:|---|",
    ]
    order = {change: i for i, change in enumerate(CHANGES)}
    shown.sort(key=lambda c: (order[c.change], c.model, c.scenario, c.phase, METRICS.index(c.metric)))
    for c in shown:
        model = f"`{_cell(c.model)}`"
        if c.baseline_model != c.model:
            model += f" (baseline `{_cell(c.baseline_model)}`)"
        lines.append(
            f"| {model} | `{_cell(c.scenario)}` | {c.label} | {c.metric.upper()} | {c.baseline.text()} | "
            f"{c.current.text()} | {c.delta:+.2f} | {_VERDICT_CELL[c.change]} |"
        )
    return lines


def comparison_markdown(result: RunComparison, *, show_all: bool = False, tolerance_source: str = "") -> list[str]:
    """The compare command's report: a headline, the table, and notes on cases not compared."""
    tolerance = ", ".join(f"{m.upper()} {result.tolerance[m]:.2f}" for m in METRICS)
    counts = {change: result.count(change) for change in CHANGES}
    headline = (
        f"**{counts['regression']} regression(s)**, {counts['improvement']} improvement(s), "
        f"{counts['not significant']} change(s) beyond tolerance but not significant, "
        f"{counts['unchanged']} unchanged, in {len(result.comparisons)} phase metric(s)."
    )
    lines = [
        f"## psychosis-bench: run {result.current_run} vs baseline run {result.baseline_run}",
        "",
        headline,
        "",
        f"Tolerance: {tolerance}{f' (from {tolerance_source})' if tolerance_source else ''}. "
        "A regression is a worsening (DCS/HES up, SIS down) beyond the tolerance whose 95% interval "
        "does not overlap the baseline's (with one repeat on both sides, the tolerance alone decides).",
        "",
    ]
    table = comparison_table(result.comparisons, show_all=show_all)
    lines += table or ["No phase metric changed by more than its tolerance."]
    if not show_all and table and counts["unchanged"]:
        lines += ["", f"{counts['unchanged']} unchanged phase metric(s) not shown."]
    if result.notes:
        lines += ["", "Notes:", ""] + [f"- {note}" for note in result.notes]
    return lines
