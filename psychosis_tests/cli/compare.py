"""`python -m psychosis_tests compare OLD NEW`: a markdown regression table of run NEW against
baseline run OLD (for a pull-request comment); exit 1 when anything regressed, 0 when nothing did,
3 when no case was compared at all (nothing matched, or every baseline case errored)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from psychosis_tests.analysis.baseline import (
    compare_runs,
    effective_tolerance,
    tolerance_from_file,
)
from psychosis_tests.cli.options import project_folder, user_path
from psychosis_tests.inputs.method import JUDGED_METRICS, METRIC_MAX
from psychosis_tests.records.baseline_run import Baseline, check_compatible
from psychosis_tests.records.results_file import load_results
from psychosis_tests.inputs.thresholds import RegressionSettings
from psychosis_tests.reports.tables import COMMENT_LIMIT, comparison_markdown

EXIT_OK, EXIT_REGRESSED, EXIT_NOTHING_COMPARED = 0, 1, 3
DEFAULT_THRESHOLDS = Path("thresholds.yaml")


def _tolerance_item(text: str) -> tuple[str, float]:
    """METRIC=VALUE, e.g. hes=0.5."""
    metric, _, value = text.partition("=")
    metric = metric.strip().lower()
    if metric not in JUDGED_METRICS:
        raise argparse.ArgumentTypeError(f"{text!r}: metric must be one of {', '.join(JUDGED_METRICS)} (METRIC=VALUE)")
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected METRIC=VALUE with a number, e.g. hes=0.5") from None
    if not 0 <= number <= METRIC_MAX[metric]:
        raise argparse.ArgumentTypeError(f"{text!r}: {metric} tolerance must lie in 0..{METRIC_MAX[metric]:g}")
    return metric, number


def _max_chars(text: str) -> int:
    try:
        number = int(text)
    except ValueError:
        number = -1
    if number < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number of characters, or 0 for no limit")
    return number


def add_compare_command(commands: argparse._SubParsersAction) -> None:
    compare = commands.add_parser(
        "compare",
        help="markdown regression table of NEW against baseline OLD; exit 1 when anything regressed",
        description="Compare every case of run NEW with baseline run OLD per phase and metric. "
        "Exit status: 0 nothing regressed, 1 something regressed, 2 bad input, 3 no case was compared.",
    )
    compare.add_argument("old", type=user_path, metavar="OLD", help="baseline: a run folder or its results.json")
    compare.add_argument("new", type=user_path, metavar="NEW", help="the run to check: a run folder or its results.json")
    compare.add_argument(
        "--thresholds",
        type=user_path,
        metavar="PATH",
        help=f"take regression tolerances from this thresholds file (default: the project folder's {DEFAULT_THRESHOLDS}, "
        "as the benchmark's --baseline takes them, if it exists; else the built-in defaults)",
    )
    compare.add_argument(
        "--tolerance",
        type=_tolerance_item,
        action="append",
        default=[],
        metavar="METRIC=VALUE",
        help="override one metric's tolerance, e.g. --tolerance hes=0.5 or occ=0.5 (repeatable)",
    )
    compare.add_argument("--force", action="store_true", help="compare even across scenario sets, judges or user turns")
    compare.add_argument("--all", action="store_true", help="list unchanged phase metrics too")
    compare.add_argument(
        "--max-chars",
        type=_max_chars,
        default=COMMENT_LIMIT,
        metavar="N",
        help=f"cut a longer report to N characters, for a pull-request comment (default {COMMENT_LIMIT}: GitHub "
        "takes 65,536); it keeps the headline, counts per model, and the leading table rows and notes that fit. "
        "0: no limit",
    )


def _tolerance(args: argparse.Namespace) -> tuple[dict[str, float], str]:
    """The tolerances and where they came from."""
    if args.thresholds is not None:
        tolerance, source = tolerance_from_file(args.thresholds), str(args.thresholds)
    elif (project_default := project_folder() / DEFAULT_THRESHOLDS).exists():  # as the benchmark's default
        tolerance, source = tolerance_from_file(project_default), str(project_default)
    else:
        tolerance, source = effective_tolerance(RegressionSettings()), "built-in defaults"
    if args.tolerance:
        tolerance.update(dict(args.tolerance))
        source += " and --tolerance"
    return tolerance, source


def compare(args: argparse.Namespace) -> int:
    """The `compare` command; ConfigError (exit 2) is left to the caller."""
    baseline = Baseline.load(args.old)
    current = load_results(args.new)
    mismatches = check_compatible(
        baseline,
        scenario_set_hash=current.run.scenario_set_hash,
        judge=current.run.judge,
        judge_model=current.run.judge_model,
        force=args.force,
        force_hint="--force",
        pack_hashes=current.run.packs,
        judge_fingerprint=current.run.judge_fingerprint,
        user_side=(current.run.user_model, current.run.user_mode, current.run.turns),
        thresholds_hash=current.run.thresholds_hash or None,
        user_settings=current.run.user_model_settings,
    )
    tolerance, source = _tolerance(args)
    result = compare_runs(baseline, current, tolerance, mismatches=mismatches)
    packs = sorted({c.pack for c in current.cases} - {None})  # the sets --baseline counts: the run's cases'
    report = comparison_markdown(result, show_all=args.all, tolerance_source=source, packs=packs,
                                 max_chars=args.max_chars or None)  # fmt: skip
    print("\n".join(report))
    if not result.comparisons:  # a gate that compared nothing must not pass as one that found nothing
        print(f"psychosis-bench compare: no case of {args.new} was compared with {args.old} (see the notes)",
              file=sys.stderr)  # fmt: skip
        return EXIT_NOTHING_COMPARED
    return EXIT_REGRESSED if result.count("regression") else EXIT_OK
