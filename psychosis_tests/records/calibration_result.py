"""calibration.json: what `calibrate` measured about a judge, and finding it again for a benchmark run.

`calibrate` writes one run folder `<report-dir>/<run-id>-calibration/` with calibration.json
(this schema), calibration.md and the judge's per-item answers. A benchmark run looks in its
report folder for the newest result with its own judge fingerprint on its own calibration set
(calibration/, or its --calibration): a measurement on other items (--items, a pack's set) says
nothing about the set that gates the run, so it is not taken for it.

Agreement is reported per metric and per kind of scenario: DCS, HES and SIS over the items on
delusion scenarios, OCC and SIS over the items on control scenarios (`GATED`, the judge's answers
that a benchmark's gate reads). SIS is kept apart on controls because there it measures
over-referral, not missed help, and pooling would let either hide the other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from psychosis_tests.common.errors import CalibrationError
from psychosis_tests.inputs.calibration import set_hash
from psychosis_tests.inputs.judge_identity import JudgeFingerprint
from psychosis_tests.inputs.method import METRIC_SPEC, ScenarioKind, gated_metrics

CALIBRATION_FORMAT = "psychosis-bench-calibration/1"
CALIBRATION_FILE = "calibration.json"

GATED: tuple[tuple[str, ScenarioKind], ...] = tuple(
    (metric, kind) for kind in ("delusion", "control") for metric in gated_metrics(kind)
)
"""(metric, kind) rows the calibration gate checks, in report order: the metrics the benchmark's
gate reads on each kind of scenario (`inputs.method.SCOPES`), DCS, HES and SIS on delusion
scenarios and SIS and OCC on controls. Both SIS rows use `calibration.min_kappa.sis`. DCS and HES
on control items, when an item labels them, are reported but not gated, as the benchmark records
but does not gate them on controls."""


def row_title(metric: str, kind: str) -> str:
    """How reports name a (metric, kind) row: DCS, SIS, OCC, SIS (controls)."""
    return metric.upper() if kind == "delusion" or _control_only(metric) else f"{metric.upper()} (controls)"


def row_key(metric: str, kind: str) -> str:
    """A plain name for a (metric, kind) row, for test ids: dcs, sis, occ, sis-controls."""
    return metric if kind == "delusion" or _control_only(metric) else f"{metric}-controls"


def _control_only(metric: str) -> bool:
    """Asked on control scenarios only (OCC): its rows need no "(controls)"."""
    return "delusion" not in METRIC_SPEC[metric].first_phase


class MetricAgreement(BaseModel):
    """Judge against the gold labels on one metric (over one group of items)."""

    metric: str
    kind: ScenarioKind = "delusion"
    """Whether the items are on delusion or on control scenarios (OCC: always control)."""
    n: int
    """Items with both a gold label and a judge score on this metric."""
    kappa: float | None
    """Cohen's kappa: quadratic-weighted for DCS and HES, unweighted for SIS and OCC; None when
    undefined (gold all one level, or no items)."""
    kappa_low: float | None = None
    """Lower end of the 95% bootstrap interval (percentile, `kappa_resamples` resamples, fixed seed)."""
    kappa_high: float | None = None
    """Upper end of that interval."""
    kappa_resamples: int = 0
    """The bootstrap's resamples (0 where none was drawn: fewer than two items, breakdowns)."""
    kappa_undefined: int = 0
    """Of those, the resamples on which kappa was undefined (gold all one level: a rare level's
    items all left out), left out of the interval."""
    weighting: Literal["quadratic", "none"]
    exact_agreement: float
    """Share of items where the judge gave exactly the gold label."""
    alpha: float | None = None
    """Krippendorff's alpha of judge and gold (ordinal for DCS/HES, nominal for SIS/OCC)."""
    levels: list[int] = Field(default_factory=list)
    """The metric's levels, the order of the confusion matrix's rows and columns."""
    confusion: list[list[int]] = Field(default_factory=list)
    """confusion[gold][judge]: item counts (empty in breakdowns)."""
    minimum: float | None = None
    """The gate's minimum kappa for this metric (absent in breakdowns)."""
    passed: bool | None = None
    """kappa >= minimum (absent in breakdowns and in rows the gate does not check)."""

    @property
    def title(self) -> str:
        return row_title(self.metric, self.kind)

    @property
    def key(self) -> str:
        return row_key(self.metric, self.kind)


class GroupAgreement(BaseModel):
    """One metric's agreement within one archetype or variant."""

    by: Literal["archetype", "variant", "phase"]
    group: str
    agreement: MetricAgreement


class Disagreement(BaseModel):
    """One item where the judge and the gold labels differ, with the judge's words."""

    item_id: str
    scenario: str
    kind: ScenarioKind = "delusion"
    """The scenario's kind."""
    turn: int
    distance: int
    """Sum over metrics of |judge - gold|."""
    gold: dict[str, int]
    judged: dict[str, int]
    rationale: str
    """The judge's rationale (untrusted text)."""
    reason: str
    """Why the gold labels are what they are."""
    reply: str
    """The scored reply."""


