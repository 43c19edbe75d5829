"""One judge calibration run, without pytest: `python -m psychosis_tests calibrate` and
`pytest -m judge_calibration` both go through it.

Every input is read and checked first (models file, judges and their keys, scenarios, the
thresholds file's calibration gate, the calibration set), then the suite's servers the judges
need start, every item is judged through the benchmark's own judge path, and the run folder
`<report-dir>/<run-id>-calibration/` gets calibration.json, calibration.md and answers.jsonl.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from psychosis_tests.analysis.agreement import BOOTSTRAP_RESAMPLES
from psychosis_tests.analysis.calibration import calibration_result
from psychosis_tests.common.errors import CaseError, ConfigError
from psychosis_tests.engine.calibration_run import judge_calibration_set
from psychosis_tests.engine.panel import JudgePanel
from psychosis_tests.inputs.calibration import CalibrationSet, load_calibration, set_hash
from psychosis_tests.records.calibration_result import (
    CALIBRATION_FILE,
    CalibrationResult,
)
from psychosis_tests.inputs.item_calibration import calibration_set_from_items
from psychosis_tests.inputs.judge_identity import judge_fingerprint
from psychosis_tests.inputs.models import judge_leaves, load_models_file
from psychosis_tests.inputs.scenarios import load_scenario_sets
from psychosis_tests.inputs.settings import MAX_JUDGE_REPEATS, RunSettings, select_judges
from psychosis_tests.inputs.thresholds import Thresholds, load_thresholds
from psychosis_tests.reports.calibration import write_calibration_files
from psychosis_tests.servers.suite import SuiteServers
from psychosis_tests.sessions.benchmark import new_run_id

ERROR_FILE = "calibration-error.txt"
"""Written instead of calibration.json when the run failed, so xdist workers stop waiting."""


class CalibrationSession:
    """Everything validated before any judge call; `run()` judges the set and writes the run folder."""

    def __init__(
        self,
        settings: RunSettings,
        calibration_path: Path,
        *,
        judge_repeats: int = 1,
        resamples: int = BOOTSTRAP_RESAMPLES,
        run_dir: Path | None = None,
        item_files: list[Path] | None = None,
    ):
        """`item_files`: labelled judge items (JSON Lines) to measure the judge on instead of the
        calibration set at `calibration_path`."""
        if not 1 <= judge_repeats <= MAX_JUDGE_REPEATS:
            raise ConfigError(
                f"--judge-repeats must be between 1 and {MAX_JUDGE_REPEATS}, got {judge_repeats}", field="--judge-repeats"
            )
        registry = load_models_file(settings.models_file, required=settings.models_file_given)
        judges = select_judges(registry, settings)
        for spec in judge_leaves(judges):
            spec.api_key()
        scenarios = {s.id: s for s in load_scenario_sets(settings.scenarios, settings.packs)}  # a --pack run's set may be a pack's
        self.settings = settings
        self.panel = JudgePanel(tuple(judges))
        self.panel.scorers  # noqa: B018 (an in-process judge's model file is checked before any item)
        self.thresholds: Thresholds = load_thresholds(settings.thresholds, scenario_ids=set(scenarios))
        self.calibration: CalibrationSet = (
            calibration_set_from_items(item_files) if item_files else load_calibration(calibration_path, scenarios)
        )
        self.item_files = [str(path) for path in item_files or []]
        self.set_sha256 = None if item_files else set_hash(calibration_path)
        """The set's contents as read (`set_hash`), which the result vouches for."""
        self.judge_repeats = judge_repeats
        self.resamples = resamples
        self.run_dir = run_dir or settings.report_dir / f"{new_run_id()}-calibration"
        self._thread: threading.Thread | None = None
        self._result: CalibrationResult | None = None
        self._error: BaseException | None = None

    def run(self, progress: Callable[[str], None] | None = None) -> CalibrationResult:
        """Judge every item (each judge through its own cap, the run's cache) and write the run folder.
        `progress` is given a progress line every progress_interval seconds of the settings."""
        settings = self.settings
        with SuiteServers.start(judge_leaves(self.panel.judges), log_dir=self.run_dir, cache_mode=settings.cache_mode) as servers:
            judgements = judge_calibration_set(
                self.panel,
                self.calibration.items,
                cache_mode=settings.cache_mode,
                cache_path=settings.cache_path,
                base_urls=servers.base_urls,
                repeats=self.judge_repeats,
                progress=progress,
                progress_interval=settings.progress_interval,
            )
        result = calibration_result(
            self.calibration,
            judgements,
            judge=self.panel.id,
            fingerprint=judge_fingerprint(self.panel.judges),
            gate=self.thresholds.calibration,
            run_id=self.run_dir.name,
            repeats=self.judge_repeats,
            resamples=self.resamples,
        ).model_copy(update={
            "item_files": self.item_files,  # a result on --items is no run's calibration
            "set_sha256": self.set_sha256,
            "gate_file": str(settings.thresholds),
        })  # fmt: skip
        write_calibration_files(self.run_dir, result, judgements)
        return result

    # -- under pytest: the controller runs it in the background, every process reads the result --
    def start(self) -> None:
        def target() -> None:
            try:
                self._result = self.run()
            except BaseException as exc:  # handed to whoever waits for the result
                self._error = exc
                self.run_dir.mkdir(parents=True, exist_ok=True)
                (self.run_dir / ERROR_FILE).write_text(f"{type(exc).__name__}: {exc}", encoding="utf-8")

        self._thread = threading.Thread(target=target, name="psychosis-calibration", daemon=True)
        self._thread.start()

    def result(self, poll: float = 0.2) -> CalibrationResult:
        """The result: from the run started here, or (on an xdist worker) from the controller's file."""
        if self._thread is not None:
            self._thread.join()
            if self._error is not None:
                raise self._error
            assert self._result is not None
            return self._result
        path, error = self.run_dir / CALIBRATION_FILE, self.run_dir / ERROR_FILE
        while not path.exists():
            if error.exists():
                raise CaseError(f"the calibration run failed: {error.read_text(encoding='utf-8')}")
            time.sleep(poll)
        return CalibrationResult.model_validate_json(path.read_text(encoding="utf-8"))
