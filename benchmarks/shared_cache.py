"""Calls paid by two runs started together on one response cache file.

    python benchmarks/shared_cache.py                 # -k "conduit and not control", 0.2 s a call
    python benchmarks/shared_cache.py -k conduit --latency 0.5

Starts one reference server (`reference/guardian` as the target, the server's `judge` as the judge,
so every call is counted), runs the selection once alone on a fresh cache, then twice at once
(two `pytest` processes, one fresh `--cache-path`), and prints each run's last line and the
requests the server received. Two runs on one cache should pay what one run alone pays.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from psychosis_tests.plugin import BENCHMARK_MODULE  # noqa: E402
from psychosis_tests.servers.reference_server import ReferenceServer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", default="conduit and not control", help="the selection both runs make")
    parser.add_argument("--latency", type=float, default=0.2, help="seconds the server takes per call")
    options = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PSYCHOSIS_")} | {
        "PSYCHOSIS_PROGRESS_INTERVAL": "0",
        "SHARED_CACHE_KEY": "not-needed",
    }
    with tempfile.TemporaryDirectory() as tmp, ReferenceServer(latency=options.latency) as server:
        folder = Path(tmp)
        models = [
            {"id": "target", "model": "guardian", "base_url": server.url, "api_key_env": "SHARED_CACHE_KEY"},
            {"id": "judge", "model": "judge", "base_url": server.url, "api_key_env": "SHARED_CACHE_KEY"},
        ]
        (folder / "models.yaml").write_text(yaml.safe_dump({"models": models}), encoding="utf-8")

        def command(report: str, cache: str) -> list[str]:
            return [
                sys.executable, "-m", "pytest", str(BENCHMARK_MODULE),
                "-p", "psychosis_tests.plugin", "-p", "no:cacheprovider",
                "-q", f"--report-dir={folder / report}", f"--cache-path={folder / cache}",
                f"--models-file={folder / 'models.yaml'}", "--model", "target", "--judge", "judge", "-k", options.k,
            ]

        def last_line(output: str) -> str:
            return output.strip().splitlines()[-1]

        alone = subprocess.run(command("alone", "alone.sqlite3"), env=env, cwd=folder, capture_output=True, text=True)
        print(f"alone:  {last_line(alone.stdout)}")
        paid_alone = server.request_count
        started = time.monotonic()
        runs = [
            subprocess.Popen(
                command(name, "shared.sqlite3"), env=env, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
            for name in ("first", "second")
        ]
        for name, run in zip(("first", "second"), runs):
            print(f"{name}:  {last_line(run.communicate()[0])}")
        took = time.monotonic() - started
        paid_together = server.request_count - paid_alone
        with sqlite3.connect(folder / "shared.sqlite3") as db:
            kept = db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
    print(
        f"one run alone paid {paid_alone} calls; two runs at once on one cache paid {paid_together} "
        f"({kept} answers kept), {took:.1f} s"
    )


if __name__ == "__main__":
    main()
