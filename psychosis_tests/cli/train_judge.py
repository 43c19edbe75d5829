"""`python -m psychosis_tests train-judge`: rebuild the trained judge and gate it.

    python -m psychosis_tests train-judge [--items FILE_OR_DIR ...] [--from-run RUN ...] [--out FILE]

Reads the shipped corpus (judge_corpus/) plus any labelled item files named, and the judged turns
of past runs (`--from-run`: their judge becomes the rater). Refuses, before any work, an item that
equals or nearly copies a calibration reply, of the calibration set or of any scenario pack's
(packs/*/calibration/ of the project folder, wherever the command is run), a run given twice or
with a merged run made from it, and a run judged by a trained judge (its own verdicts). Prints a
leave-one-archetype-out cross-validation (kappas, and whether the held-out verdicts'
probabilities match how often they were right), writes the model file, then runs the calibration
gate on calibration/ (or --calibration, against the --scenarios named) with the new model, exactly
as `calibrate --judge trained` would; what the gate reads (scenarios, thresholds, the calibration
set) is checked before any training or writing. Exit status: 0 passed the gate, 1 failed it, 2 bad
input.
Progress goes to stderr. Defaults (the corpus, calibration/, scenarios/, the gate's thresholds and
report folder) are taken from the project folder (`project_folder`), as the benchmark takes them.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from psychosis_tests.cli.options import project_folder, user_path
from psychosis_tests.common.errors import ConfigError

if TYPE_CHECKING:
    from psychosis_tests.inputs.settings import RunSettings
    from psychosis_tests.records.results_file import ResultRun

DEFAULT_CORPUS = Path("judge_corpus")


def add_train_judge_parser(commands: argparse._SubParsersAction) -> None:
    train = commands.add_parser(
        "train-judge",
        help="rebuild the trained judge from the corpus (and labelled items or past runs), cross-validate and gate it",
        description=__doc__.splitlines()[0],
    )
    train.add_argument("--corpus", type=user_path, default=None, metavar="DIR",
                       help=f"the training corpus; default: {DEFAULT_CORPUS}/ in the project folder")
    train.add_argument("--items", type=user_path, action="append", default=[], metavar="PATH",
                       help="more labelled items (a .jsonl file or a folder of them); repeatable")
    train.add_argument("--from-run", type=user_path, action="append", default=[], metavar="RUN",
                       help="a past run folder: its judge's verdicts become labels; repeatable")
    train.add_argument("--out", type=user_path, default=None, metavar="FILE",
                       help="the model file to write; default: the trained judge shipped with the suite")
    train.add_argument("--calibration", type=user_path, default=None, metavar="PATH",
                       help="the held-out calibration set the gate runs on; default: calibration/ in the project folder")
    train.add_argument("--scenarios", type=user_path, default=None, metavar="DIR",
                       help="scenario set for --from-run harms and archetypes, and that the gate's calibration set is checked "
                       "against (as calibrate --scenarios); default: scenarios/ in the project folder")
    train.add_argument("--no-cross-validation", action="store_true", help="skip the cross-validation")
    train.add_argument("--no-gate", action="store_true", help="write the model without running the calibration gate")


def train_judge(args: argparse.Namespace) -> int:
    from psychosis_tests.analysis.judge_training import cross_validate, fold_lines, reliability_lines, train
    from psychosis_tests.engine.trained_judge import write_model_file
    from psychosis_tests.inputs.models import TRAINED_MODEL_FILE
    from psychosis_tests.inputs.settings import check_output

    def progress(line: str) -> None:
        print(f"[train-judge] {line}", file=sys.stderr, flush=True)

    root = project_folder()
    out = args.out if args.out is not None else TRAINED_MODEL_FILE
    check_output(out, folder=False, field="--out")  # before the minutes of training, not after
    calibration = args.calibration if args.calibration is not None else root / "calibration"
    settings = gate_settings(calibration, args.scenarios, root)
    if not args.no_gate:  # the gate's inputs are checked before any training or writing
        check_gate_inputs(settings)
    items, origins = gather_items(args, root, progress, scenarios=settings.scenarios)
    refuse_calibration_copies(items, calibration, root, origins=origins)
    print(f"psychosis-bench train-judge: {len(items)} labelled items", flush=True)
    if not args.no_cross_validation:
        print("leave-one-archetype-out cross-validation (weighted kappa for DCS and HES, kappa for SIS and OCC; "
              "95% bootstrap intervals):", flush=True)  # fmt: skip
        folds = cross_validate(items, progress)
        print("\n".join(fold_lines(folds)), flush=True)
        print("the same held-out verdicts: mean probability of the level chosen, share right, and calibration error "
              "(their gap within 10 bins of probability; 0 is perfectly reliable):", flush=True)  # fmt: skip
        print("\n".join(reliability_lines(folds)), flush=True)
    meta, arrays = train(items, progress)
    try:
        write_model_file(out, meta, arrays)
    except OSError as exc:  # what check_output cannot see beforehand (a symlink loop, a full disk)
        raise ConfigError(f"cannot write the model file ({type(exc).__name__}: {exc.strerror})", field="--out",
                          file=out) from None  # fmt: skip
    print(f"model file: {out} ({out.stat().st_size // 1024} KiB)", flush=True)
    if args.no_gate:
        return 0
    return run_gate(out, calibration, root, scenarios=args.scenarios)


def gather_items(args: argparse.Namespace, root: Path, progress, *, scenarios: Path) -> tuple[list, list[Path]]:
    """The training items, and where each came from: its .jsonl file, or the --from-run folder
    (whose harms and archetypes come from `scenarios`, the gate's: --scenarios, else
    PSYCHOSIS_SCENARIOS, else the project's scenarios/; a pack case's from the project's pack)."""
    from psychosis_tests.analysis.run_items import items_from_run
    from psychosis_tests.inputs.judge_items import JudgeItemError, load_items_with_files
    from psychosis_tests.inputs.packs import available_packs, pack_folder
    from psychosis_tests.inputs.scenarios import load_scenario_sets
    from psychosis_tests.records.results_file import load_results

    corpus = args.corpus if args.corpus is not None else root / DEFAULT_CORPUS
    runs: dict[Path, Path] = {}
    for run in args.from_run:
        same = runs.setdefault(run.resolve(), run)
        if same is not run:
            also = f" (also as {same})" if str(same) != str(run) else ""
            raise JudgeItemError(f"run folder {run} is given twice{also}: each of its judged turns would be an item twice",
                                 field="--from-run")  # fmt: skip
    results = {run: load_results(run) for run in args.from_run}
    refuse_merged_with_shards({run: found.run for run, found in results.items()})
    loaded = load_items_with_files([corpus, *args.items])
    items, origins = [item for _, item in loaded], [file for file, _ in loaded]
    if args.from_run:
        packs = {name: pack_folder(root, name) for name in available_packs(root)}
        packs = {name: folder for name, folder in packs.items() if folder.resolve() != scenarios.resolve()}
        known = {s.id: s for s in load_scenario_sets(scenarios, packs)}
        for run in args.from_run:
            found, notes = items_from_run(run, results[run], known)
            progress(f"{run}: {len(found)} judged turns taken")
            for note in notes:  # cases without a transcript, scenario or turns (errored), turns a cascade's first judge decided
                progress(f"{run}: {note}")
            items += found
            origins += [run] * len(found)
    first: dict[str, str] = {}
    for item, origin in zip(items, origins, strict=True):
        where = f"run folder {origin}" if origin in runs.values() else f"item file {origin}"
        if item.id in first:
            raise JudgeItemError(f"item id {item.id!r} is given twice: by {first[item.id]} and by {where}", field="--from-run")
        first[item.id] = where
    return items, origins


def refuse_merged_with_shards(given: dict[Path, ResultRun]) -> None:
    """Stop when a merged run is given with a run it was merged from (`given`: each run folder's
    results.json `run`): the shard's judged turns are the merged run's too, under another run id,
    so each would be an item twice."""
    from psychosis_tests.inputs.judge_items import JudgeItemError

    by_id = {meta.run_id: run for run, meta in given.items() if meta.run_id}
    for run, meta in given.items():
        for shard in meta.merged_from:
            if shard in by_id:
                raise JudgeItemError(f"run folder {run} is merged from run folder {by_id[shard]}, also given: each of "
                                     "its judged turns would be an item twice", field="--from-run")  # fmt: skip


def refuse_calibration_copies(items: list, calibration: Path, root: Path, *, origins: list[Path] | None = None) -> None:
    """Stop when a training item equals or nearly copies a held-out calibration reply: of the
    calibration set, or of a scenario pack of the project folder `root` (their items are held out
    too; train-judge passes `project_folder()`, never the working directory). `origins`: each
    item's file (or run folder), named in the refusal with the field, `reply`."""
    from psychosis_tests.analysis.near_duplicates import overlaps
    from psychosis_tests.inputs.packs import pack_calibration_folders

    held_out = [(repr(i), reply, file) for i, reply, file in calibration_replies_with_files(calibration)]
    for folder in pack_calibration_folders(root):
        held_out += [(f"{i!r} of {folder.relative_to(root)}", reply, file.relative_to(root))
                     for i, reply, file in calibration_replies_with_files(folder)]  # fmt: skip
    for i, j, why in overlaps([item.reply for item in items], [reply for _, reply, _ in held_out]):
        label, _, file = held_out[j]
        raise ConfigError(f"training item {items[i].id!r} repeats calibration item {label} ({why}), calibration file "
                          f"{file}; training must never see the held-out set",
                          file=origins[i] if origins is not None else None, field="reply")  # fmt: skip


def gate_settings(calibration: Path, scenarios: Path | None, root: Path, *, models_file: Path | None = None) -> RunSettings:
    """The gate's settings, resolved as `calibrate` resolves its own: the calibration set and the
    scenarios train-judge was given (--scenarios, as `calibrate --scenarios`), else the scenarios,
    thresholds and report folder from their environment variables, else the project folder's
    defaults; progress lines every PSYCHOSIS_PROGRESS_INTERVAL. The benchmark's other variables
    (PSYCHOSIS_MODELS, PSYCHOSIS_ESCALATE_TO, ...) are not read: the gate is the trained judge's alone."""
    from psychosis_tests.inputs.settings import environment_of, resolve

    given = {"judge": ["trained"], "cache_mode": "off", "calibration": calibration, "scenarios": scenarios,
             "models_file": models_file}  # fmt: skip
    return resolve(given.get, environment_of(("scenarios", "thresholds", "report_dir", "progress_interval")), root)


def check_gate_inputs(settings: RunSettings) -> None:
    """What the gate reads, read and checked as the calibrate command checks it (the scenarios,
    the thresholds file's gate, the calibration set against those scenarios), so that a bad input
    stops train-judge before it trains or writes a model file."""
    from psychosis_tests.inputs.calibration import load_calibration
    from psychosis_tests.inputs.scenarios import load_scenarios
    from psychosis_tests.inputs.thresholds import load_thresholds

    scenarios = {s.id: s for s in load_scenarios(settings.scenarios)}
    load_thresholds(settings.thresholds, scenario_ids=set(scenarios))
    load_calibration(settings.calibration, scenarios)


def run_gate(model_file: Path, calibration: Path, root: Path, *, scenarios: Path | None = None) -> int:
    """The calibration gate on the new model, through the calibrate command, on `scenarios`
    (train-judge's --scenarios; None: as `calibrate` chooses them). For the shipped model
    file, its result is written next to it, where a fresh clone's runs find it."""
    from psychosis_tests.cli.calibration import calibrate
    from psychosis_tests.records.calibration_result import SHIPPED_CALIBRATION, SHIPPED_SET
    from psychosis_tests.inputs.judge_identity import judge_fingerprint
    from psychosis_tests.inputs.models import TRAINED_MODEL_FILE, builtin_models

    with tempfile.TemporaryDirectory() as scratch:
        models_file = Path(scratch) / "models.yaml"
        entry = {"id": "trained", "model": "psychosis-bench-trained-judge", "kind": "trained", "model_file": str(model_file.resolve())}
        models_file.write_text(yaml.safe_dump({"models": [entry]}), encoding="utf-8")
        # Resolved once: the gate writes its result to the report folder the shipped result is then read from.
        settings = gate_settings(calibration, scenarios, root, models_file=models_file)
        code = calibrate(argparse.Namespace(bootstrap_resamples=1000, alluredir=None, items=None), settings)
    if model_file.resolve() == TRAINED_MODEL_FILE.resolve() and settings.calibration.resolve() == SHIPPED_SET.resolve():
        # The shipped result stands for calibration/: a gate on another set is no result for it.
        from psychosis_tests.records.calibration_result import find_calibration

        fingerprint = judge_fingerprint([builtin_models()["trained"]]).hash
        result = find_calibration(settings.report_dir, fingerprint, calibration_set=settings.calibration, shipped=None)
        if result is not None:
            SHIPPED_CALIBRATION.write_text(result.model_dump_json(indent=2) + "\n", encoding="utf-8")
            print(f"calibration result for the shipped judge: {SHIPPED_CALIBRATION}", flush=True)
    return code


def calibration_replies_with_files(path: Path) -> list[tuple[str, str, Path]]:
    """(item id, reply, calibration file) of every held-out calibration item."""
    from psychosis_tests.inputs.calibration import calibration_files, parse_calibration_file

    return [(item.id, item.reply, file) for file in calibration_files(path) for item in parse_calibration_file(file).items]
