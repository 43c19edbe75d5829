"""Speed benchmark: wall time of whole pytest runs against a reference server with injected latency.

    python benchmarks/speed.py            # W1 (plain and -n 8), W2, W3, W4
    python benchmarks/speed.py W2         # one workload

Each workload starts `python -m psychosis_tests.servers.reference_server --latency L` twice, as processes of
their own (one serves the targets, one the judge), writes a models file whose entries point at
them, runs `pytest` on the benchmark module in a subprocess with a fresh cache, and prints wall
time, the bound (the least time the calls could take) and their ratio. W3 replays W2's cache
with no server running.

Bounds: a conversation's critical path is its model calls plus the last judge call (the judge runs
while the model answers the next turn); an endpoint with cap C and latency L needs calls x L / C.
The bound of a workload is the larger of the two. W4 is adaptive mode at 24 turns: a third server
plays the user (reference/patient), so each turn's critical path is a user call then a model call.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from psychosis_tests.inputs.scenarios import load_scenarios  # noqa: E402

BENCHMARK_MODULE = ROOT / "psychosis_tests" / "test_benchmark.py"
TARGET_BEHAVIOURS = ("sycophant", "guardian", "keyword-guard", "noisy")


@dataclass
class Workload:
    name: str
    models: int
    latency: float
    cap: int
    xdist: str | None = None
    replay_of: str | None = None
    target: float = 1.0
    """Largest acceptable wall / bound ratio (or seconds, for replay)."""
    turns: int | None = None
    """--turns; None plays the scripts as written."""
    adaptive: bool = False
    """A user model (the reference patient, on its own server) writes every user turn."""


WORKLOADS = {
    "W1": Workload("W1", models=2, latency=2.0, cap=64, target=1.3),
    "W1-n8": Workload("W1-n8", models=2, latency=2.0, cap=64, xdist="8", target=1.3),
    "W2": Workload("W2", models=8, latency=0.5, cap=16, target=1.15),
    "W3": Workload("W3", models=8, latency=0.5, cap=16, replay_of="W2", target=10.0),
    "W4": Workload("W4", models=2, latency=0.5, cap=64, turns=24, adaptive=True, target=1.2),
}


def bound_seconds(work: Workload, scenarios: list) -> float:
    plans = [s.plan_turns(work.turns) for s in scenarios]
    model_calls = [len(p) for p in plans]
    judge_calls = [sum(1 for t in p if t.metrics) for p in plans]
    steps_per_turn = 2 if work.adaptive else 1  # the user call, then the model call
    critical_path = max(model_calls) * steps_per_turn * work.latency + work.latency
    per_model_endpoint = sum(model_calls) * work.latency / work.cap
    judge_endpoint = work.models * sum(judge_calls) * work.latency / work.cap
    user_endpoint = work.models * sum(model_calls) * work.latency / work.cap if work.adaptive else 0.0
    return max(critical_path, per_model_endpoint, judge_endpoint, user_endpoint)


def start_reference(latency: float, *options: str) -> tuple[subprocess.Popen, str]:
    """A reference server of its own with this latency (and any other server `options`), and its URL."""
    process = subprocess.Popen(
        [sys.executable, "-m", "psychosis_tests.servers.reference_server", "--port", "0", "--latency", str(latency), *options],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert process.stdout is not None
    url = process.stdout.readline().strip()
    if not url.startswith("http://127.0.0.1"):
        process.kill()
        raise SystemExit(f"reference server did not start (said {url!r})")
    return process, url


def models_file(folder: Path, url: str, judge_url: str, work: Workload, user_url: str = "") -> Path:
    lines = ["models:"]
    for i in range(work.models):
        behaviour = TARGET_BEHAVIOURS[i % len(TARGET_BEHAVIOURS)]
        lines.append(
            f"  - {{id: m{i}, model: {behaviour}, base_url: '{url}', max_concurrency: {work.cap}, params: {{seed: {i}}}}}"
        )
    lines.append(f"  - {{id: judge, model: judge, base_url: '{judge_url}', max_concurrency: {work.cap}}}")
    if user_url:
        lines.append(f"  - {{id: patient, model: patient, base_url: '{user_url}', max_concurrency: {work.cap}}}")
    path = folder / "models.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def run_pytest(work: Workload, folder: Path, models: Path, cache_mode: str) -> float:
    args = [
        sys.executable, "-m", "pytest", str(BENCHMARK_MODULE), "-q", "-p", "no:cacheprovider",
        "--models-file", str(models), "--judge", "judge",
        "--report-dir", str(folder / "reports"), "--cache-path", str(folder / "cache.sqlite3"),
        "--cache-mode", cache_mode,
        "-k", "not control",  # the workloads are the method's 16 delusion scenarios, as documented
    ]
    for i in range(work.models):
        args += ["--model", f"m{i}"]
    if work.xdist:
        args += ["-n", work.xdist]
    if work.turns:
        args += ["--turns", str(work.turns)]
    if work.adaptive:
        args += ["--user-model", "patient"]
    env = {**os.environ, "PSYCHOSIS_PROGRESS_INTERVAL": "0"}
    began = time.perf_counter()
    done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - began
    if done.returncode not in (0, 1):  # 1: some reference models fail their cases, as designed
        sys.stdout.write(done.stdout[-3000:] + done.stderr[-3000:])
        raise SystemExit(f"{work.name}: pytest exited {done.returncode}")
    if " error" in done.stdout.splitlines()[-1]:
        raise SystemExit(f"{work.name}: cases errored: {done.stdout.splitlines()[-1]}")
    return wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workloads", nargs="*", metavar="WORKLOAD", help=f"any of {', '.join(WORKLOADS)}; default: all")
    names = parser.parse_args().workloads or list(WORKLOADS)
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        parser.error(f"unknown workload {unknown[0]!r}; choose from {', '.join(WORKLOADS)}")
    if "W3" in names and "W2" not in names:
        names.insert(names.index("W3"), "W2")
    scenarios = [s for s in load_scenarios(ROOT / "scenarios") if s.kind != "control"]
    folders: dict[str, Path] = {}
    failed = False
    print(f"{'workload':<8} {'wall s':>8} {'bound s':>8} {'ratio':>6}  target")
    for name in names:
        work = WORKLOADS[name]
        if work.replay_of:
            folder = folders[work.replay_of]  # same cache and models file, and no server at all
            wall = run_pytest(work, folder, folder / "models.yaml", "replay")
            ok = wall <= work.target
            print(f"{name:<8} {wall:>8.1f} {'-':>8} {'-':>6}  <= {work.target:.0f} s wall  {'ok' if ok else 'MISSED'}")
        else:
            folder = Path(tempfile.mkdtemp(prefix=f"speed-{name}-"))
            folders[name] = folder
            # Targets and judge on separate servers, as with real providers: one Python HTTP
            # server answering every endpoint would itself become the bottleneck.
            (targets, url), (judge, judge_url) = start_reference(work.latency), start_reference(work.latency)
            servers = [targets, judge]
            user_url = ""
            if work.adaptive:
                user, user_url = start_reference(work.latency)
                servers.append(user)
            try:
                wall = run_pytest(work, folder, models_file(folder, url, judge_url, work, user_url), "use")
            finally:
                for server in servers:
                    server.terminate()
                    server.wait(timeout=10)
            bound = bound_seconds(work, scenarios)
            ratio = wall / bound
            ok = ratio <= work.target
            print(f"{name:<8} {wall:>8.1f} {bound:>8.1f} {ratio:>6.2f}  <= {work.target:.2f}x  {'ok' if ok else 'MISSED'}")
        failed |= not ok
        sys.stdout.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
