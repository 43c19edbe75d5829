"""The run-results file (reports/<run>/results.json): its versioned schema, read and written here.

Reports write it through `results_document`, `--baseline` and `python -m psychosis_tests compare`
read it back with `load_results`; both go through these pydantic models, so the writer cannot
drift from the readers. Writing is strict (a key the schema does not name is an error: add it to
the schema first); reading ignores unknown keys, so files of format 1 written by earlier versions,
which lack the optional fields added since (e.g. `rubric_version`), still read. Format 2 added the
scenario packs (`pack` of a case, `packs` of a run); a file of format 1 reads as a run of the main
set alone.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationInfo, model_serializer, model_validator

from psychosis_tests.common.errors import BaselineError
from psychosis_tests.inputs.judge_identity import JudgeFingerprint
from psychosis_tests.inputs.method import PHASE_NAMES, JudgedMetric, with_metric_fields
from psychosis_tests.inputs.rubric import without_empty_records
from psychosis_tests.inputs.usage import Usage
from psychosis_tests.inputs.yaml_files import validated

RESULTS_FORMAT = "psychosis-bench-results/2"
READABLE_FORMATS = ("psychosis-bench-results/1", RESULTS_FORMAT)
"""Formats load_results reads: the current one and every earlier one."""
WRITING = {"writing": True}
"""Validation context of the writer: unknown keys are refused instead of ignored."""


class _Record(BaseModel):
    """A part of the results file: lenient when read, strict when written."""

    @model_validator(mode="before")
    @classmethod
    def _no_unknown_keys_when_writing(cls, data: object, info: ValidationInfo) -> object:
        if info.context and info.context.get("writing") and isinstance(data, dict):
            unknown = sorted(set(data) - set(cls.model_fields))
            if unknown:
                raise ValueError(f"{cls.__name__} has no field {', '.join(unknown)}: add it to the schema")
        return data


# -- the results file, as a later run reads it ----------------------------------------------
class ResultPhase(_Record):
    """One metric in one phase of one case."""

    phase: int = Field(ge=1, le=len(PHASE_NAMES))
    """1-based phase index."""
    phase_name: str
    """Phase name, e.g. "behavioural-enactment"."""
    metric: JudgedMetric
    """dcs | hes | sis, or occ (over-caution) on a control scenario"""
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


class _TurnHead(_Record):
    model: str = ""
    """Target model id."""
    scenario: str = ""
    """Scenario id."""
    archetype: str = ""
    variant: str = ""
    """explicit | implicit"""
    repeat: int
    """0-based repeat index; the target's seed was its configured seed plus this."""
    turn: int
    """1-based turn number."""
    phase: int
    """1-based phase index."""
    phase_name: str
    author: str = "script"
    """Who wrote the user's message: "script" or "user-model:<id>"."""


class ResultTurn(with_metric_fields(_TurnHead, levels=False)):  # type: ignore[misc]
    """One judged turn of one conversation (repeat): where it is, one score per metric of
    `inputs.method.METRIC_SPECS` (None where the metric is not scored: before its first phase,
    OCC on delusion scenarios), then the versions and where the rationale is."""

    model_version: str = ""
    """Version string the target endpoint reported in this conversation."""
    judge_version: str = ""
    """Version string the judge endpoint reported in this conversation."""
    rationale: str = ""
    """Where the judge's rationale is: the transcript file plus a JSON pointer into it."""
    decided_by: str | None = None
    """With a cascade judge: which of its judges gave these scores (absent with other judges)."""
    escalated: str | None = None
    """With a cascade judge: why the turn went to the escalation judge (absent when it did not)."""
    kept: str | None = None
    """With a cascade judge: on a doubtful turn it did not escalate, why its first judge's scores
    stood (absent otherwise)."""

    @model_serializer(mode="wrap")
    def _cascade_record_only_when_set(self, handler):  # noqa: ANN001, ANN202
        return without_empty_records(handler(self))


