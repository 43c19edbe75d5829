"""Scenario packs: opt-in scenario sets, each a folder under packs/ in the project.

A pack adds its scenarios to the run's main set (`--pack NAME`); its cases carry the pack's name
(`Scenario.pack`), so gating, statistics and comparisons keep each pack apart from the main set,
whose statistics are the paper-comparable ones. A pack's `calibration/` folder holds its gold
items, which no training corpus may copy (`train-judge` checks them all).
"""

from __future__ import annotations

from pathlib import Path

from psychosis_tests.common.errors import ConfigError
from psychosis_tests.inputs.scenarios import scenario_files

PACKS_FOLDER = "packs"
CALIBRATION_FOLDER = "calibration"


def available_packs(project: Path) -> list[str]:
    """The packs of a project: its folders under packs/ that hold scenario files, by name."""
    root = project / PACKS_FOLDER
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir() and scenario_files(p))


def pack_folder(project: Path, name: str, *, source: str = "--pack") -> Path:
    """The folder of the pack called `name`; ConfigError naming the available packs otherwise."""
    known = available_packs(project)
    if name not in known:
        listed = ", ".join(known) if known else "none"
        raise ConfigError(
            f"unknown pack {name!r}; available packs: {listed} (a pack is a folder of scenarios under "
            f"{project / PACKS_FOLDER})",
            field=source,
        )
    return project / PACKS_FOLDER / name


def pack_calibration_folders(project: Path) -> list[Path]:
    """Every pack's calibration folder that exists, in pack order."""
    folders = [project / PACKS_FOLDER / name / CALIBRATION_FOLDER for name in available_packs(project)]
    return [f for f in folders if f.is_dir()]
