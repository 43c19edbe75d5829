"""Options that several commands of `python -m psychosis_tests` take, spelled as the pytest options
of the same name."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path

INPUT_FILES: dict[str, tuple[str, str]] = {
    "--models-file": ("models file", "models.yaml"),
    "--scenarios": ("scenario folder", "scenarios/"),
    "--thresholds": ("thresholds file", "thresholds.yaml"),
}
"""flag -> (what it names, its default in the working directory)."""


def positive_int(text: str) -> int:
    """An option's value that must be a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be at least 1")
    return value


def add_input_files(parser: argparse.ArgumentParser, roles: Mapping[str, str], *, resolved_later: bool) -> None:
    """--models-file, --scenarios and --thresholds; `roles` says, per flag, what the command uses the file for.

    With `resolved_later` the value is the text given or None, for settings.resolve to weigh against
    the environment and the defaults; without, a Path that defaults to the file in the working
    directory."""
    for flag, (what, default) in INPUT_FILES.items():
        help_text = f"{what} ({roles[flag]}); default: {default}"
        if resolved_later:
            parser.add_argument(flag, metavar="PATH", help=help_text)
        else:
            parser.add_argument(flag, type=Path, default=Path(default), metavar="PATH", help=help_text)
