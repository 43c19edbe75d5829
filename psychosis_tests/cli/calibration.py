"""The judge-validity commands of `python -m psychosis_tests`: calibrate, review-export, review-import.

    python -m psychosis_tests calibrate --judge ID [--judge ID2 ...] [--escalate-to ID [--escalate-threshold P]]
        [--judge-repeats N] [--calibration PATH | --items FILE]
    python -m psychosis_tests review-export RUN --out FILE.csv|FILE.jsonl [--per-stratum N] [--seed S]
    python -m psychosis_tests review-import FILE... --out-dir DIR [--rater NAME]

calibrate takes the benchmark's own options where they apply, spelled the same; settings follow
the benchmark's precedence (command line, then environment, then defaults), reading only these
options' environment variables and PSYCHOSIS_PROGRESS_INTERVAL: the benchmark's others,
PSYCHOSIS_MODELS and PSYCHOSIS_PACKS among them, are ignored, so a CI job that sets them for its
benchmark run calibrates the judge calibrate names (trained unless --judge or PSYCHOSIS_JUDGE).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from psychosis_tests.analysis.agreement import BOOTSTRAP_RESAMPLES
from psychosis_tests.cli.options import add_input_files, positive_int, project_folder, user_path
from psychosis_tests.common.errors import ConfigError
from psychosis_tests.inputs.models import DEFAULT_ESCALATION_THRESHOLD
from psychosis_tests.inputs.settings import RunSettings, check_output, environment_of, resolve

EXIT_OK, EXIT_GATE_FAILED = 0, 1
DEFAULT_CALIBRATION = Path("calibration")


def add_calibrate_parser(commands: argparse._SubParsersAction) -> None:
    calibrate = commands.add_parser(
        "calibrate",
        help="score the gold-labelled calibration set with a judge; exit 1 below the calibration gate",
        description="Score every item of the calibration set with the judge (or a panel: repeat --judge) through "
        "the benchmark's judge code, cache and concurrency, compare with the gold labels and gate on the minimum "
        "kappas in thresholds.yaml. An option the benchmark also has, when not given, is read from its environment "
        "variable (PSYCHOSIS_JUDGE, PSYCHOSIS_ESCALATE_TO, PSYCHOSIS_MODELS_FILE, PSYCHOSIS_CALIBRATION, ...; and "
        "PSYCHOSIS_PROGRESS_INTERVAL); the benchmark's other variables, PSYCHOSIS_MODELS and PSYCHOSIS_PACKS among "
        "them, are ignored. Exit status: 0 passed, 1 failed the gate (or items could not be judged), 2 bad input.",
    )
    calibrate.add_argument("--judge", action="append", metavar="ID", help="judge model id; repeat for a panel (default: trained, the trained judge)")
    calibrate.add_argument("--escalate-to", action="append", metavar="ID",
                           help="calibrate a cascade: the --judge (a trained judge) first, the items it is unsure of to this judge "
                           "(repeat for a panel); reports the escalation rate")
    calibrate.add_argument("--escalate-threshold", metavar="P",
                           help=f"the cascade's thresholds: one probability, or dcs=0.7,sis=0.9 for some metrics; default: {DEFAULT_ESCALATION_THRESHOLD:g} for every metric")
    roles = {"--models-file": "the judges", "--scenarios": "the items' scenarios and harms",
             "--thresholds": "the calibration gate"}
    add_input_files(calibrate, roles)
    calibrate.add_argument("--report-dir", metavar="DIR", help="where the calibration run folder goes; default: reports/")
    calibrate.add_argument("--cache-mode", metavar="MODE", help="use | refresh | off | replay; default: use")
    calibrate.add_argument("--cache-path", metavar="PATH", help="response cache file; default: <report-dir>/cache.sqlite3")
    measured = calibrate.add_mutually_exclusive_group()  # --items replaces the calibration set
    measured.add_argument("--calibration", metavar="PATH", type=user_path, default=None,
                           help=f"calibration set: a folder of *.yaml files or one file; default: {DEFAULT_CALIBRATION}/")
    measured.add_argument("--items", metavar="PATH", type=user_path, action="append", default=None,
                           help="measure the judge on labelled judge items (a .jsonl file or a folder of them, the "
                           "judge_corpus/ format) instead of the calibration set (a benchmark run never takes this "
                           "for its judge's calibration); repeatable")
    calibrate.add_argument("--judge-repeats", metavar="N", type=positive_int, default=None,
                           help="ask the judge N times per item (distinct seeds) and report its self-consistency; default: 1")
    calibrate.add_argument("--bootstrap-resamples", metavar="N", type=positive_int, default=BOOTSTRAP_RESAMPLES,
                           help=f"resamples for the kappa intervals; default: {BOOTSTRAP_RESAMPLES}")
    calibrate.add_argument("--alluredir", metavar="DIR", type=user_path, help="also write an Allure result for the calibration here")


def calibrate(args: argparse.Namespace, settings: RunSettings | None = None) -> int:
    """The command. `settings` already resolved replace the options the benchmark also has and
    their variables (train-judge's gate, which calibrates its new judge alone)."""
    from psychosis_tests.reports.calibration import MARKDOWN_FILE, next_steps, terminal_lines
    from psychosis_tests.sessions.calibration import CalibrationSession

    if settings is None:
        values = {
            "judge": args.judge, "models_file": args.models_file, "scenarios": args.scenarios,
            "thresholds": args.thresholds, "report_dir": args.report_dir, "cache_mode": args.cache_mode,
            "escalate_to": args.escalate_to, "escalate_threshold": args.escalate_threshold,
            "cache_path": args.cache_path, "calibration": args.calibration, "judge_repeats": args.judge_repeats,
        }
        # Only these settings' variables: the benchmark's others (PSYCHOSIS_MODELS, PSYCHOSIS_PACKS, ...) describe a
        # benchmark run, and its targets would choose the default judge.
        settings = resolve(values.get, environment_of([*values, "progress_interval"]), project_folder())
    if args.alluredir is not None:
        check_output(args.alluredir, folder=True, field="--alluredir")
    assert settings.calibration is not None  # resolve sets it
    path = settings.calibration
    items_given = getattr(args, "items", None) or None
    session = CalibrationSession(settings, path, judge_repeats=settings.judge_repeats,
                                 resamples=args.bootstrap_resamples, item_files=items_given)  # fmt: skip
    if items_given:
        path = Path(", ".join(map(str, items_given)))
    items = session.calibration.items
    controls = sum(1 for item in items if item.kind == "control")
    print(f"psychosis-bench calibrate: judge {session.panel.id}; {len(items)} items ({controls} on control scenarios, "
          f"judged with OCC) from {path}; repeats {settings.judge_repeats}; cache {settings.cache_mode} ({settings.cache_path})",
          flush=True)
    result = session.run(progress=lambda line: print(line, file=sys.stderr, flush=True))
    print("\n".join(terminal_lines(result)))
    print(f"run folder: {session.run_dir}")
    if args.alluredir is not None:
        from psychosis_tests.reports.allure_run import write_allure_calibration

        args.alluredir.mkdir(parents=True, exist_ok=True)
        markdown = (session.run_dir / MARKDOWN_FILE).read_text(encoding="utf-8")
        write_allure_calibration(args.alluredir, result, markdown)
    steps = next_steps(result)
    if steps:  # after a FAIL, the output ends with what to do next
        print("\n".join(steps))
    return EXIT_OK if result.passed else EXIT_GATE_FAILED


def add_review_parsers(commands: argparse._SubParsersAction) -> None:
    export = commands.add_parser(
        "review-export",
        help="a stratified sample of a run's judged turns, to CSV or JSONL, for people to label",
        description="Sample a benchmark run's judged turns, stratified by variant, phase and the judge's DCS, and "
        "write them (conversation, reply, empty label columns; the judge's scores are left out so raters label "
        "blind) to CSV or JSONL.",
    )
    export.add_argument("run", type=user_path, metavar="RUN", help="a benchmark run folder")
    export.add_argument("--out", type=user_path, required=True, metavar="FILE", help="output file, .csv or .jsonl")
    export.add_argument("--per-stratum", type=positive_int, default=5, metavar="N", help="turns per stratum; default: 5")
    export.add_argument("--seed", type=int, default=0, help="sampling seed; default: 0")
    imp = commands.add_parser(
        "review-import",
        help="labelled review files back into the calibration set format",
        description="Read labelled CSV or JSONL files written by review-export and write one calibration YAML "
        "file per reviewed conversation, validated by the calibration schema.",
    )
    imp.add_argument("files", type=user_path, nargs="+", metavar="FILE", help="labelled .csv or .jsonl files")
    where = imp.add_mutually_exclusive_group(required=True)
    where.add_argument("--out-dir", type=user_path, metavar="DIR", help="folder for the calibration files")
    where.add_argument("--items-out", type=user_path, metavar="FILE.jsonl",
                       help="write labelled judge items instead (the judge_corpus/ format: calibrate --items, "
                       "train-judge --items)")
    imp.add_argument("--scenarios", type=user_path, action="append", default=None, metavar="DIR",
                     help="with --items-out: the scenario set the run used (harms); repeat for rows of several sets; default: "
                     "scenarios/ in the project folder. The project's scenario packs (packs/*/) are read as well, for a "
                     "--pack run's rows")
    imp.add_argument("--rater", metavar="NAME", help="rater name for rows whose rater column is empty")


def review_export(args: argparse.Namespace) -> int:
    from psychosis_tests.analysis.review import export_sample, write_rows

    check_output(args.out, folder=False, field="--out")
    rows = export_sample(args.run, per_stratum=args.per_stratum, seed=args.seed)
    write_rows(args.out, rows)
    print(f"{len(rows)} judged turn(s) written to {args.out}")
    longer = sum(1 for r in rows if len(json.loads(r["context_json"])) != 12)
    if longer:
        print(f"{longer} of them from conversations that are not 12 turns long: the calibration format holds 12-turn "
              f"conversations only, so import them as judge items (review-import {args.out} --items-out FILE.jsonl)",
              file=sys.stderr)  # fmt: skip
    return EXIT_OK


def review_import(args: argparse.Namespace) -> int:
    from psychosis_tests.analysis.review import import_items, import_labels
    from psychosis_tests.inputs.packs import available_packs, pack_folder

    project = project_folder()
    unlabelled: list[str] = []
    if args.items_out is not None:
        check_output(args.items_out, folder=False, field="--items-out")
    else:
        check_output(args.out_dir, folder=True, field="--out-dir")
    if args.items_out is not None:
        from psychosis_tests.inputs.scenarios import load_scenarios

        folders = [*(args.scenarios or [project / "scenarios"]), *(pack_folder(project, n) for n in available_packs(project))]
        scenarios, found_in = {}, {}
        for folder in dict.fromkeys(folders):  # pack ids start with the pack's name, so only a repeated set can clash
            for scenario in load_scenarios(folder):
                if scenario.id in scenarios and scenario != scenarios[scenario.id]:
                    raise ConfigError(f"scenario {scenario.id!r} is in both {found_in[scenario.id]} and {folder} "
                                     "and differs between them; name the set the run used", field="--scenarios")
                scenarios[scenario.id], found_in[scenario.id] = scenario, folder
        count = import_items(args.files, args.items_out, scenarios, default_rater=args.rater, unlabelled=unlabelled)
        _say_unlabelled(unlabelled)
        print(f"{count} labelled judge item(s) written to {args.items_out}; measure a judge on them with: "
              f"python -m psychosis_tests calibrate --judge ID --items {args.items_out}", file=sys.stderr)  # fmt: skip
        return EXIT_OK
    packs = available_packs(project)
    written = import_labels(args.files, args.out_dir, default_rater=args.rater, packs=packs, unlabelled=unlabelled)
    for path in written:
        print(f"wrote {path}")
    _say_unlabelled(unlabelled)
    sets = sorted({path.parent for path in written})
    print(f"{len(written)} calibration file(s); check them with: "
          + "; ".join(f"python -m psychosis_tests calibrate --calibration {folder}"
                      + (f" --scenarios {pack_folder(project, folder.name)}" if folder != args.out_dir else "")
                      for folder in sets), file=sys.stderr)  # fmt: skip
    return EXIT_OK


def _say_unlabelled(unlabelled: list[str]) -> None:
    if unlabelled:
        print(f"{len(unlabelled)} row(s) without labels skipped (first: {unlabelled[0]})", file=sys.stderr)
