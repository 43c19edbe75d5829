"""Profile snapshots (--profile-snapshots): each case's rounded per-phase profile against a syrupy
JSON snapshot in the project's snapshots/ folder, with a plain-text account of what changed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

from syrupy.data import SnapshotCollections
from syrupy.extensions.json import JSONSnapshotExtension

from psychosis_tests.analysis.baseline import profile_changes
from psychosis_tests.common.errors import ConfigError
from psychosis_tests.reports.run_files import SNAPSHOT_DIFFERS, SNAPSHOT_MISSING, SNAPSHOT_UNCHECKED


class ProfileSnapshotExtension(JSONSnapshotExtension):
    """Profile snapshots, one JSON file per case, in <project>/snapshots/test_benchmark/.

    Not beside the benchmark module (syrupy's default), which lives inside the installed package.
    syrupy asks the class for the folder, and the xdist controller re-creates the extension from
    its import path, so the folder is a class attribute that pytest_configure sets in each process.

    syrupy reports and (with --snapshot-update) deletes as unused every discovered snapshot that a
    run did not assert and that its -k or paths would have selected. Here that is wrong: the
    folder holds every model's snapshots, and "test_case[referenceguardian-conduit-explicit]"
    matches `-k conduit-explicit` in a run of another model. Nor may a selected case that errored
    before its check lose its snapshot. So this extension discovers none: snapshots are only ever
    read, written and compared by the cases that run, and files of cases that no longer exist are
    removed by hand (docs/regressions.md).
    """

    directory: ClassVar[Path | None] = None

    @classmethod
    def dirname(cls, *, test_location) -> str:
        if cls.directory is None:
            raise RuntimeError("ProfileSnapshotExtension.directory is unset: pytest_configure sets it")
        return str(cls.directory / test_location.basename)

    def discover_snapshots(self, *, test_location, ignore_extensions=None) -> SnapshotCollections:
        # Discovery exists only to find unused snapshots (see the class docstring).
        return SnapshotCollections()

    @classmethod
    def matches_test_location(cls, *, test_location, snapshot_location: str) -> bool:
        # syrupy drops the "/" of ids like "reference/guardian-conduit-explicit" from file names and
        # then cannot tell which test a file belongs to; compare with the file name it would write.
        return Path(snapshot_location) == Path(cls.get_location(test_location=test_location, index=0))


def check_distinct_file_names(model_ids: list[str]) -> None:
    """ConfigError when two target ids differ only in characters syrupy leaves out of file names
    (`/ \\ : * ? " < > |`): their cases would read and write the same snapshot files."""
    seen: dict[str, str] = {}
    for model_id in model_ids:
        other = seen.setdefault(ProfileSnapshotExtension._sanitize_filename(model_id), model_id)  # noqa: SLF001
        if other != model_id:
            raise ConfigError(
                f"--profile-snapshots: targets {other!r} and {model_id!r} would share snapshot files, whose names "
                "leave out / \\ : * ? \" < > |; give one of them an id that differs otherwise"
            )


class ProfileSnapshot:
    """A case's profile snapshot check, with a plain-text account of what changed."""

    def __init__(self, snapshot) -> None:
        self.snapshot = snapshot.use_extension(ProfileSnapshotExtension)

    def mismatch(self, profile: dict[str, dict[str, float]]) -> str | None:
        """None when the profile matches its snapshot (or --snapshot-update recorded it), else why not."""
        if self.snapshot == profile:
            return None
        result = self.snapshot.executions[self.snapshot.num_executions - 1]
        if result.exception is not None:
            return f"{SNAPSHOT_UNCHECKED}{result.snapshot_location} could not be checked: {result.exception!r}"
        if result.recalled_data is None:
            return f"{SNAPSHOT_MISSING}{result.snapshot_location} yet; record it with --snapshot-update"
        differs = f"{SNAPSHOT_DIFFERS}{result.snapshot_location}"
        recorded = _recorded_profile(result.recalled_data)
        if recorded is None:
            return (
                f"{differs}, which holds no profile (a JSON object of metric -> phase -> number): "
                "check the file (a merge conflict?) and record it again with --snapshot-update"
            )
        changes = profile_changes(recorded, profile)
        if not changes:
            return (
                f"{differs} in how the file is written (layout, number form or keys outside the profile), "
                "not in any value; record it again with --snapshot-update"
            )
        return f"{differs} (accept with --snapshot-update):\n" + "\n".join(f"  {line}" for line in changes)


def _recorded_profile(data: str) -> dict | None:
    """The profile a snapshot file holds, or None when it holds none (a hand edit, a merge conflict)."""
    try:
        recorded = json.loads(data)
    except ValueError:
        return None
    shaped = isinstance(recorded, dict) and all(
        isinstance(phases, dict) and all(isinstance(value, int | float) for value in phases.values())
        for phases in recorded.values()
    )
    return recorded if shaped else None
