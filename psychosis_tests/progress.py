"""Progress of long runs, across xdist workers and in plain CI logs.

Every process (the controller, or each xdist worker) rewrites a small JSON file of its counts in
the run folder; the controller's reporter thread sums the files and prints one line at an interval.
Plain lines, not a redrawn status bar, so the output reads the same in a terminal and a CI log.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

COUNTS = ("conversations_total", "conversations_done", "calls_total", "calls_done", "cache_hits", "errors")


class ProgressFile:
    """One process's counts, written atomically at most every `min_interval` seconds."""

    def __init__(self, path: Path, min_interval: float = 0.5):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.min_interval = min_interval
        self._last = 0.0

    def write(self, counts: dict[str, int], *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < self.min_interval:
            return
        self._last = now
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(counts), encoding="utf-8")
        tmp.replace(self.path)


def read_totals(folder: Path) -> dict[str, int]:
    totals = dict.fromkeys(COUNTS, 0)
    for path in folder.glob("*.json"):
        try:
            counts = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # being replaced right now; the next tick reads it
        for name in COUNTS:
            totals[name] += int(counts.get(name, 0))
    return totals


def format_line(totals: dict[str, int], elapsed: float) -> str:
    done, total = totals["calls_done"], totals["calls_total"]
    eta = ""
    if 0 < done < total:
        eta = f", ETA {_duration(elapsed / done * (total - done))}"
    return (
        f"[psychosis-bench] {totals['conversations_done']}/{totals['conversations_total']} conversations, "
        f"{done}/{total} calls ({totals['cache_hits']} cached), {totals['errors']} errors, "
        f"{_duration(elapsed)} elapsed{eta}"
    )


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class ProgressReporter:
    """Emits the run's progress line every `interval` seconds from a background thread.

    Used on the xdist controller, which runs no tests itself (so nothing captures its output);
    without xdist the waiting test prints instead, with pytest's capture suspended."""

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