class RaterAgreement(BaseModel):
    """Agreement among several raters (humans, or one judge asked several times) on one metric."""

    metric: str
    kind: ScenarioKind = "delusion"
    raters: int
    """Raters (or repeats) compared."""
    items: int
    """Items with at least two of them."""
    alpha: float | None
    """Krippendorff's alpha (ordinal for DCS/HES, nominal for SIS/OCC); None when undefined."""
    disagreeing_items: int = 0
    """Items on which they did not all give the same value."""
    kappa: float | None = None
    """With exactly two ratings per item: Cohen's kappa of the first against the second (weighted
    as for the judge; for human raters, in label order: the author, then the second rater); else None."""


class RaterKappa(BaseModel):
    """The judge against one human rater's own labels on one metric."""

    rater: str
    metric: str
    kind: ScenarioKind = "delusion"
    n: int
    """Items this rater labelled on this metric (and the judge scored)."""
    kappa: float | None
    exact_agreement: float


class Escalation(BaseModel):
    """A cascade on the calibration set: how many items its first judge passed on, and why."""

    to: str
    """The escalation judge's id (`A+B+C` for a panel)."""
    escalated: int
    """Judged items (first answer) the cascade escalated."""
    judged: int
    """Judged items."""
    rate: float
    """escalated / judged: the share of judge calls the cascade still makes (0 with no item judged)."""
    below_threshold: dict[str, int] = Field(default_factory=dict)
    """Per metric, the escalated items on which that metric's probability was below its threshold."""


class ProbabilityReliability(BaseModel):
    """A judge that gives each score a probability (the trained judge): on one row, whether scores
    given with probability p were right about p of the time (`analysis.reliability`)."""

    metric: str
    kind: ScenarioKind = "delusion"
    n: int
    mean_probability: float
    """Mean probability of the level the judge chose."""
    share_right: float
    """Share of those levels equal to the gold label."""
    calibration_error: float
    """Gap between probability and share right within ten bins of probability, weighted by the
    bins' sizes: 0 is perfectly reliable."""

    @property
    def title(self) -> str:
        return row_title(self.metric, self.kind)


class CalibrationResult(BaseModel):
    """<calibration run>/calibration.json."""

    format: Literal["psychosis-bench-calibration/1"] = CALIBRATION_FORMAT
    run_id: str
    finished_at: str
    """ISO time the result was written."""
    calibration_path: str
    """The calibration set (folder or file) that was scored, as an absolute path; with --items, the
    first item file as given (`.` for several)."""
    item_files: list[str] = Field(default_factory=list)
    """--items: the labelled judge-item files measured instead of a calibration set (empty for a
    calibration set). Such a result never stands for a benchmark run's calibration."""
    set_sha256: str | None = None
    """The calibration set's contents when it was scored (`inputs.calibration.set_hash`); a run
    takes the result only while its set still has them. None with --items, and in results written
    before the suite recorded it (a run does not take those)."""
    gate_file: str | None = None
    """The thresholds file whose `calibration.min_kappa` gated the result (each row's `minimum`)."""
    items: int
    """Items in the set."""
    control_items: int = 0
    """Of those, items on control scenarios (judged with OCC)."""
    judged_items: int
    """Items every repeat of which got a valid verdict."""
    errors: list[str] = Field(default_factory=list)
    """Items the judge could not score, with the cause; any error fails the gate."""
    judge: str
    """The judge id (`A+B+C` for a panel)."""
    fingerprint: JudgeFingerprint
    repeats: int = 1
    """Times each item was judged (--judge-repeats); agreement uses the first answer."""
    metrics: list[MetricAgreement]
    """The gated rows (GATED), each with its minimum and verdict."""
    ungated: list[MetricAgreement] = Field(default_factory=list)
    """Labelled but not gated: DCS and HES on control items that carry them."""
    breakdown: list[GroupAgreement] = Field(default_factory=list)
    worst: list[Disagreement] = Field(default_factory=list)
    """The 10 largest disagreements on delusion items."""
    worst_controls: list[Disagreement] = Field(default_factory=list)
    """The 10 largest disagreements on control items (ranked apart: their distance is at most 2)."""
    inter_rater: list[RaterAgreement] = Field(default_factory=list)
    """Human raters among themselves, on items labelled by several."""
    per_rater: list[RaterKappa] = Field(default_factory=list)
    """The judge against each rater separately (with several raters)."""
    self_consistency: list[RaterAgreement] = Field(default_factory=list)
    """The judge against itself over repeats (--judge-repeats N > 1)."""
    panel_agreement: list[RaterAgreement] = Field(default_factory=list)
    """The panel's judges among themselves (with several --judge)."""
    judge_failures: dict[str, int] = Field(default_factory=dict)
    """Per panel judge, answers it failed on while the panel still gave a verdict (one per item and
    repeat: with --judge-repeats N an item counts up to N times)."""
    escalation: Escalation | None = None
    """A cascade's escalations; None for any other judge."""
    reliability: list[ProbabilityReliability] = Field(default_factory=list)
    """Per row, the judge's probabilities against how often its scores were right (first answers);
    empty unless every verdict carried probabilities (the trained judge alone does)."""
    passed: bool
    """Every gated row's kappa at or above its minimum and no item in error."""

    def gated_by(self, min_kappa: dict[str, float], gate_file: Path | str) -> CalibrationResult:
        """This result judged by another gate's minimums (a benchmark run's own thresholds file):
        each gated row's minimum and verdict, and the overall verdict, recomputed from its kappas."""
        rows = [m.model_copy(update={"minimum": min_kappa[m.metric], "passed": m.kappa is not None and m.kappa >= min_kappa[m.metric]})
                for m in self.metrics]  # fmt: skip
        passed = not self.errors and all(m.passed for m in rows)
        return self.model_copy(update={"metrics": rows, "passed": passed, "gate_file": str(gate_file)})

    def summary_line(self) -> str:
        """One line for a benchmark run's header and summary."""
        kappas = ", ".join(
            f"{m.title} kappa {m.kappa:.2f}" if m.kappa is not None else f"{m.title} kappa n/a"
            for m in self.metrics
        )
        if not any(m.metric == "occ" for m in self.metrics):
            kappas += ", OCC not measured (calibrated before the set had control items)"
        verdict = "passes" if self.passed else "FAILS"
        escalated = f"; escalated {self.escalation.rate:.1%} to {self.escalation.to}" if self.escalation else ""
        return (
            f"judge calibrated: {verdict} the calibration gate on calibration set {self.calibration_path} ({kappas}; "
            f"{self.judged_items} of {self.items} items{escalated}; run {self.run_id})"
        )


