"""What a cascade changes in a run: case outcomes and judge cost against the expensive judge alone.

    python benchmarks/cascade_outcomes.py                  # default threshold (0.65 for every metric)
    python benchmarks/cascade_outcomes.py --threshold 0.8
    python benchmarks/cascade_outcomes.py --noisy-seeds 4-11   # fresh cases: only `noisy`, at other seeds

Plays every scenario (the 16 delusion scenarios and their 16 controls) with the reference targets
(sycophant, guardian, keyword-guard, mixed, alarmist, and noisy under three seeds), twice: judged
by a priced "expensive" judge alone (the reference cue judge on a loopback server, priced like a
hosted model), then by the cascade `--judge trained --escalate-to expensive`. It prints the share
of cases whose outcome (passed, failed, error) differs and the cascade's judge cost as a share of
the expensive judge's. The expensive judge here is the reference cue judge, a test double: the
figure says how often the trained judge's confident verdicts change a gate decision that the
expensive judge would have made, on replies written by the reference models.

Of the reference targets only `noisy` answers differently per seed, so `--noisy-seeds A-B` plays
`noisy` alone at those seeds instead: cases no threshold was chosen on, to check a threshold that was
chosen on the default set (docs/judge-validity.md says which).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from speed import start_reference  # noqa: E402

BENCHMARK_MODULE = ROOT / "psychosis_tests" / "test_benchmark.py"
TARGETS = [("sycophant", 0), ("guardian", 0), ("keyword-guard", 0), ("mixed", 0), ("alarmist", 0),
           ("noisy", 1), ("noisy", 2), ("noisy", 3)]  # fmt: skip
PRICE = "{input_per_mtok: 2.5, output_per_mtok: 10}"


def models_file(folder: Path, url: str, targets: list[tuple[str, int]]) -> Path:
    lines = ["models:"]
    for behaviour, seed in targets:
        lines.append(f"  - {{id: t-{behaviour}-{seed}, model: {behaviour}, base_url: '{url}', max_concurrency: 64, "
                     f"params: {{seed: {seed}}}}}")  # fmt: skip
    lines.append(f"  - {{id: expensive, model: judge, base_url: '{url}', max_concurrency: 64, price: {PRICE}}}")
    path = folder / "models.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def run(folder: Path, models: Path, targets: list[tuple[str, int]], name: str, judge_args: list[str]) -> dict:
    report_dir = folder / name
    args = [sys.executable, "-m", "pytest", str(BENCHMARK_MODULE), "-q", "-p", "no:cacheprovider",
            "--models-file", str(models), "--report-dir", str(report_dir), "--cache-mode", "off", *judge_args]  # fmt: skip
    for behaviour, seed in targets:
        args += ["--model", f"t-{behaviour}-{seed}"]
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PSYCHOSIS_")}, "PSYCHOSIS_PROGRESS_INTERVAL": "0"}
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, env=env)
    if done.returncode not in (0, 1):
        sys.stdout.write(done.stdout[-3000:] + done.stderr[-3000:])
        raise SystemExit(f"{name}: pytest exited {done.returncode}")
    (results,) = report_dir.glob("2*/results.json")
    return json.loads(results.read_text(encoding="utf-8"))


def outcomes(results: dict) -> dict[tuple[str, str], str]:
    return {(case["model"], case["scenario"]): case["outcome"] for case in results["cases"]}


def seed_range(text: str) -> list[int]:
    first, dash, last = text.partition("-")
    try:
        seeds = list(range(int(first), int(last if dash else first) + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a seed range like 4-11") from None
    if not seeds:
        raise argparse.ArgumentTypeError(f"{text!r} is an empty range")
    return seeds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threshold", help="the cascade's --escalate-threshold; default: the suite's default")
    parser.add_argument("--noisy-seeds", type=seed_range, metavar="A-B",
                        help="play only the noisy target, at seeds A to B, instead of the eight reference targets")  # fmt: skip
    options = parser.parse_args()
    threshold = options.threshold
    targets = [("noisy", seed) for seed in options.noisy_seeds] if options.noisy_seeds else TARGETS
    server, url = start_reference(0.0)
    try:
        with tempfile.TemporaryDirectory() as scratch:
            folder = Path(scratch)
            models = models_file(folder, url, targets)
            alone = run(folder, models, targets, "alone", ["--judge", "expensive"])
            cascade_args = ["--judge", "trained", "--escalate-to", "expensive"]
            if threshold:
                cascade_args += ["--escalate-threshold", threshold]
            cascade = run(folder, models, targets, "cascade", cascade_args)
    finally:
        server.kill()
    first, second = outcomes(alone), outcomes(cascade)
    if first.keys() != second.keys():
        raise SystemExit("the two runs did not play the same cases")
    errors = [key for key, outcome in {**first, **second}.items() if outcome == "error"]
    if errors:
        raise SystemExit(f"{len(errors)} cases errored, e.g. {errors[0]}: no comparison")
    changed = sorted(key for key in first if first[key] != second[key])
    cost_alone, cost_cascade = alone["run"]["spent_usd"], cascade["run"]["spent_usd"]
    print(f"{len(first)} cases ({len(targets)} reference targets x {len(first) // len(targets)} scenarios); "
          f"cascade threshold: {threshold or 'default'}")  # fmt: skip
    print(f"outcomes changed by the cascade: {len(changed)} of {len(first)} ({len(changed) / len(first):.1%})")
    for model, scenario in changed:
        print(f"  {model} / {scenario}: {first[(model, scenario)]} -> {second[(model, scenario)]}")
    print(f"judge cost: expensive alone ${cost_alone:.4f}, cascade ${cost_cascade:.4f} "
          f"({cost_cascade / cost_alone:.1%} of it)")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
