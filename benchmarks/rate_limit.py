"""Rate-limit benchmark: a whole pytest run against an endpoint that allows fewer requests than the caps send.

    python benchmarks/rate_limit.py               # 3 runs of the scenario below
    python benchmarks/rate_limit.py --runs 5

One reference server (`--latency 0.5 --rate-limit 12`: 12 requests admitted in each second, the
rest refused with HTTP 429 and `Retry-After: 1`) serves three targets (sycophant, guardian,
keyword-guard) of `max_concurrency` 4 each, so up to 12 requests are in flight, 24 a second,
twice what the endpoint admits. The run is the 16 delusion scenarios (48 cases, 576 target
calls), judged in-process by reference/judge, with a fresh cache. Each run prints its wall time,
the endpoint's own time (576 calls at 12 a second: 48 s) and every case that errored, with its
error. docs/reliability.md quotes its figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.speed import BENCHMARK_MODULE, start_reference  # noqa: E402

TARGETS = ("sycophant", "guardian", "keyword-guard")
SCENARIOS = 16
TURNS = 12


def run(folder: Path, url: str, cap: int) -> tuple[float, list[tuple[str, str]], int]:
    """One pytest run: its wall time, its errored cases (case, error) and how many cases it had."""
    models = folder / "models.yaml"
    models.write_text(
        "models:\n"
        + "".join(f"  - {{id: t-{name}, model: {name}, base_url: '{url}', max_concurrency: {cap}}}\n" for name in TARGETS)
    )
    args = [
        sys.executable, "-m", "pytest", str(BENCHMARK_MODULE), "-q", "-p", "no:cacheprovider",
        "--models-file", str(models), "--judge", "reference/judge",
        "--report-dir", str(folder / "reports"), "--cache-path", str(folder / "cache.sqlite3"),
        "-k", "not control",
    ]  # fmt: skip
    for name in TARGETS:
        args += ["--model", f"t-{name}"]
    env = {**os.environ, "PSYCHOSIS_PROGRESS_INTERVAL": "0"}
    began = time.perf_counter()
    done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - began
    found = sorted((folder / "reports").rglob("results.json"))
    if done.returncode not in (0, 1) or len(found) != 1:
        sys.stdout.write(done.stdout[-3000:] + done.stderr[-3000:])
        raise SystemExit(f"pytest exited {done.returncode}")
    cases = json.loads(found[0].read_text(encoding="utf-8"))["cases"]
    errored = [(f"{c['model']} {c['scenario']}", c["error"] or "") for c in cases if c["outcome"] == "error"]
    return wall, errored, len(cases)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="runs, each with a fresh server and cache (default 3)")
    parser.add_argument("--latency", type=float, default=0.5, help="seconds per request (default 0.5)")
    parser.add_argument("--rate-limit", type=int, default=12, help="requests admitted in any second (default 12)")
    parser.add_argument("--cap", type=int, default=4, help="max_concurrency of each target (default 4)")
    args = parser.parse_args()
    calls = len(TARGETS) * SCENARIOS * TURNS
    own = calls / args.rate_limit
    print(f"{len(TARGETS)} targets of cap {args.cap} on one endpoint: latency {args.latency:g} s, "
          f"{args.rate_limit} requests a second, {calls} calls, the endpoint's own time {own:.0f} s")  # fmt: skip
    print(f"{'run':>3} {'errored':>9} {'wall s':>7} {'/ own':>6}")
    for number in range(1, args.runs + 1):
        folder = Path(tempfile.mkdtemp(prefix="rate-limit-"))
        server, url = start_reference(args.latency, "--rate-limit", str(args.rate_limit))
        try:
            wall, errored, cases = run(folder, url, args.cap)
        finally:
            server.terminate()
            server.wait(timeout=10)
        print(f"{number:>3} {len(errored):>3} of {cases:<3} {wall:>7.1f} {wall / own:>6.2f}")
        for case, error in errored:
            print(f"      {error}")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
