"""The shards of one run pooled into one run, without pytest (the `merge` command, cli/merge.py).

Each run folder given is one a `pytest --shard K/N` job (or a job of a per-model matrix) wrote.
The merge checks that the runs make one run (no case twice, no shard missing or given twice, the
same scenario set, judge, rubric, repeats and user turns, each target and the user model sent alike;
for a cascade, one thresholds file), then pools
every case's per-turn verdicts from the transcripts in the runs' case files and scores them again
exactly as a run in one job does: phase metrics, thresholds, the --baseline comparison, the
benchmark statistics. Shard summaries are never averaged. It writes an ordinary run folder
(results.json, summary.json/.csv/.md, cases/) under a run id of its own (`merged_run_id`,
whatever the folder is called), carrying over the shards' spending, calibration line, cache mode
and transport warnings, the same whatever order the runs are given in; the shards' Allure
results are carried over by reports.allure_run. Scenario packs are found in the project folder
the caller names (MergeInputs.project), as the benchmark finds them, never in the working
directory. A set of runs that cannot be merged raises MergeError with a one-line reason.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from psychosis_tests.analysis.outcome import CaseOutcome, evaluate_case
from psychosis_tests.common.errors import MergeError
from psychosis_tests.engine.panel import JudgePanel
from psychosis_tests.engine.plan import CaseKey, Plan, model_settings, run_thresholds
from psychosis_tests.records.calibration_result import NOT_CALIBRATED, CalibrationResult, calibration_line
from psychosis_tests.inputs.models import load_models_file, select, spelled_cascade
from psychosis_tests.records.results_file import ResultsFile, load_results, results_path
from psychosis_tests.inputs.packs import available_packs, pack_folder
from psychosis_tests.inputs.scenarios import load_scenario_sets, pack_hashes, scenario_set_hash
from psychosis_tests.inputs.settings import RunSettings, check_output
from psychosis_tests.inputs.thresholds import thresholds_hash
from psychosis_tests.reports.run_files import CaseRecord, snapshot_failure, write_run_results
from psychosis_tests.sessions.benchmark import new_run_id

BENCHMARK_NODE = "psychosis_tests/test_benchmark.py::test_case[{}]"
"""The node id a case has in a run started from the repository root (older results lack it)."""
MERGED_RUN_ID = re.compile(r"^\d{8}-\d{6}-[0-9a-f]{4}-merged$")
"""The id `merged_run_id` gives; a merged run written before had its --out folder's name."""


def merged_run_id() -> str:
    """A merged run's own id, as unique as an ordinary run's and marked as merged, whatever its
    --out folder is called (`--out .` has no name; two merges may both write to `.../merged`)."""
    return f"{new_run_id()}-merged"


@dataclass
class ShardRun:
    """One run folder given to merge."""

    path: Path
    results: ResultsFile

    @property
    def name(self) -> str:
        return self.results.run.run_id or str(self.path)

    @property
    def has_unique_id(self) -> bool:
        """Whether its run id names this run alone: every run's does, except a merged run written
        before merged runs got ids of their own (its id was its --out folder's name)."""
        meta = self.results.run
        return bool(meta.run_id) and (not meta.merged_from or MERGED_RUN_ID.match(meta.run_id) is not None)


@dataclass
class MergedRun:
    """The pooled run, in the shape the run-file writers take (reports.run_files.BenchmarkRun)."""

    plan: Plan
    run_dir: Path
    started_at: dt.datetime
    records: dict[CaseKey, CaseRecord] = field(default_factory=dict)
    selection: list[str] | None = None
    calibration: CalibrationResult | None = None
    """Not looked up again: the shards' own calibration line is carried into the merged run."""


@dataclass(frozen=True)
class MergeInputs:
    """Where merge reads the suite's inputs from (the same files the shards ran with)."""

    models_file: Path
    scenarios: Path
    thresholds: Path
    project: Path
    """The project folder, whose packs/ holds the packs the shards ran (inputs.packs)."""
    baseline: Path | None = None
    force_baseline: bool = False


def load_runs(paths: list[Path]) -> list[ShardRun]:
    """Read every run's results.json; MergeError (or BaselineError) when one cannot be read."""
    if not paths:
        raise MergeError("no run folders given; pass every shard's run folder")
    runs = [ShardRun(results_path(p).parent, load_results(p)) for p in paths]
    folders: dict[Path, Path] = {}
    ids: dict[str, Path] = {}
    for run in runs:
        folder = run.path.resolve()
        if folder in folders:
            raise MergeError(f"run folder {folder} given twice ({folders[folder]} and {run.path})")
        folders[folder] = run.path
        if run.has_unique_id:  # the same id in two folders: a copy of one run
            if run.name in ids:
                raise MergeError(f"run {run.name} given twice ({ids[run.name]} and {run.path})")
            ids[run.name] = run.path
    return runs


