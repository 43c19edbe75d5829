"""`python -m psychosis_tests train-judge`: rebuild the trained judge and gate it.

    python -m psychosis_tests train-judge [--items FILE_OR_DIR ...] [--from-run RUN ...] [--out FILE]

Reads the shipped corpus (judge_corpus/) plus any labelled item files named, and the judged turns
of past runs (`--from-run`: their judge becomes the rater). Refuses, before any work, an item that
equals or nearly copies a calibration reply, of the calibration set or of any scenario pack's
(packs/*/calibration/ of the project folder, wherever the command is run). Prints a
leave-one-archetype-out cross-validation (kappas, and whether the held-out verdicts'
probabilities match how often they were right),
writes the model file, then runs the calibration gate on calibration/ with the new model, exactly
as `calibrate --judge trained` would. Exit status: 0 passed the gate, 1 failed it, 2 bad input.
Progress goes to stderr. Defaults (the corpus, calibration/, scenarios/, the gate's thresholds and
report folder) are taken from the project folder (`project_folder`), as the benchmark takes them.
"""

from __future__ import annotations

import argparse
import os
from collections import Counter
import sys
import tempfile
from pathlib import Path

import yaml

from psychosis_tests.cli.options import project_folder
from psychosis_tests.common.errors import ConfigError

DEFAULT_CORPUS = Path("judge_corpus")


def add_train_judge_parser(commands: argparse._SubParsersAction) -> None:
    train = commands.add_parser(
        "train-judge",
        help="rebuild the trained judge from the corpus (and labelled items or past runs), cross-validate and gate it",
        description=__doc__.splitlines()[0],
    )
    train.add_argument("--corpus", type=Path, default=None, metavar="DIR",
                       help=f"the training corpus; default: {DEFAULT_CORPUS}/ in the project folder")
    train.add_argument("--items", type=Path, action="append", default=[], metavar="PATH",
                       help="more labelled items (a .jsonl file or a folder of them); repeatable")
    train.add_argument("--from-run", type=Path, action="append", default=[], metavar="RUN",
                       help="a past run folder: its judge's verdicts become labels; repeatable")
    train.add_argument("--out", type=Path, default=None, metavar="FILE",
                       help="the model file to write; default: the trained judge shipped with the suite")
    train.add_argument("--calibration", type=Path, default=None, metavar="PATH",
                       help="the held-out calibration set the gate runs on; default: calibration/ in the project folder")
    train.add_argument("--scenarios", type=Path, default=None, metavar="DIR",
                       help="scenario set for --from-run harms and archetypes; default: scenarios/ in the project folder")
    train.add_argument("--no-cross-validation", action="store_true", help="skip the cross-validation")
    train.add_argument("--no-gate", action="store_true", help="write the model without running the calibration gate")


def train_judge(args: argparse.Namespace) -> int:
    from psychosis_tests.analysis.judge_training import cross_validate, fold_lines, reliability_lines, train
    from psychosis_tests.engine.trained_judge import write_model_file
    from psychosis_tests.inputs.models import TRAINED_MODEL_FILE

    def progress(line: str) -> None:
        print(f"[train-judge] {line}", file=sys.stderr, flush=True)

    root = project_folder()
    items = gather_items(args, root, progress)
    calibration = args.calibration if args.calibration is not None else root / "calibration"
    refuse_calibration_copies(items, calibration, root)
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
    out = args.out if args.out is not None else TRAINED_MODEL_FILE
    write_model_file(out, meta, arrays)
    print(f"model file: {out} ({out.stat().st_size // 1024} KiB)", flush=True)
    if args.no_gate:
        return 0
    return run_gate(out, calibration, root)


def gather_items(args: argparse.Namespace, root: Path, progress) -> list:
    from psychosis_tests.analysis.run_items import items_from_run
    from psychosis_tests.inputs.judge_items import JudgeItemError, load_items
    from psychosis_tests.inputs.scenarios import load_scenarios

    corpus = args.corpus if args.corpus is not None else root / DEFAULT_CORPUS
    items = load_items([corpus, *args.items])
    if args.from_run:
        scenarios = {s.id: s for s in load_scenarios(args.scenarios if args.scenarios is not None else root / "scenarios")}
        for run in args.from_run:
            found, notes = items_from_run(run, scenarios)
            progress(f"{run}: {len(found)} judged turns" + (f"; {len(notes)} case(s) skipped" if notes else ""))
            items += found
    twice = sorted(i for i, n in Counter(item.id for item in items).items() if n > 1)
    if twice:
        raise JudgeItemError(f"item id {twice[0]!r} is given twice")
    return items


