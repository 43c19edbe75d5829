"""Progress lines for long runs, readable in a terminal and in a plain CI log alike.

Only the engine's process (the controller) has counts. Without xdist the test that waits prints
a line every interval, with pytest's capture suspended; under xdist the controller runs no tests,
so a background thread prints instead.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

ETA_AFTER_CALLS = 20
"""Model calls answered before an ETA is given: the first calls of a run all start together and
answer together, so their pace says little about the rest."""

COUNTS = (
    "conversations_total", "conversations_done", "calls_total", "calls_done", "cache_hits", "errors",
    "retries", "waiting", "longest_wait", "batches_pending", "batches_done",
)


def format_line(totals: dict[str, float], elapsed: float) -> str:
    totals = {name: totals.get(name, 0) for name in COUNTS}
    done, total = totals["calls_done"], totals["calls_total"]
    # Cache hits take no time: the pace is that of the calls that reached a model.
    answered = done - totals["cache_hits"]
    eta = ""
    if answered >= ETA_AFTER_CALLS and done < total:
        eta = f", ETA {duration(elapsed / answered * (total - done))}"
    elif answered > 0 and done < total and total - totals["cache_hits"] >= ETA_AFTER_CALLS:
        # A run with fewer model calls than that left to make never gets an ETA: promise none.
        eta = f", ETA after {ETA_AFTER_CALLS} model calls ({answered} so far)"
    retrying = ""
    if totals["waiting"]:
        retrying = (
            f", {totals['waiting']} waiting to retry (up to {totals['longest_wait']:.1f} s, "
            f"as the endpoint asked or backing off)"
        )
    retried = f", {totals['retries']} retried" if totals["retries"] else ""
    batches = ""
    if totals["batches_pending"] or totals["batches_done"]:
        batches = f", batches {totals['batches_pending']} pending {totals['batches_done']} done"
    return (
        f"[psychosis-bench] {totals['conversations_done']}/{totals['conversations_total']} conversations, "
        f"{done}/{total} calls ({totals['cache_hits']} cached), {totals['errors']} errors{retried}{retrying}{batches}, "
        f"{duration(elapsed)} elapsed{eta}"
    )


def duration(seconds: float) -> str:
    """Seconds as `42s` or `3m07s`."""
    seconds = int(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class ProgressReporter:
    """Emits the run's progress line every `interval` seconds from a background thread."""

    def __init__(self, line: Callable[[], str], emit: Callable[[str], None], interval: float):
        self.line = line
        self.emit = emit
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="psychosis-progress", daemon=True)

    def start(self) -> None:
        if self.interval > 0:
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.emit(self.line())

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