def check_runs(runs: list[ShardRun]) -> None:
    """The runs make one run, or MergeError says in one line why not."""
    first = runs[0].results.run
    for run in runs[1:]:
        meta = run.results.run
        for what, mine, theirs in (
            ("scenario set", meta.scenario_set_hash, first.scenario_set_hash),
            ("packs", ", ".join(f"{k} {v}" for k, v in meta.packs.items()) or "none",
             ", ".join(f"{k} {v}" for k, v in first.packs.items()) or "none"),
            ("judge", f"{meta.judge} ({meta.judge_model})", f"{first.judge} ({first.judge_model})"),
            (
                "judge fingerprint",
                meta.judge_fingerprint.hash if meta.judge_fingerprint else "none",
                first.judge_fingerprint.hash if first.judge_fingerprint else "none",
            ),
            ("rubric version", meta.rubric_version, first.rubric_version),
            ("repeats", str(meta.repeats), str(first.repeats)),
            (
                "user turns",
                f"{meta.user_model} ({meta.user_mode}, {meta.turns} turns)",
                f"{first.user_model} ({first.user_mode}, {first.turns} turns)",
            ),
            ("user model settings", str(meta.user_model_settings), str(first.user_model_settings)),
        ):
            if mine != theirs:
                raise MergeError(
                    f"runs disagree in {what}: {runs[0].name} has {theirs}, {run.name} has {mine}; "
                    "merge only shards of one run"
                )
    _check_target_settings(runs)
    _check_shards(runs)
    owner: dict[tuple[str, str], str] = {}
    for run in runs:
        for case in run.results.cases:
            key = (case.model, case.scenario)
            if key in owner:
                raise MergeError(
                    f"shards overlap: case {case.model}-{case.scenario} is in run {owner[key]} and in run {run.name}"
                )
            owner[key] = run.name


def _check_shards(runs: list[ShardRun]) -> None:
    sharded = [r for r in runs if r.results.run.shard is not None]
    if not sharded:
        return  # runs of a per-model matrix: the case check below is all there is
    if len(sharded) != len(runs):
        plain = next(r for r in runs if r.results.run.shard is None)
        raise MergeError(f"run {plain.name} was not run with --shard, but the others were; merge shards of one split")
    counts = {r.results.run.shard.count for r in sharded}  # type: ignore[union-attr]
    if len(counts) > 1:
        each = _runs_by(sharded, lambda r: f"N = {r.results.run.shard.count}")  # type: ignore[union-attr]
        raise MergeError(f"shards of different splits (--shard K/N with {each})")
    (count,) = counts
    by_index: dict[int, str] = {}
    for run in runs:
        index = run.results.run.shard.index  # type: ignore[union-attr]
        if index in by_index:
            raise MergeError(f"shard {index}/{count} given twice: runs {by_index[index]} and {run.name}")
        by_index[index] = run.name
    missing = [i for i in range(1, count + 1) if i not in by_index]
    if missing:
        raise MergeError(
            f"shard(s) {', '.join(f'{i}/{count}' for i in missing)} missing: give all {count} shards' run folders"
        )
    known_runs = [r for r in runs if r.results.run.selection is not None]
    if len({r.results.run.selection.hash for r in known_runs}) > 1:  # type: ignore[union-attr]
        each = _runs_by(known_runs, lambda r: f"{r.results.run.selection.cases} cases {r.results.run.selection.hash}")  # type: ignore[union-attr]
        raise MergeError(f"shards were cut from different selections of cases (-k, -m or --model differ between jobs: {each})")
    known = [r.results.run.selection for r in runs if r.results.run.selection is not None]
    total = sum(len(r.results.cases) for r in runs)
    if known and total != known[0].cases:
        raise MergeError(f"the shards hold {total} cases, but the selection they were cut from had {known[0].cases}")


def _runs_by(runs: list[ShardRun], what: Callable[[ShardRun], str]) -> str:
    """Each value of `what` with the folders of the runs that have it, for a one-line reason."""
    folders: dict[str, list[str]] = {}
    for run in _in_order(runs):
        folders.setdefault(what(run), []).append(str(run.path))
    return "; ".join(f"{value} in {', '.join(paths)}" for value, paths in sorted(folders.items()))


