"""Judging the calibration set: every item through the benchmark's own judge path.

Each item's conversation goes to `JudgePanel.score` (so `judge_reply`, its re-asks, judge modes
and panels are the benchmark's), through one Provider with the run's cache mode and cache file
and each judge's own concurrency cap. The judge is asked what a benchmark run asks on that
scenario and turn (`CalibrationItem.asked`): on a control scenario OCC too, with the rubric's
control paragraph, exactly the request a benchmark's control turn sends. Every item (and every
repeat of it, with its own seed and cache entry) is in flight at once. A failed item is kept with
its error, never scored.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from psychosis_tests.common.errors import CaseError
from psychosis_tests.engine.cache import ResponseCache
from psychosis_tests.engine.judges import JudgeCall
from psychosis_tests.engine.panel import JudgePanel, PanelVerdict
from psychosis_tests.engine.progress import ProgressReporter, duration
from psychosis_tests.inputs.calibration import CalibrationItem
from psychosis_tests.inputs.method import PHASE_NAMES
from psychosis_tests.inputs.settings import CacheMode


@dataclass(frozen=True)
class ItemJudgement:
    """What the judge (or panel) said about one item, once per repeat; or why it could not."""

    item: CalibrationItem
    answers: tuple[PanelVerdict, ...]
    """One per repeat, in repeat order; empty when the item errored."""
    error: str | None = None

    def scores(self, repeat: int = 0) -> dict[str, int]:
        """The judge's scores on the metrics the item is labelled on (those compared with gold)."""
        verdict = self.answers[repeat].verdict
        return {m: int(getattr(verdict, m)) for m in self.item.metrics}

    def asked_scores(self, repeat: int = 0) -> dict[str, int]:
        """Every score the judge gave, labelled or not (DCS and HES on a control item too)."""
        verdict = self.answers[repeat].verdict
        return {m: int(getattr(verdict, m)) for m in self.item.asked}


async def judge_items(
    provider,
    panel: JudgePanel,
    items: Sequence[CalibrationItem],
    *,
    repeats: int = 1,
    on_done: Callable[[ItemJudgement], None] | None = None,
) -> list[ItemJudgement]:
    """Judge every item `repeats` times, all at once; results in item order. `on_done` hears of
    each item as it is judged (or errors)."""

    async def one(index: int, item: CalibrationItem) -> ItemJudgement:
        label = f"calibration {item.id}"
        try:
            answers = await asyncio.gather(
                *(
                    panel.score(
                        list(item.conversation), item.asked, item.scenario.judge_harm,
                        JudgeCall(provider, f"{label} repeat {r}", repeat=r, priority=index,
                                  phase=PHASE_NAMES[item.phase - 1], kind=item.kind),
                    )
                    for r in range(repeats)
                )
            )
        except CaseError as exc:
            judgement = ItemJudgement(item, (), str(exc))
        else:
            judgement = ItemJudgement(item, tuple(answers))
        if on_done is not None:
            on_done(judgement)
        return judgement

    return list(await asyncio.gather(*(one(i, item) for i, item in enumerate(items))))


def judge_calibration_set(
    panel: JudgePanel,
    items: Sequence[CalibrationItem],
    *,
    cache_mode: CacheMode,
    cache_path: Path,
    base_urls: dict[str, str] | None = None,
    repeats: int = 1,
    progress: Callable[[str], None] | None = None,
    progress_interval: float = 10.0,
) -> list[ItemJudgement]:
    """Judge every item, then close the provider. `base_urls` holds the addresses of the suite's
    own servers the judges need, started by the caller (`servers.suite.SuiteServers`).
    `progress` is given a progress line every `progress_interval` seconds."""
    from psychosis_tests.engine.providers import Provider
    from psychosis_tests.engine.routing import RoutedTransport
    from psychosis_tests.inputs.models import judge_leaves
    from psychosis_tests.servers.identity import suite_identities

    cache = None if cache_mode == "off" else ResponseCache(cache_path, writes=cache_mode != "replay")
    # Keyed like a benchmark run's answers: by what answers (a local judge's file hash included).
    identities = suite_identities(judge_leaves(panel.judges), cache_path=cache.path) if cache is not None else {}
    provider = Provider(
        cache=cache, cache_mode=cache_mode, transport=RoutedTransport(base_urls, cache_path), builtin_identities=identities
    )

    judged: list[ItemJudgement] = []
    began = time.monotonic()

    def line() -> str:
        errors = sum(1 for j in list(judged) if j.error)
        counters = provider.counters
        eta = ""
        if judged and len(judged) < len(items) and counters.answered:
            eta = f", ETA {duration((time.monotonic() - began) / len(judged) * (len(items) - len(judged)))}"
        return (
            f"[psychosis-bench] calibrate: {len(judged)}/{len(items)} items judged, {errors} errors, "
            f"{counters.answered + counters.cache_hits} calls ({counters.cache_hits} cached), "
            f"{duration(time.monotonic() - began)} elapsed{eta}"
        )

    reporter = ProgressReporter(line, progress, progress_interval) if progress is not None else None

    async def run() -> list[ItemJudgement]:
        try:
            return await judge_items(provider, panel, items, repeats=repeats, on_done=judged.append)
        finally:
            await provider.aclose()

    if reporter is not None:
        reporter.start()
    try:
        return asyncio.run(run())
    finally:
        if reporter is not None:
            reporter.stop()
        if cache is not None:
            cache.close()
