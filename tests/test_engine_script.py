"""The README's engine examples, run as written in a fresh interpreter against the reference
models: they work, their results.json reads back equal to what was written, and nothing of
pytest is imported on the way (the engine is usable without pytest)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from psychosis_tests.records.results_file import load_results

REPO = Path(__file__).resolve().parents[1]
ENGINE_SECTION = re.compile(r"The engine is usable without pytest:(.*?)\n## ", re.S)
PYTEST_MODULES = ("pytest", "_pytest", "pluggy", "xdist", "syrupy", "allure_pytest", "psychosis_tests.plugin")


def readme_examples() -> str:
    section = ENGINE_SECTION.search((REPO / "README.md").read_text(encoding="utf-8"))
    assert section is not None, "README.md lost its section on the engine without pytest"
    blocks = re.findall(r"```python\n(.*?)```", section.group(1), re.S)
    assert len(blocks) == 3, blocks
    return "\n".join(blocks)


def test_the_readme_engine_examples_run_as_written_without_importing_pytest(tmp_path: Path) -> None:
    for name in ("scenarios", "packs", "thresholds.yaml", "models.yaml"):  # the project's inputs; reports go here
        (tmp_path / name).symlink_to(REPO / name)
    script = readme_examples() + (
        "\nimport sys\n"
        f"print('PYTEST MODULES', sorted(m for m in sys.modules if m.split('.')[0] in {PYTEST_MODULES!r} or m in {PYTEST_MODULES!r}))\n"
        "print('RUN DIR', run_dir)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert "reference/guardian-conduit-implicit []" in lines  # the first example: no breach
    assert "| 1 | `reference/guardian` | 32 | 0 | 0 |" in done.stdout  # the second: summary.md
    assert "PYTEST MODULES []" in lines
    run_dir = tmp_path / next(line.removeprefix("RUN DIR ") for line in lines if line.startswith("RUN DIR "))
    written = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
    assert load_results(run_dir).model_dump(mode="json") == written