def refuse_calibration_copies(items: list, calibration: Path, root: Path) -> None:
    """Stop when a training item equals or nearly copies a held-out calibration reply: of the
    calibration set, or of a scenario pack of the project folder `root` (their items are held out
    too; train-judge passes `project_folder()`, never the working directory)."""
    from psychosis_tests.analysis.near_duplicates import overlaps
    from psychosis_tests.inputs.packs import pack_calibration_folders

    held_out = [(repr(i), reply) for i, reply in calibration_replies(calibration)]
    for folder in pack_calibration_folders(root):
        held_out += [(f"{i!r} of {folder.relative_to(root)}", reply) for i, reply in calibration_replies(folder)]
    for i, j, why in overlaps([item.reply for item in items], [reply for _, reply in held_out]):
        raise ConfigError(f"training item {items[i].id!r} repeats calibration item {held_out[j][0]} ({why}); "
                          "training must never see the held-out set")  # fmt: skip


def run_gate(model_file: Path, calibration: Path, root: Path) -> int:
    """The calibration gate on the new model, through the calibrate command. For the shipped model
    file, its result is written next to it, where a fresh clone's runs find it."""
    from psychosis_tests.cli.calibration import calibrate
    from psychosis_tests.records.calibration_result import SHIPPED_CALIBRATION
    from psychosis_tests.inputs.judge_identity import judge_fingerprint
    from psychosis_tests.inputs.models import TRAINED_MODEL_FILE, builtin_models
    from psychosis_tests.inputs.settings import ENV, resolve

    with tempfile.TemporaryDirectory() as scratch:
        models_file = Path(scratch) / "models.yaml"
        entry = {"id": "trained", "model": "psychosis-bench-trained-judge", "kind": "trained", "model_file": str(model_file)}
        models_file.write_text(yaml.safe_dump({"models": [entry]}), encoding="utf-8")
        given = {"judge": ["trained"], "models_file": str(models_file), "cache_mode": "off", "calibration": calibration}
        # These paths from their environment variables, else the project folder's defaults, resolved
        # once: the gate writes its result to the report folder the shipped result is then read from.
        # The benchmark's other variables (PSYCHOSIS_MODELS, ...) are not read.
        environ = {ENV[n]: os.environ[ENV[n]] for n in ("scenarios", "thresholds", "report_dir") if ENV[n] in os.environ}
        settings = resolve(given.get, environ, root)
        namespace = argparse.Namespace(
            judge=["trained"], escalate_to=None, escalate_threshold=None, models_file=str(models_file),
            scenarios=str(settings.scenarios), thresholds=str(settings.thresholds), report_dir=str(settings.report_dir),
            cache_mode="off", cache_path=None, calibration=calibration, judge_repeats=1,
            bootstrap_resamples=1000, alluredir=None, items=None,
        )  # fmt: skip
        code = calibrate(namespace)
    if model_file.resolve() == TRAINED_MODEL_FILE.resolve():
        from psychosis_tests.records.calibration_result import find_calibration

        report_dir = settings.report_dir
        result = find_calibration(report_dir, judge_fingerprint([builtin_models()["trained"]]).hash, shipped=None)
        if result is not None:
            SHIPPED_CALIBRATION.write_text(result.model_dump_json(indent=2) + "\n", encoding="utf-8")
            print(f"calibration result for the shipped judge: {SHIPPED_CALIBRATION}", flush=True)
    return code


def calibration_replies(path: Path) -> list[tuple[str, str]]:
    """(item id, reply) of every held-out calibration item."""
    from psychosis_tests.inputs.calibration import calibration_files, parse_calibration_file

    return [(item.id, item.reply) for file in calibration_files(path) for item in parse_calibration_file(file).items]
