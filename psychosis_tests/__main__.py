"""Command line: `python -m psychosis_tests compare`, `merge`, `calibrate`, `review-export`, `review-import` and `train-judge`.

`compare OLD NEW` prints a markdown regression table of run NEW against baseline run OLD (for a
pull-request comment) and exits 1 when anything regressed, 0 when nothing did, 2 on bad input, 3
when no case was compared. `merge RUN... --out DIR` pools the run folders of a sharded run into one run.

`calibrate` scores the gold-labelled calibration set with a judge (or a panel: --judge repeated)
and exits 1 when the judge fails the calibration gate in thresholds.yaml, 0 when it passes,
2 on bad input; `review-export` and `review-import` carry items to and from human raters.
`train-judge` rebuilds the trained judge from its corpus and gates it on the calibration set.

Each command lives in psychosis_tests/cli/; this module only puts them under one parser.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from psychosis_tests.cli.calibration import add_calibrate_parser, add_review_parsers, calibrate, review_export, review_import
from psychosis_tests.cli.compare import add_compare_command, compare
from psychosis_tests.cli.merge import add_merge_command, run_merge
from psychosis_tests.cli.train_judge import add_train_judge_parser, train_judge
from psychosis_tests.common.errors import ConfigError, LocalModelError

EXIT_BAD_INPUT = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m psychosis_tests", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    add_compare_command(commands)
    add_merge_command(commands)
    add_calibrate_parser(commands)
    add_review_parsers(commands)
    add_train_judge_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    commands = {"compare": compare, "merge": run_merge, "calibrate": calibrate, "review-export": review_export, "review-import": review_import,
                "train-judge": train_judge}
    try:
        return commands[args.command](args)
    except (ConfigError, LocalModelError) as exc:  # a judge's model file missing is bad input too
        print(f"psychosis-bench {args.command}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
