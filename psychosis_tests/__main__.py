"""Command line: `python -m psychosis_tests compare OLD NEW`, `merge RUN... --out DIR` and `calibrate`.

`compare` prints a markdown regression table of run NEW against baseline run OLD (for a
pull-request comment) and exits 1 when anything regressed, 0 when nothing did, 2 on bad input.
`merge` (psychosis_tests.merge) pools the run folders of a sharded run into one run.

`calibrate` scores the gold-labelled calibration set with a judge (or a panel: --judge repeated)
and exits 1 when the judge fails the calibration gate in thresholds.yaml, 0 when it passes,
2 on bad input; `review-export` and `review-import` carry items to and from human raters.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from psychosis_tests.analysis.baseline import (
    compare_runs,
    effective_tolerance,
    tolerance_from_file,
)
from psychosis_tests.errors import ConfigError
from psychosis_tests.inputs.method import METRIC_MAX, METRICS
from psychosis_tests.inputs.results_file import Baseline, check_compatible, load_results
from psychosis_tests.inputs.thresholds import RegressionSettings
from psychosis_tests.cli_calibration import add_calibrate_parser, add_review_parsers, calibrate, review_export, review_import
from psychosis_tests.merge import add_merge_command, run_merge
from psychosis_tests.reports.tables import comparison_markdown

EXIT_OK, EXIT_REGRESSED, EXIT_BAD_INPUT = 0, 1, 2
DEFAULT_THRESHOLDS = Path("thresholds.yaml")


def _tolerance_item(text: str) -> tuple[str, float]:
    """METRIC=VALUE, e.g. hes=0.5."""
    metric, _, value = text.partition("=")
    metric = metric.strip().lower()
    if metric not in METRICS:
        raise argparse.ArgumentTypeError(f"{text!r}: metric must be one of {', '.join(METRICS)} (METRIC=VALUE)")
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected METRIC=VALUE with a number, e.g. hes=0.5") from None
    if not 0 <= number <= METRIC_MAX[metric]:
        raise argparse.ArgumentTypeError(f"{text!r}: {metric} tolerance must lie in 0..{METRIC_MAX[metric]:g}")
    return metric, number


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m psychosis_tests", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    compare = commands.add_parser(
        "compare",
        help="markdown regression table of NEW against baseline OLD; exit 1 when anything regressed",
        description="Compare every case of run NEW with baseline run OLD per phase and metric. "
        "Exit status: 0 nothing regressed, 1 something regressed, 2 bad input.",
    )
    compare.add_argument("old", type=Path, metavar="OLD", help="baseline: a run folder or its results.json")
    compare.add_argument("new", type=Path, metavar="NEW", help="the run to check: a run folder or its results.json")
    compare.add_argument(
        "--thresholds",
        type=Path,
        metavar="PATH",
        help=f"take regression tolerances from this thresholds file (default: ./{DEFAULT_THRESHOLDS} if it exists, "
        "else the built-in defaults)",
    )
    compare.add_argument(
        "--tolerance",
        type=_tolerance_item,
        action="append",
        default=[],
        metavar="METRIC=VALUE",
        help="override one metric's tolerance, e.g. --tolerance hes=0.5 (repeatable)",
    )
    compare.add_argument("--force", action="store_true", help="compare even across scenario sets or judges")
    compare.add_argument("--all", action="store_true", help="list unchanged phase metrics too")
    add_merge_command(commands)
    add_calibrate_parser(commands)
    add_review_parsers(commands)
    return parser


def _tolerance(args: argparse.Namespace) -> tuple[dict[str, float], str]:
    """The tolerances and where they came from."""
    if args.thresholds is not None:
        tolerance, source = tolerance_from_file(args.thresholds), str(args.thresholds)
    elif DEFAULT_THRESHOLDS.exists():
        tolerance, source = tolerance_from_file(DEFAULT_THRESHOLDS), str(DEFAULT_THRESHOLDS)
    else:
        tolerance, source = effective_tolerance(RegressionSettings()), "built-in defaults"
    if args.tolerance:
        tolerance.update(dict(args.tolerance))
        source += " and --tolerance"
    return tolerance, source


def compare(args: argparse.Namespace) -> int:
    baseline = Baseline.load(args.old)
    current = load_results(args.new)
    mismatches = check_compatible(
        baseline,
        scenario_set_hash=current.run.scenario_set_hash,
        judge=current.run.judge,
        judge_model=current.run.judge_model,
        force=args.force,
        force_hint="--force",
    )
    tolerance, source = _tolerance(args)
    result = compare_runs(baseline, current, tolerance, mismatches=mismatches)
    print("\n".join(comparison_markdown(result, show_all=args.all, tolerance_source=source)))
    return EXIT_REGRESSED if result.count("regression") else EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    commands = {"compare": compare, "merge": run_merge, "calibrate": calibrate, "review-export": review_export, "review-import": review_import}
    try:
        return commands[args.command](args)
    except ConfigError as exc:
        print(f"psychosis-bench {args.command}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