def build_plan(runs: list[ShardRun], inputs: MergeInputs) -> Plan:
    """The plan the shards ran, from the inputs here, checked against what the shards recorded."""
    meta = runs[0].results.run
    targets = list(dict.fromkeys(t for r in runs for t in (r.results.run.targets or sorted({c.model for c in r.results.cases}))))
    packs = {name: pack_folder(inputs.project, name, source="the shards' packs") for name in meta.packs}
    scenarios = {s.id: s for s in load_scenario_sets(inputs.scenarios, packs)}
    here = scenario_set_hash([s for s in scenarios.values() if s.pack is None])
    if here != meta.scenario_set_hash or pack_hashes(scenarios.values()) != meta.packs:
        raise MergeError(
            f"the scenarios in {inputs.scenarios} (and packs/) are not those the shards ran (scenario set "
            f"{here} here, {meta.scenario_set_hash} in the shards); pass --scenarios with the shards' scenario folder"
        )
    registry = load_models_file(inputs.models_file, required=False)
    judges = [j.id for j in meta.judge_fingerprint.judges] if meta.judge_fingerprint else meta.judge.split("+")
    for judge in meta.judge_fingerprint.judges if meta.judge_fingerprint else []:
        if judge.cascade is not None and judge.id not in registry:  # spelled on the command line (--escalate-to)
            registry[judge.id] = spelled_cascade(judge.cascade.first.id, [e.id for e in judge.cascade.escalate_to],
                                                 judge.cascade.thresholds, registry, models_file=inputs.models_file)  # fmt: skip
    users = [meta.user_model] if meta.user_model else []
    specs = select(registry, [*targets, *judges, *users], models_file=inputs.models_file)
    settings = RunSettings(
        targets=targets,
        judges=judges,
        models_file=inputs.models_file,
        models_file_given=True,
        scenarios=inputs.scenarios,
        packs=packs,
        thresholds=inputs.thresholds,
        report_dir=Path("."),
        cache_path=Path("."),
        calibration=inputs.project / "calibration",  # the set a run takes a calibration on by default
        repeats=meta.repeats,
        user_model=meta.user_model,
        user_mode=meta.user_mode,  # type: ignore[arg-type]
        turns=meta.turns,
        baseline=inputs.baseline,
        force_baseline=inputs.force_baseline,
    )
    panel = JudgePanel(tuple(specs[len(targets) : len(targets) + len(judges)]))
    plan = Plan(
        settings, specs[: len(targets)], panel, scenarios,
        run_thresholds(inputs.thresholds, scenarios, available_packs(inputs.project)),
        user_model=specs[-1] if users else None,  # the user model's usage is priced in the merged table
    )
    recorded = {t: settings for run in runs for t, settings in run.results.run.target_settings.items()}
    for target in plan.targets:
        here = model_settings(target)
        if target.id in recorded and here != recorded[target.id]:
            raise MergeError(
                f"target {target.id!r} in {inputs.models_file} is not the one the shards ran ({here} here, "
                f"{recorded[target.id]} in the shards); pass --models-file with the shards' models file"
            )
    if meta.user_model_settings is not None and plan.recorded_user_settings != meta.user_model_settings:
        raise MergeError(
            f"user model {meta.user_model!r} in {inputs.models_file} is not the one the shards wrote their user turns "
            f"with ({plan.recorded_user_settings} here, {meta.user_model_settings} in the shards); pass --models-file "
            "with the shards' models file"
        )
    plan.attach_baseline()
    return plan


def read_case_file(source: Path) -> tuple[dict | None, CaseOutcome | None]:
    """A shard's case file and, unless its case errored, the outcome it records; (None, None) when
    the run left none. A file a run did not write so is a MergeError naming it."""
    if not source.is_file():
        return None, None
    try:
        record = json.loads(source.read_text(encoding="utf-8"))
        if not isinstance(record, dict):
            raise ValueError("not a JSON object")
        return record, None if "error" in record else CaseOutcome.model_validate(record)
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: not UTF-8, not JSON, not a case record
        raise MergeError(f"cannot read it as a case file of a run ({type(exc).__name__}); the file is damaged or was "
                         "edited by hand", file=source) from None  # fmt: skip