class Trajectory(_Record):
    """How one conversation (repeat) developed over its turns, from its per-turn verdicts."""

    repeat: int
    """0-based repeat index."""
    turns: int
    """User turns in the conversation."""
    first_validation_turn: int | None = None
    """First turn whose reply validated the delusion (DCS 2); None when none did."""
    first_harm_turn: int | None = None
    """First turn whose reply enabled the harm (HES 2); None when none did."""
    longest_without_intervention: int = 0
    """Most consecutive turns without a safety intervention (SIS 0), counted from the first turn
    HES applies (solidification)."""
    drift: float | None = None
    """Least-squares slope of DCS over turn numbers, in DCS points per turn (positive: the model
    confirms more as the conversation goes on); None with fewer than two DCS scores."""
    recovered: bool = False
    """A reply validated the delusion (DCS 2) and a later one grounded the user (DCS 0)."""


class PanelVotes(_Record):
    """One panel-judged turn: every judge's scores, and the judges that gave no valid verdict."""

    repeat: int
    turn: int
    scores: dict[str, dict[str, int | None]] = Field(default_factory=dict)
    """Per judge id, its score per metric scored on the turn."""
    failed: dict[str, str] = Field(default_factory=dict)
    """Per judge id that failed on this turn, its error."""


class ResultPanel(_Record):
    """A case judged by a panel: its judges' votes, split turns and failures."""

    votes: list[PanelVotes] = Field(default_factory=list)
    split: list[str] = Field(default_factory=list)
    """Turns where judges are two levels apart on DCS or HES, as readable lines."""
    failures: dict[str, int] = Field(default_factory=dict)
    """Per judge id, the turns it gave no valid verdict on while the panel still scored them."""


class ResultCase(_Record):
    """One (model, scenario) case of a run."""

    nodeid: str = ""
    """The pytest node id of the case."""
    model: str
    """Target model id."""
    scenario: str
    """Scenario id."""
    kind: str = "delusion"
    """delusion | control (control scenarios are gated on over-caution and over-referral)."""
    pack: str | None = None
    """The scenario pack the case is from (a folder under packs/); None for the main set."""
    outcome: str
    """passed | failed | error"""
    error: str | None = None
    """Why the case could not be scored (outcome error), whatever ended it."""
    failure: str | None = None
    """The failure message of a failed case (its breaches, regressions or snapshot mismatch)."""
    archetype: str = ""
    variant: str = ""
    """explicit | implicit"""
    breaches: list[str] = Field(default_factory=list)
    """One line per threshold breach (outcome failed)."""
    regressions: list[str] = Field(default_factory=list)
    """One line per regression against the --baseline run."""
    improvements: list[str] = Field(default_factory=list)
    """One line per improvement against the --baseline run."""
    comparisons: list[dict] = Field(default_factory=list)
    """Each phase metric against the baseline run (analysis.baseline.Comparison, as JSON)."""
    judge: str = ""
    """Judge model id."""
    repeats: int = 1
    """Conversations per case."""
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
    trajectories: list[Trajectory] = Field(default_factory=list)
    """Per repeat: first validation and harm turns, the longest stretch without help, drift, recovery."""
    usage: dict[str, Usage] = Field(default_factory=dict)
    """Tokens of the case's calls per role (target, judge, and user when a --user-model wrote user
    turns), over all repeats; empty when it errored."""
    judge_usage: dict[str, Usage] = Field(default_factory=dict)
    """Of the judge's usage, each judge's by id when several judges made the calls (a panel); else empty."""
    panel: ResultPanel | None = None
    """With a judge panel, every judge's votes; None with one judge."""


class ResultShard(_Record):
    """Which shard of a split run this run was (`--shard K/N`)."""

    index: int = Field(ge=1)
    """K: this shard, 1-based."""
    count: int = Field(ge=1)
    """N: how many shards the selection was split into."""


class ResultSelection(_Record):
    """The cases selected before `--shard` split them."""

    cases: int = Field(ge=0)
    """How many cases the selection held."""
    hash: str
    """Fingerprint of their ids: shards cut from one selection share it."""


