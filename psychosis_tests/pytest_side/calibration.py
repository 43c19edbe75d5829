"""The pytest side of the judge calibration: `pytest -m judge_calibration --judge ID`.

plugin.py registers this module for benchmark runs. With `-m judge_calibration` the plugin
configures a CalibrationSession instead of a benchmark session: the controller starts judging
the calibration set at once, in the background, and the `psychosis_calibration` fixture hands its
result to the tests of `test_judge_calibration.py` (xdist workers read the controller's file).
Without that mark, those tests are deselected, so a benchmark run never judges the set.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from psychosis_tests.inputs.settings import RunSettings
from psychosis_tests.pytest_side.results import allure_results_dir

if TYPE_CHECKING:  # scikit-learn and scipy load only when a calibration runs
    from psychosis_tests.sessions.calibration import CalibrationSession

CALIBRATION_MARK = "judge_calibration"
WORKER_INPUT = "psychosis_calibration_run"
calibration_key = pytest.StashKey["CalibrationSession"]()


def register_marker(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{CALIBRATION_MARK}: the judge calibration gate; runs only with -m {CALIBRATION_MARK}")


def is_calibration_run(config: pytest.Config) -> bool:
    """A -m expression that selects the judge_calibration mark (`-m judge_calibration`, not
    `-m "not judge_calibration"`): the judge calibration, not the benchmark."""
    markexpr = config.option.markexpr or ""
    if CALIBRATION_MARK not in markexpr:
        return False
    from _pytest.mark.expression import Expression

    return Expression.compile(markexpr).evaluate(lambda name, **_: name == CALIBRATION_MARK)


def configure_calibration(config: pytest.Config, settings: RunSettings) -> None:
    """Validate the calibration inputs (ConfigError on bad ones); the controller starts judging now."""
    from psychosis_tests.sessions.calibration import CalibrationSession

    assert settings.calibration is not None  # settings.resolve sets it
    workerinput = getattr(config, "workerinput", None)
    run_dir = Path(workerinput[WORKER_INPUT]) if workerinput is not None else None
    calibration = CalibrationSession(settings, settings.calibration, judge_repeats=settings.judge_repeats, run_dir=run_dir)
    if workerinput is None and not config.option.collectonly:
        calibration.start()
    config.stash[calibration_key] = calibration


def configure_node(node) -> None:
    """xdist controller: tell each worker which run folder the result will be written to."""
    calibration = node.config.stash.get(calibration_key, None)
    if calibration is not None:
        node.workerinput[WORKER_INPUT] = str(calibration.run_dir)


def header_lines(config: pytest.Config) -> list[str]:
    calibration = config.stash[calibration_key]
    items = calibration.calibration.items
    controls = sum(1 for item in items if item.kind == "control")
    return [
        f"psychosis-bench judge calibration: judge {calibration.panel.id}; {len(items)} items ({controls} on control "
        f"scenarios, judged with OCC) from {calibration.calibration.path}; repeats {calibration.judge_repeats}; "
        f"run folder {calibration.run_dir}"
    ]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without -m judge_calibration, deselect the calibration tests."""
    if is_calibration_run(config):
        return
    calibration = [item for item in items if item.get_closest_marker(CALIBRATION_MARK) is not None]
    if calibration:
        config.hook.pytest_deselected(items=calibration)
        items[:] = [item for item in items if item.get_closest_marker(CALIBRATION_MARK) is None]


@pytest.fixture(scope="session")
def psychosis_calibration(request: pytest.FixtureRequest):
    """The judge calibration result (judged once, by the controller); with --alluredir, also an Allure result."""
    calibration = request.config.stash.get(calibration_key, None)
    if calibration is None:
        raise pytest.UsageError(f"psychosis-bench: the calibration tests run with -m {CALIBRATION_MARK}")
    result = calibration.result()
    alluredir = allure_results_dir(request.config)
    if alluredir and not hasattr(request.config, "workerinput"):
        from psychosis_tests.reports.allure_run import write_allure_calibration
        from psychosis_tests.reports.calibration import MARKDOWN_FILE

        markdown = (calibration.run_dir / MARKDOWN_FILE).read_text(encoding="utf-8")
        write_allure_calibration(Path(alluredir), result, markdown)
    return result