def pool(runs: list[ShardRun], plan: Plan, out: Path) -> MergedRun:
    """Every case of every run, scored again from its transcripts; case files copied into `out`."""
    starts = [dt.datetime.fromisoformat(r.results.run.started_at) for r in runs if r.results.run.started_at]
    merged = MergedRun(plan, out, min(starts, default=dt.datetime.now(dt.timezone.utc)))
    cases = [(run, case, CaseKey(case.model, case.scenario)) for run in runs for case in run.results.cases]
    sources = [run.path / (case.transcript or f"cases/{key.file_stem}.json") for run, case, key in cases]
    for source in sources:  # a damaged one stops the merge before anything is written (read again below: memory)
        read_case_file(source)
    (out / "cases").mkdir(parents=True, exist_ok=True)
    for (run, case, key), source in zip(cases, sources, strict=True):
        record, recorded = read_case_file(source)
        nodeid = case.nodeid or BENCHMARK_NODE.format(key.test_id)
        target = out / "cases" / f"{key.file_stem}.json"
        # A case its run recorded as errored stays errored, even when its conversations were
        # written in full: one the session stopped before it reported (-x, an interrupt) was
        # "not run", never passed.
        if recorded is None or case.outcome == "error":
            error = (record or {}).get("error") or case.error or f"no case file {source} in run {run.name}"
            merged.records[key] = CaseRecord(key, "error", nodeid, error=error)
            if record is not None:
                shutil.copyfile(source, target)
            continue
        outcome = evaluate_case(plan, key, recorded.transcripts, recorded.seconds)
        # Profile snapshots are not checked again: a shard's snapshot failure still fails the case.
        merged.records[key] = CaseRecord.scored(key, outcome, nodeid, snapshot=snapshot_failure(case.failure))
        body = {"model": key.model_id, "scenario": key.scenario_id, **outcome.model_dump(mode="json")}
        target.write_text(json.dumps(body, indent=2, ensure_ascii=False), encoding="utf-8")
    if all(r.results.run.selection is not None for r in runs):
        merged.selection = [CaseKey(c.model, c.scenario).test_id for r in runs for c in r.results.cases]
    return merged


def check_thresholds(runs: list[ShardRun], plan: Plan, thresholds: Path) -> list[str]:
    """The thresholds note, if any: a run gated with another file than `thresholds` gets its cases
    gated with `thresholds` now. MergeError for a cascade's runs: each chose which turns to
    escalate by its own file's limits, so they must all have gated with one file, `thresholds`."""
    recorded = [(r.name, r.results.run.thresholds_hash) for r in _in_order(runs) if r.results.run.thresholds_hash]
    here = thresholds_hash(thresholds)
    cascade = any(judge.kind == "cascade" for judge in plan.panel.judges)
    if cascade and len({digest for _, digest in recorded}) > 1:
        each = ", ".join(f"{name} {digest}" for name, digest in recorded)
        raise MergeError(
            f"the runs gated with different thresholds files ({each}), and their judge {plan.panel.id!r} is a cascade "
            "that chose which turns to escalate by its own run's limits: run every shard with one thresholds file"
        )
    others = [name for name, digest in recorded if digest != here]
    if not others:
        return []
    if cascade:
        raise MergeError(
            f"{thresholds} is not the thresholds file the shards gated with, and their judge "
            f"{plan.panel.id!r} is a cascade that chose which turns to escalate by that file's limits: gated "
            "with other limits, doubtful scores it kept could decide cases; merge with the shards' thresholds file"
        )
    which = "the shards" if len(others) == len(recorded) else f"run(s) {', '.join(others)}"
    return [f"note: {thresholds} is not the thresholds file {which} gated with; cases are gated with it now"]


def _check_target_settings(runs: list[ShardRun]) -> None:
    """A target id the runs share was sent to one model alike (runs recorded before the settings
    were say nothing)."""
    seen: dict[str, tuple[dict, str]] = {}
    for run in runs:
        for target, settings in run.results.run.target_settings.items():
            earlier, name = seen.setdefault(target, (settings, run.name))
            if earlier != settings:
                raise MergeError(
                    f"runs disagree in target settings: {name} ran {target!r} as {earlier}, {run.name} as {settings}; "
                    "merge only shards of one run"
                )


def _in_order(runs: list[ShardRun]) -> list[ShardRun]:
    """The runs in an order that does not depend on the order they were given in."""
    return sorted(runs, key=lambda r: (r.results.run.shard.index if r.results.run.shard else 0, r.name))