SHIPPED_CALIBRATION = Path(__file__).resolve().parents[1] / "judge_model" / CALIBRATION_FILE
"""The shipped trained judge's own calibration result (train-judge writes it next to the model
file), so a fresh clone's first run can say how far its default judge is to be trusted."""

SHIPPED_SET = Path(__file__).resolve().parents[2] / "calibration"
"""The set the shipped result measured: the checkout's calibration/, on which train-judge gates the
shipped model (the result's own calibration_path is where it lay on the machine that trained it)."""


def find_calibration(
    report_dir: Path,
    fingerprint_hash: str,
    *,
    calibration_set: Path | None = None,
    shipped: Path | None = SHIPPED_CALIBRATION,
) -> CalibrationResult | None:
    """The newest calibration result for this judge fingerprint in `report_dir` or, unless
    `shipped` is None, the shipped one; None when there is none. Unreadable files are skipped: a
    broken old result must not stop a benchmark run.

    `calibration_set`: the run's calibration set; only a result that measured that set counts (the
    shipped one when it is SHIPPED_SET, never a result on --items), so a measurement on other items
    never gives a run its gate status. None takes a result on any set, for a reader that wants any
    measurement of the judge rather than a status (--estimate's escalation rate, train-judge)."""
    wanted = calibration_set.resolve() if calibration_set is not None else None
    contents = _contents(calibration_set) if calibration_set is not None else None
    found: list[CalibrationResult] = []
    paths = list(report_dir.glob(f"*/{CALIBRATION_FILE}")) if report_dir.is_dir() else []
    for path in [*paths, *([shipped] if shipped is not None and shipped.is_file() else [])]:
        try:
            result = CalibrationResult.model_validate_json(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, ValidationError):
            continue
        if result.fingerprint.hash != fingerprint_hash:
            continue
        if wanted is not None:
            measured = SHIPPED_SET if path == shipped else Path(result.calibration_path)
            if result.item_files or not measured.is_absolute() or measured.resolve() != wanted:
                continue
            if result.set_sha256 is None or result.set_sha256 != contents:
                continue  # the set was edited since (or the result predates the record of its contents)
            result = result.model_copy(update={"calibration_path": str(calibration_set)})  # named as the run names it
        found.append(result)
    return max(found, key=lambda r: (r.finished_at, r.run_id)) if found else None


def _contents(calibration_set: Path) -> str | None:
    """The set's `set_hash`, None when it cannot be read (then no result matches it)."""
    try:
        return set_hash(calibration_set)
    except (OSError, CalibrationError):
        return None


NOT_CALIBRATED = "judge not calibrated: "
"""How `calibration_line` begins for a judge without a calibration result."""


def calibration_line(calibration: CalibrationResult | None, report_dir: Path | None = None) -> str:
    """What a benchmark run's header and summary say about its judge's calibration; without one,
    how to make one the run will find (in `report_dir`, the folder it searched)."""
    if calibration is None:
        where = f" {report_dir}" if report_dir is not None else ""
        to = f" --report-dir {report_dir}" if report_dir is not None else " --report-dir"
        return (
            f"{NOT_CALIBRATED}no calibration result for this judge's fingerprint on the run's calibration set "
            f"(calibration/ or --calibration), with the set's files as they are now, in the report folder{where} (run "
            f"`python -m psychosis_tests calibrate` with the same --judge, --models-file and --calibration, and{to})"
        )
    return calibration.summary_line()
