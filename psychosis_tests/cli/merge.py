"""`python -m psychosis_tests merge RUN... --out DIR`: the command line of sessions.merge.

Exit status: 0 every case passed, 1 a case failed or errored, 2 the runs cannot be merged
(a ConfigError, left to __main__). The scenarios, thresholds and models file default to those of
the project folder, whose packs/ the shards' packs are read from, wherever the command is run."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from psychosis_tests.cli.options import INPUT_FILES, add_input_files, project_folder, user_path
from psychosis_tests.common.errors import ConfigError
from psychosis_tests.inputs.settings import check_output
from psychosis_tests.reports.tables import terminal_table
from psychosis_tests.sessions.merge import MergeInputs, merge_runs


def add_merge_command(commands: argparse._SubParsersAction) -> None:
    merge = commands.add_parser(
        "merge",
        help="pool the run folders of a sharded run into one run; exit 1 when any case failed or errored",
        description="Pool the per-turn verdicts of the runs (e.g. `pytest --shard K/N` jobs), score them again "
        "and write one run folder. Exit status: 0 every case passed, 1 a case failed or errored, "
        "2 the runs cannot be merged (overlap, a missing shard, another scenario set, judge, rubric, repeats or user turns, "
        "a target or user model sent to another model, endpoint or parameters, a cascade's shards gated with different "
        "thresholds files, a damaged case file, or an --allure-from folder that cannot be read). "
        "Defaults, and the shards' scenario packs, are taken from the project folder (the one holding pyproject.toml).",
    )
    merge.add_argument("runs", type=user_path, nargs="+", metavar="RUN", help="a shard's run folder (or its results.json)")
    merge.add_argument("--out", type=user_path, required=True, metavar="DIR", help="the merged run folder to write (new or empty)")
    roles = {"--models-file": "prices, model names", "--scenarios": "the ones the shards ran",
             "--thresholds": "the limits the merged cases are gated with"}
    add_input_files(merge, roles)  # None when not given: the project folder's
    merge.add_argument("--baseline", type=user_path, metavar="PATH", help="compare each case with this earlier run (folder or results.json)")
    merge.add_argument("--force-baseline", action="store_true", help="use --baseline even if its scenario set, judge or user turns differ")
    merge.add_argument("--alluredir", type=user_path, metavar="DIR", help="write one Allure results folder for the merged run here")
    merge.add_argument(
        "--allure-from", type=user_path, action="append", default=[], metavar="DIR",
        help="a shard's Allure results folder whose case results go into --alluredir (repeatable)",
    )


def run_merge(args: argparse.Namespace) -> int:
    """The `merge` command; ConfigError (exit 2) is left to the caller."""
    project = project_folder()
    if args.alluredir is not None:
        check_output(args.alluredir, folder=True, field="--alluredir")
    if args.allure_from:  # checked before the merge writes anything
        from psychosis_tests.reports.allure_run import check_allure_sources

        if args.alluredir is None:
            raise ConfigError("needs --alluredir, the folder its case results go into", field="--allure-from")
        check_allure_sources(args.allure_from)

    def given_or_default(value: str | None, flag: str) -> Path:
        """A path given is taken from the working directory; a default from the project folder."""
        return user_path(value) if value is not None else project / INPUT_FILES[flag][1]

    inputs = MergeInputs(
        given_or_default(args.models_file, "--models-file"),
        given_or_default(args.scenarios, "--scenarios"),
        given_or_default(args.thresholds, "--thresholds"),
        project,
        args.baseline,
        args.force_baseline,
    )
    summary, notes, merged = merge_runs(list(args.runs), args.out, inputs)
    if args.alluredir is not None:
        from psychosis_tests.reports.allure_run import copy_allure_results, write_allure_summary
        from psychosis_tests.reports.html_case import phase_table_html

        outcomes = {(c["model"], c["scenario"]): (c["outcome"], c["failure"]) for c in summary["cases"]}
        plan = merged.plan
        tables = {
            (key.model_id, key.scenario_id): phase_table_html(record.outcome, plan.scenarios[key.scenario_id], plan.thresholds)
            for key, record in merged.records.items()
            if record.outcome is not None
        }
        copy_allure_results(list(args.allure_from), args.alluredir, outcomes, tables)
        write_allure_summary(args.alluredir, summary, args.out)
    for line in [*notes, *terminal_table(summary)]:
        print(line)
    cases = summary["cases"]
    bad = [c for c in cases if c["outcome"] != "passed"]
    print(f"merged {len(args.runs)} run(s), {len(cases)} cases, into {args.out}")
    if bad:
        failed = sum(1 for c in bad if c["outcome"] == "failed")
        print(f"{failed} case(s) failed and {len(bad) - failed} errored", file=sys.stderr)
        return 1
    return 0