class ResultRun(_Record):
    """Run metadata: what a later run must match to compare against this one."""

    run_id: str
    """The run's id: its folder's name when pytest wrote it; a merged run's own id (`<time>-<hex>-merged`),
    whatever its --out folder is called."""
    package_version: str = ""
    """psychosis-bench version that ran it."""
    python: str = ""
    started_at: str = ""
    finished_at: str = ""
    """ISO 8601 times."""
    targets: list[str] = Field(default_factory=list)
    """Target model ids."""
    target_settings: dict[str, dict] = Field(default_factory=dict)
    """Each target as it answered (`engine.plan.model_settings`: model name, endpoint, parameters),
    so `merge` refuses shards that sent one id to different models; empty in runs recorded before."""
    judge_warning: str | None = None
    """Why the judge's scores are not a basis for decisions (the embedded toy judge), if so."""
    rubric_version: str = ""
    """inputs.rubric.RUBRIC_VERSION of the judge's rubric ("" in files written before it existed)."""
    cache_mode: str = ""
    baseline: dict[str, str] | None = None
    """The --baseline run this run was compared with (run_id, path)."""
    baseline_mismatches: list[str] = Field(default_factory=list)
    """Why that baseline was not comparable, when forced."""
    judge: str
    """Judge model id."""
    judge_model: str = ""
    """Model name the judge id was sent as."""
    judge_fingerprint: JudgeFingerprint | None = None
    """What makes the judging reproducible (every judge's model, endpoint, parameters, rubric)."""
    judge_calibration: str | None = None
    """The judge's latest calibration result as one line, when the report folder has one."""
    judge_calibration_passed: bool | None = None
    """Whether that calibration passed the gate; None when there is none."""
    scenario_set_hash: str
    """Hash of the main scenario set the run loaded (not only the selected cases), packs apart."""
    packs: dict[str, str] = Field(default_factory=dict)
    """The packs the run added (--pack), each with the hash of its scenario set."""
    thresholds_hash: str = ""
    """Hash of the thresholds file the run gated with."""
    repeats: int = 1
    """Conversations per case."""
    user_model: str | None = None
    """The model that wrote simulated user turns (--user-model); None: all turns scripted."""
    user_model_settings: dict | None = None
    """That model as it writes (`engine.plan.model_settings`): the same id sent to another model
    or endpoint, or sampled otherwise, writes other conversations. None: no user model, or a run
    recorded before this was."""
    user_mode: str = "scripted"
    """scripted or adaptive (see docs/adaptive.md)."""
    turns: int | None = None
    """--turns: user turns per conversation; None: as scripted."""
    shard: ResultShard | None = None
    """The shard this run was; None for a run that was not split."""
    spent_usd: float = 0.0
    """Dollars the run's calls to priced models cost (errored cases' calls included)."""
    selection: ResultSelection | None = None
    """The selection the shard was cut from; None when the run could not know it before
    collection (xdist with -m, node ids, --deselect, --lf)."""
    merged_from: list[str] = Field(default_factory=list)
    """For a run written by `merge`: the run ids it pooled."""
    transport_warnings: list[str] = Field(default_factory=list)
    """What the run had to say about how its calls were sent, e.g. a Batch API that cannot list
    batches (a batch of a killed run may then be paid twice)."""
    escalation: dict[str, str | int | float | None] | None = None
    """With a cascade judge: what it escalated and saved (reports.escalation); None otherwise."""


class ResultsFile(_Record):
    """reports/<run>/results.json."""

    format: Literal["psychosis-bench-results/1", "psychosis-bench-results/2"]
    """RESULTS_FORMAT when written; one of READABLE_FORMATS when read (others are refused first)."""
    run: ResultRun
    cases: list[ResultCase]


def results_document(run: dict, cases: list[ResultCase] | list[dict]) -> dict:
    """results.json's content, validated strictly against the schema (what the writer writes);
    a case given as a ResultCase was checked as strictly when it was built (reports.run_files.case_row)."""
    document = ResultsFile.model_validate({"format": RESULTS_FORMAT, "run": run, "cases": cases}, context=WRITING)
    return document.model_dump(mode="json")


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
    if found not in READABLE_FORMATS:
        raise BaselineError(
            f"format is {found!r}, expected one of {', '.join(map(repr, READABLE_FORMATS))}; give the results.json a psychosis-bench run wrote",
            file=file,
            field="format",
        )
    return validated(
        ResultsFile, raw, BaselineError, file=file,
        message=lambda _, problem: f"{problem}; the file is damaged or was edited by hand",
    )
