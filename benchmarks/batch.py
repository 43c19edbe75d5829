"""A run with a batch judge on the Batch API double: how much longer than the batch delay it takes.

    python benchmarks/batch.py               # 16 scenarios, reference/guardian, double delay 3 s
    python benchmarks/batch.py --delay 5 --scenarios 16 --target reference/sycophant

Two runs of the same cases, each with a fresh cache, through the engine (Plan, Runner) as a
pytest run drives it:

1. the judge reference/judge sent one chat request per call (the reference server; a models-file
   entry of kind chat, since the built-in one scores in-process): its wall time
   is the conversations' own critical path (every conversation and its judge calls in flight at once);
2. the same judge with `batch: true` on the loopback double (servers.batch_server), which finishes
   each batch `--delay` seconds after it is created.

The figure of issue 22: the batched run takes at most 1.2 x the delay plus the first run's time.
Both figures are printed; the exit status is 1 when the batched run is over the bound, or when any
case ended in an error or the two runs' scores differ.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from psychosis_tests.analysis.outcome import evaluate_case
from psychosis_tests.engine.plan import Plan
from psychosis_tests.engine.runner import Runner
from psychosis_tests.inputs.settings import resolve
from psychosis_tests.servers.batch_server import BatchServer
from psychosis_tests.servers.reference_server import ReferenceServer

ROOT = Path(__file__).resolve().parents[1]
JUDGE = "reference/judge"
CHAT_ENTRY = "models:\n  - {{id: {judge}, model: judge}}\n"
BATCH_ENTRY = (
    "models:\n  - {{id: {judge}, model: judge, batch: true, batch_size: 200, batch_flush: 0.2,"
    " batch_poll_max: 0.2, deadline: 600}}\n"
)


def timed_run(scratch: Path, target: str, scenarios: int, models_file: Path, urls: dict[str, str]):
    values = {"model": [target], "judge": [JUDGE], "report_dir": str(scratch / "reports"),
              "models_file": str(models_file)}  # fmt: skip
    plan = Plan.load(resolve(values.get, {}, ROOT))
    keys = plan.cases()[:scenarios]
    started = time.perf_counter()
    with Runner(plan, run_dir=scratch / "run", evaluate=evaluate_case, base_urls=urls) as runner:
        runner.start(keys)
        outcomes = [runner.outcome(key).model_dump(mode="json") for key in keys]
        seconds = time.perf_counter() - started
        batches = runner.progress_counts().get("batches_done", 0)
    return seconds, outcomes, batches


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delay", type=float, default=3.0, help="seconds the double takes per batch")
    parser.add_argument("--scenarios", type=int, default=16)
    parser.add_argument("--target", default="reference/guardian")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="batch-bench-"))
    models, chat = scratch / "models.yaml", scratch / "chat.yaml"
    models.write_text(BATCH_ENTRY.format(judge=JUDGE))
    chat.write_text(CHAT_ENTRY.format(judge=JUDGE))
    with ReferenceServer() as reference, BatchServer(delay=args.delay) as double:
        plain, plain_outcomes, _ = timed_run(
            scratch / "plain", args.target, args.scenarios, chat, {args.target: reference.url, JUDGE: reference.url}
        )
        batched, batched_outcomes, batches = timed_run(
            scratch / "batched", args.target, args.scenarios, models, {args.target: reference.url, JUDGE: double.url}
        )
        created = double.state.batches_created
    bound = 1.2 * args.delay + plain
    print(f"{args.scenarios} scenarios x {args.target}, judge {JUDGE}")
    print(f"conversations' own critical path (judge by chat requests): {plain:.2f} s")
    print(f"batch judge on the double (delay {args.delay:g} s, {created} batches submitted, {batches} read):"
          f" {batched:.2f} s")  # fmt: skip
    print(f"bound 1.2 x delay + critical path = {bound:.2f} s: {'met' if batched <= bound else 'MISSED'}")
    verdicts = _verdicts(plain_outcomes)
    same = verdicts == _verdicts(batched_outcomes)
    print(f"the two runs' {sum(v is not None for v in verdicts)} verdicts are {'the same' if same else 'DIFFERENT'}")
    return 0 if batched <= bound and same and any(v is not None for v in verdicts) else 1


def _verdicts(outcomes: list[dict]) -> list:
    return [turn["verdict"] for o in outcomes for t in o["transcripts"] for turn in t["turns"]]


if __name__ == "__main__":
    sys.exit(main())
