"""Judging the calibration set: every item through the benchmark's own judge path.

Each item's conversation goes to `JudgePanel.score` (so `judge_reply`, its re-asks, judge modes
and panels are the benchmark's), through one Provider with the run's cache mode and cache file
and each judge's own concurrency cap. Every item (and every repeat of it, with its own seed and
cache entry) is in flight at once. A failed item is kept with its error, never scored.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from psychosis_tests.engine.cache import ResponseCache
from psychosis_tests.engine.panel import JudgePanel, PanelVerdict
from psychosis_tests.errors import CaseError
from psychosis_tests.inputs.calibration import CalibrationItem
from psychosis_tests.inputs.settings import CacheMode


@dataclass(frozen=True)
class ItemJudgement:
    """What the judge (or panel) said about one item, once per repeat; or why it could not."""

    item: CalibrationItem
    answers: tuple[PanelVerdict, ...]
    """One per repeat, in repeat order; empty when the item errored."""
    error: str | None = None

    def scores(self, repeat: int = 0) -> dict[str, int]:
        verdict = self.answers[repeat].verdict
        return {m: int(getattr(verdict, m)) for m in self.item.metrics}


async def judge_items(
    provider, panel: JudgePanel, items: Sequence[CalibrationItem], *, repeats: int = 1
) -> list[ItemJudgement]:
    """Judge every item `repeats` times, all at once; results in item order."""

    async def one(index: int, item: CalibrationItem) -> ItemJudgement:
        label = f"calibration {item.id}"
        try:
            answers = await asyncio.gather(
                *(
                    panel.score(
                        provider, list(item.conversation), item.metrics, item.scenario.judge_harm,
                        call_label=f"{label} repeat {r}", repeat=r, priority=index,
                    )
                    for r in range(repeats)
                )
            )
        except CaseError as exc:
            return ItemJudgement(item, (), str(exc))
        return ItemJudgement(item, tuple(answers))

    return list(await asyncio.gather(*(one(i, item) for i, item in enumerate(items))))


def judge_calibration_set(
    panel: JudgePanel,
    items: Sequence[CalibrationItem],
    *,
    cache_mode: CacheMode,
    cache_path: Path,
    base_urls: dict[str, str] | None = None,
    repeats: int = 1,
) -> list[ItemJudgement]:
    """Start what the judges need (the reference server for reference judges; `base_urls` holds
    the embedded model's address, started by the caller), judge every item, shut down."""
    from psychosis_tests.engine.providers import Provider

    urls = dict(base_urls or {})
    reference = None
    needs_reference = [j for j in panel.judges if j.served_by_suite == "reference"]
    if needs_reference and cache_mode != "replay":
        from psychosis_tests.servers.reference_server import ReferenceServer

        reference = ReferenceServer().start()
        urls.update({j.id: reference.url for j in needs_reference})
    cache = None if cache_mode == "off" else ResponseCache(cache_path)
    provider = Provider(cache=cache, cache_mode=cache_mode, base_urls=urls)

    async def run() -> list[ItemJudgement]:
        try:
            return await judge_items(provider, panel, items, repeats=repeats)
        finally:
            await provider.aclose()

    try:
        return asyncio.run(run())
    finally:
        if reference is not None:
            reference.stop()
        if cache is not None:
            cache.close()