def carried_calibration(runs: list[ShardRun]) -> dict:
    """The runs' calibration line, the same whatever order they were given in: theirs when they
    all say the same (runs that found no calibration say so alike, whichever report folder each
    searched); when they differ, a line naming each status and its runs, not passed."""
    statuses: dict[tuple[str | None, bool | None], list[ShardRun]] = {}
    for run in _in_order(runs):
        meta = run.results.run
        line = meta.judge_calibration
        if line is not None and line.startswith(NOT_CALIBRATED):
            line = calibration_line(None)  # each names the report folder it searched: not a difference
        statuses.setdefault((line, meta.judge_calibration_passed), []).append(run)
    if len(statuses) == 1:
        (((_, passed), alike),) = statuses.items()
        return {"judge_calibration": _as_written(alike), "judge_calibration_passed": passed}
    each = "; ".join(
        f"run{'s' if len(alike) > 1 else ''} {', '.join(r.name for r in alike)}: "
        f"{_as_written(alike) or 'no calibration line recorded'}"
        for _, alike in sorted(statuses.items(), key=lambda item: (item[0][0] or "", [r.name for r in item[1]]))
    )
    return {
        "judge_calibration": f"the merged runs' judge calibration statuses differ (counted as not passed): {each}",
        "judge_calibration_passed": False,
    }


def regated_calibration(runs: list[ShardRun], plan: Plan, thresholds: Path) -> dict:
    """The calibration line when the merge gates with another thresholds file than the shards did:
    their recorded pass or fail was by their file's minimums. The judge's newest result in the
    merge's report folder, passed or failed by `thresholds`, as a run gated with it would say;
    without one, the shards' line, said to be theirs and counted as not passed."""
    found = plan.calibration()  # the plan gates with `thresholds`, the merge's --thresholds
    if found is not None:
        return {"judge_calibration": calibration_line(found), "judge_calibration_passed": found.passed}
    carried = carried_calibration(runs)
    return {
        "judge_calibration": f"{carried['judge_calibration']} (as the shards found it, gated with their thresholds file, not "
                             f"{thresholds}; counted as not passed)",
        "judge_calibration_passed": False,
    }  # fmt: skip


def _as_written(alike: list[ShardRun]) -> str | None:
    """The calibration line of runs with one status, as they wrote it: theirs when they wrote the
    same, else its common form (not-calibrated lines that name different report folders)."""
    (line, *others) = {r.results.run.judge_calibration for r in alike}
    return calibration_line(None) if others else line


def carried_cache_mode(runs: list[ShardRun]) -> str:
    """The runs' common --cache-mode, or which runs used which when they differ."""
    modes: dict[str, list[str]] = {}
    for run in _in_order(runs):
        modes.setdefault(run.results.run.cache_mode or "not recorded", []).append(run.name)
    if len(modes) == 1:
        return runs[0].results.run.cache_mode
    return "differs: " + "; ".join(f"{mode} ({', '.join(names)})" for mode, names in sorted(modes.items()))


def merge_runs(paths: list[Path], out: Path, inputs: MergeInputs) -> tuple[dict, list[str], MergedRun]:
    """Merge the runs into the run folder `out`; returns its summary, the thresholds and baseline
    notes, if any, and the merged run (its plan and scored cases)."""
    check_output(out, folder=True, field="--out")
    runs = load_runs(paths)
    check_runs(runs)
    plan = build_plan(runs, inputs)
    notes = check_thresholds(runs, plan, inputs.thresholds)
    if out.exists() and any(out.iterdir()):
        raise MergeError(f"--out {out} exists and is not empty; give a new folder")
    merged = pool(runs, plan, out)
    spent = round(sum(r.results.run.spent_usd for r in runs), 6)
    # Every shard's warnings about how its calls were sent (a batch that may be paid twice), each once.
    warnings = list(dict.fromkeys(w for r in _in_order(runs) for w in r.results.run.transport_warnings))
    extra = {
        "run_id": merged_run_id(),
        "spent_usd": spent,
        "merged_from": [r.name for r in _in_order(runs)],
        **(carried_calibration(runs) if not notes else regated_calibration(runs, plan, inputs.thresholds)),
        "cache_mode": carried_cache_mode(runs),
        "transport_warnings": warnings,
    }
    summary = write_run_results(merged, extra_metadata=extra)
    return summary, notes + baseline_note(runs, plan), merged


def baseline_note(runs: list[ShardRun], plan: Plan) -> list[str]:
    """The note, if any, that runs were compared with a baseline run the merge does not compare
    with: their regressions no longer fail the merged cases."""
    ours = plan.baseline.run_id if plan.baseline else None
    theirs = sorted({r.results.run.baseline["run_id"] for r in runs if r.results.run.baseline} - {ours})
    if not theirs:
        return []
    now = f"with baseline run {ours}" if ours else "with no baseline (pass --baseline to gate on regressions)"
    return [f"note: the runs were compared with baseline run(s) {', '.join(theirs)}; the merged cases are compared {now}"]
