"""The one way the tests run the benchmark through the real plugin: pytester, in-process.

Every run passes the benchmark module as its path and keeps its run folders and response cache in
the test's own tmp dir; it reads the repository's scenarios and thresholds unless the test points
`scenarios` or `thresholds` elsewhere. Options given to `run` come after these, so a test can pass
another `--report-dir=...` (pytest keeps the last value of an option). Path options are passed as
`--opt=value` here; tests/test_paths.py shows `--opt value` works the same.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

from psychosis_tests.plugin import BENCHMARK_MODULE

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = REPO / "scenarios"
THRESHOLDS = REPO / "thresholds.yaml"
OUTCOME_LINE = re.compile(r"^(PASSED|FAILED|ERROR) \S+::test_case\[([^\]]+)\]")


def subprocess_environment() -> dict[str, str]:
    """The environment for a suite command run in a subprocess: without the caller's PSYCHOSIS_
    settings (a CI job's PSYCHOSIS_TURNS=24 would change the run), progress lines off."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PSYCHOSIS_")} | {"PSYCHOSIS_PROGRESS_INTERVAL": "0"}


class BenchmarkRunner:
    """Runs the benchmark in pytester with this test's report folder, cache and inputs."""

    def __init__(self, pytester: pytest.Pytester):
        self.pytester = pytester
        self.path = pytester.path
        self.report_dir = pytester.path / "reports"
        self.cache_path = pytester.path / "cache.sqlite3"
        self.scenarios: Path = SCENARIOS
        self.thresholds: Path = THRESHOLDS

    def args(self, *extra: str) -> list[str]:
        """The command line of a run (also for a run in a process of its own)."""
        return [
            str(BENCHMARK_MODULE),
            "-p",
            "psychosis_tests.plugin",
            "-p",
            "no:cacheprovider",
            f"--report-dir={self.report_dir}",
            f"--cache-path={self.cache_path}",
            f"--scenarios={self.scenarios}",
            f"--thresholds={self.thresholds}",
            *extra,
        ]

    def run(self, *extra: str, plugins: tuple[object, ...] = ()) -> pytest.RunResult:
        return self.pytester.runpytest(*self.args(*extra), plugins=list(plugins))

    def run_dirs(self) -> list[Path]:
        if not self.report_dir.exists():
            return []
        return sorted(p for p in self.report_dir.iterdir() if p.is_dir())

    def only_run_dir(self) -> Path:
        (run_dir,) = self.run_dirs()
        return run_dir

    def run_adding_folder(self, *extra: str, plugins: tuple[object, ...] = ()) -> tuple[pytest.RunResult, Path | None]:
        """Run; return the result and the run folder this run added, None when it added none
        (a run refused before it started)."""
        before = set(self.run_dirs())
        result = self.run(*extra, plugins=plugins)
        added = sorted(set(self.run_dirs()) - before)
        assert len(added) <= 1, added
        return result, added[0] if added else None

    def run_creating_one_folder(self, *extra: str, plugins: tuple[object, ...] = ()) -> tuple[pytest.RunResult, Path]:
        """Run, and return the one run folder that this run added."""
        result, run_dir = self.run_adding_folder(*extra, plugins=plugins)
        assert run_dir is not None, result.outlines[-30:] + result.errlines
        return result, run_dir

    def write_models_file(self, models: list[dict], name: str = "models.yaml") -> Path:
        path = self.path / name
        path.write_text(yaml.safe_dump({"models": models}), encoding="utf-8")
        return path


def outcomes(result: pytest.RunResult) -> dict[str, str]:
    """Case id -> PASSED/FAILED/ERROR, from the `-rA` short summary."""
    return {m.group(2): m.group(1) for line in result.outlines if (m := OUTCOME_LINE.match(line))}
