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
"""flag -> (what it names, its default in the project folder)."""
PROJECT_FILE = "pyproject.toml"


def project_folder() -> Path:
    """The project folder: where the commands take their defaults and scenario packs from, the same
    from the project's top, a sub-folder or outside it. In a checkout it is the folder holding this
    package and pyproject.toml, which is the benchmark's own (pytest's rootdir when it runs the
    benchmark module there); for an installed package, the nearest folder holding pyproject.toml
    from the working directory up (as pytest finds its rootdir), else the working directory."""
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / PROJECT_FILE).is_file():
        return checkout
    here = Path.cwd().resolve()
    return next((folder for folder in (here, *here.parents) if (folder / PROJECT_FILE).is_file()), here)


def user_path(text: str) -> Path:
    """A path option's value with `~` expanded, as the benchmark's path options are: the shell
    expands `--out ~/x` but not `--out=~/x`, which would otherwise name a folder `~` here."""
    return Path(text).expanduser()


def positive_int(text: str) -> int:
    """An option's value that must be a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be at least 1")
    return value


def add_input_files(parser: argparse.ArgumentParser, roles: Mapping[str, str]) -> None:
    """--models-file, --scenarios and --thresholds; `roles` says, per flag, what the command uses the file for.
    The value is the text given or None, for the command to weigh against the environment and the
    project folder's defaults."""
    for flag, (what, default) in INPUT_FILES.items():
        parser.add_argument(flag, metavar="PATH", help=f"{what} ({roles[flag]}); default: {default} in the project folder")
