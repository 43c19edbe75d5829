"""The comparison in docs/adaptive.md: scripted vs adaptive, 12 vs 24 turns, on the reference models.

    python benchmarks/adaptive_comparison.py

Runs the benchmark once per configuration (4 reference targets x 16 scenarios, the built-in
reference server, no cache, runs in a temporary folder) and prints one markdown row per
configuration and model: cases passed/failed/errored, mean DCS/HES/SIS over scored turns, and
the trajectory metrics of the run's summary.json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHMARK_MODULE = ROOT / "psychosis_tests" / "test_benchmark.py"
CONFIGS: dict[str, list[str]] = {
    "scripted, 12 turns": [],
    "adaptive, 12 turns": ["--user-model", "reference/patient"],
    "scripted, 24 turns": ["--user-model", "reference/patient", "--user-mode", "scripted", "--turns", "24"],
    "adaptive, 24 turns": ["--user-model", "reference/patient", "--turns", "24"],
}
MODELS = ("reference/sycophant", "reference/guardian", "reference/keyword-guard", "reference/noisy")


def _num(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _turn(value: float | None) -> str:
    return "n/a" if value is None else f"t{value:.1f}"


def run(name: str, extra: list[str], folder: Path) -> list[str]:
    """One configuration's rows."""
    report_dir = folder / name.replace(", ", "-").replace(" ", "")
    args = [sys.executable, "-m", "pytest", str(BENCHMARK_MODULE), "-q", "-p", "no:cacheprovider",
            f"--report-dir={report_dir}", "--cache-mode=off", "--judge", "reference/judge",
            "-k", "not control", *extra]  # the comparison is on the 16 delusion scenarios, as documented
    for model in MODELS:
        args += ["--model", model]
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PSYCHOSIS_PROGRESS_INTERVAL": "0"})
    if done.returncode not in (0, 1):  # 1: the sycophant and others fail cases, as designed
        raise SystemExit(f"{name}: pytest exited {done.returncode}\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    (run_dir,) = [p for p in report_dir.iterdir() if p.is_dir()]
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    per_model = {r["model"]: r for r in summary["statistics"]["per_model"]}
    ranking = {r["model"]: r for r in summary["statistics"]["ranking"]}
    trajectories = {r["model"]: r for r in summary["trajectories"]}
    rows = []
    for model in MODELS:
        p, r, t = per_model[model], ranking[model], trajectories[model]
        n = t["conversations"]
        rows.append(
            f"| {name} | `{model}` | {r['passed']}/{r['failed']}/{r['error']} | {_num(p['dcs_mean'])} | "
            f"{_num(p['hes_mean'])} | {_num(p['sis_mean'])} | {t['validated']}/{n}, {_turn(t['first_validation_mean'])} | "
            f"{t['harmed']}/{n}, {_turn(t['first_harm_mean'])} | {_num(t['without_intervention_mean'], 1)} "
            f"(max {t['without_intervention_max']}) | {_num(t['drift_mean'], 3)} | {t['recovered']}/{n} |"
        )
    return rows


def main() -> int:
    folder = Path(tempfile.mkdtemp(prefix="adaptive-comparison-"))
    print("| configuration | model | passed/failed/errors | DCS | HES | SIS | validated, mean first DCS 2 | "
          "enabled harm, mean first HES 2 | longest run without help, mean (max) | DCS drift per turn | recovered |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, extra in CONFIGS.items():
        print("\n".join(run(name, extra, folder)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
