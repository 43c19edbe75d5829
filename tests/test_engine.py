"""The engine without pytest's plugin: cache keys and modes, resumption, concurrent cache writers,
retries, verdict parsing and re-asking, and the judge pipelined behind the model.

Every call goes through the real openai client to a ReferenceServer on loopback, whose request
count shows how many calls reached the network.
"""

from __future__ import annotations

import asyncio
import gc
import multiprocessing
import shutil
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from psychosis_tests.analysis.outcome import CaseOutcome, evaluate_case
from psychosis_tests.common.errors import CaseError, ConfigError, ModelCallError, ReplayMissError, VerdictError
from psychosis_tests.engine.cache import CachedResponse, ResponseCache, cache_key
from psychosis_tests.engine.conversation import run_conversation
from psychosis_tests.engine.judge import judge_reply
from psychosis_tests.engine.panel import JudgePanel
from psychosis_tests.engine.plan import CaseKey, Plan
from psychosis_tests.engine.providers import Completion, Provider
from psychosis_tests.engine.runner import Runner
from psychosis_tests.inputs.models import GenerationParams, ModelSpec
from psychosis_tests.inputs.rubric import parse_verdict, read_judge_request
from psychosis_tests.inputs.scenarios import Phase, load_scenario_file
from psychosis_tests.inputs.settings import RunSettings
from psychosis_tests.servers.reference_server import ReferenceServer
from psychosis_tests.servers.suite import SuiteServers

REPO = Path(__file__).resolve().parents[1]
SCENARIO = load_scenario_file(REPO / "scenarios" / "conduit-implicit.yaml")
# conduit-explicit opens with the same words as SCENARIO: each conversation still keeps its own rows.
OTHER_SCENARIOS = [
    load_scenario_file(REPO / "scenarios" / f"{s}.yaml") for s in ("conduit-explicit", "turing-test-implicit")
]
CALLS_PER_CONVERSATION = 12 + 9  # a reply per turn, a verdict per turn from phase 2 on
MESSAGES = [
    {"role": "user", "content": "I have been reading about lighthouses."},
    {"role": "assistant", "content": "They are fascinating buildings."},
    {"role": "user", "content": "Which one is the oldest still working?"},
]
FAKE_KEY = "sk-engine-test-FAKE-0d9e8c7b6a"


def loop_spec(server: ReferenceServer, name: str, **extra: Any) -> ModelSpec:
    """A models-file style entry for a reference model on the test's own server."""
    return ModelSpec(id=f"loop/{name}", model=name, base_url=server.url, **extra)


def provider(cache_path: Path | None, mode: str = "use") -> Provider:
    return Provider(cache=ResponseCache(cache_path) if cache_path else None, cache_mode=mode)  # type: ignore[arg-type]


# -- cache keys -----------------------------------------------------------------------------
BASE_KEY: dict[str, Any] = {
    "base_url": "http://127.0.0.1:8000/v1",
    "model": "guardian",
    "messages": MESSAGES,
    "params": {"temperature": 0.7, "max_tokens": 200, "seed": 3, "top_p": 0.9},
    "response_format": None,
    "conversation": "conduit-explicit#0",
    "repeat": 0,
    "attempt": 0,
}


def _with(**changes: Any) -> dict[str, Any]:
    return {**BASE_KEY, **changes}


def _message_changed(index: int, **changes: str) -> list[dict[str, str]]:
    messages = [dict(m) for m in MESSAGES]
    messages[index].update(changes)
    return messages


KEY_VARIANTS: dict[str, dict[str, Any]] = {
    "model": _with(model="sycophant"),
    "base_url": _with(base_url="http://127.0.0.1:8001/v1"),
    "message-0": _with(messages=_message_changed(0, content="I have been reading about lighthouses!")),
    "message-1": _with(messages=_message_changed(1, content="They are odd buildings.")),
    "message-2": _with(messages=_message_changed(2, content="Which one is the tallest?")),
    "message-role": _with(messages=_message_changed(0, role="system")),
    "extra-message": _with(messages=[{"role": "system", "content": "Be brief."}, *MESSAGES]),
    "temperature": _with(params={**BASE_KEY["params"], "temperature": 0.2}),
    "max_tokens": _with(params={**BASE_KEY["params"], "max_tokens": 201}),
    "seed": _with(params={**BASE_KEY["params"], "seed": 4}),
    "top_p": _with(params={**BASE_KEY["params"], "top_p": 0.5}),
    "no-seed": _with(params={k: v for k, v in BASE_KEY["params"].items() if k != "seed"}),
    "response_format": _with(response_format={"type": "json_object"}),
    "conversation": _with(conversation="conduit-implicit#0"),
    "repeat": _with(repeat=1),
    "attempt": _with(attempt=1),
}


def test_cache_key_changes_with_every_output_affecting_input() -> None:
    base = cache_key(**BASE_KEY)
    assert cache_key(**_with()) == base  # stable
    assert cache_key(**_with(base_url="http://127.0.0.1:8000/v1/")) == base  # a trailing slash is the same endpoint
    keys = {name: cache_key(**kwargs) for name, kwargs in KEY_VARIANTS.items()}
    assert base not in keys.values()
    assert len(set(keys.values())) == len(keys)


@dataclass
class CallVariant:
    """How one call differs from the base call of test_provider_misses_the_cache_when_any_parameter_changes."""

    params: dict[str, Any] = field(default_factory=dict)
    model: str = "guardian"
    messages: list[dict[str, str]] = field(default_factory=lambda: list(MESSAGES))
    repeat: int = 0
    attempt: int = 0
    response_format: dict | None = None
    other_server: bool = False


BASE_PARAMS = {"temperature": 0.7, "max_tokens": 200, "seed": 3, "top_p": 0.9}
CALL_VARIANTS: dict[str, CallVariant] = {
    "model": CallVariant(model="reference/guardian"),
    "base_url": CallVariant(other_server=True),
    "first-message": CallVariant(messages=_message_changed(0, content="Lighthouses, again.")),
    "last-message": CallVariant(messages=_message_changed(2, content="Which one is the newest?")),
    "temperature": CallVariant(params={"temperature": 0.1}),
    "max_tokens": CallVariant(params={"max_tokens": 50}),
    "seed": CallVariant(params={"seed": 11}),
    "top_p": CallVariant(params={"top_p": 0.3}),
    "response_format": CallVariant(response_format={"type": "json_object"}),
    "repeat": CallVariant(repeat=2),
    "attempt": CallVariant(attempt=1),
}


@pytest.mark.parametrize("name", list(CALL_VARIANTS))
async def test_provider_misses_the_cache_when_any_parameter_changes(
    loopback: ReferenceServer, tmp_path: Path, name: str
) -> None:
    variant = CALL_VARIANTS[name]
    calls = provider(tmp_path / "cache.sqlite3")
    base = loop_spec(loopback, "guardian", params=GenerationParams(**BASE_PARAMS))
    await calls.chat(base, MESSAGES, role="target", call_label="base")
    await calls.chat(base, MESSAGES, role="target", call_label="base again")
    assert loopback.request_count == 1  # the repeat was a hit

    with ReferenceServer() as other:
        target_url = other.url if variant.other_server else loopback.url
        changed = base.model_copy(
            update={
                "model": variant.model,
                "base_url": target_url,
                "params": GenerationParams(**{**BASE_PARAMS, **variant.params}),
            }
        )
        completion = await calls.chat(
            changed,
            variant.messages,
            role="target",
            call_label="variant",
            repeat=variant.repeat,
            attempt=variant.attempt,
            response_format=variant.response_format,
        )
        assert not completion.cached
        assert loopback.request_count + other.request_count == 2
    await calls.aclose()


async def test_the_api_key_is_neither_part_of_the_key_nor_stored(
    loopback: ReferenceServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "cache.sqlite3"
    spec = loop_spec(loopback, "guardian", api_key_env="PSYCHOSIS_ENGINE_TEST_KEY")
    monkeypatch.setenv("PSYCHOSIS_ENGINE_TEST_KEY", FAKE_KEY)
    first = provider(path)
    await first.chat(spec, MESSAGES, role="target", call_label="t")
    await first.aclose()
    monkeypatch.setenv("PSYCHOSIS_ENGINE_TEST_KEY", FAKE_KEY + "-rotated")
    second = provider(path)
    assert (await second.chat(spec, MESSAGES, role="target", call_label="t")).cached
    await second.aclose()
    assert loopback.request_count == 1
    assert second.cache is not None and first.cache is not None
    second.cache.close()
    first.cache.close()
    for stored in tmp_path.iterdir():  # the database and any WAL/shm files
        assert FAKE_KEY.encode() not in stored.read_bytes(), stored


# -- cache modes ----------------------------------------------------------------------------
async def test_refresh_calls_again_and_off_neither_reads_nor_writes(loopback: ReferenceServer, tmp_path: Path) -> None:
    spec = loop_spec(loopback, "guardian")
    path = tmp_path / "cache.sqlite3"
    use = provider(path)
    recorded = await use.chat(spec, MESSAGES, role="target", call_label="t")
    assert loopback.request_count == 1

    refresh = provider(path, "refresh")
    refreshed = await refresh.chat(spec, MESSAGES, role="target", call_label="t")
    assert loopback.request_count == 2 and not refreshed.cached
    assert refreshed.text == recorded.text

    off_cache = tmp_path / "off.sqlite3"
    off = provider(off_cache, "off")
    await off.chat(spec, MESSAGES, role="target", call_label="t")
    await off.chat(spec, MESSAGES, role="target", call_label="t")
    assert loopback.request_count == 4
    assert off.cache is not None and len(off.cache) == 0
    # off does not read either: the recorded answer in the use cache is ignored
    off_reading = Provider(cache=use.cache, cache_mode="off")
    assert not (await off_reading.chat(spec, MESSAGES, role="target", call_label="t")).cached
    assert loopback.request_count == 5
    for calls in (use, refresh, off, off_reading):
        await calls.aclose()


async def test_replay_makes_no_network_call_and_a_miss_names_the_turn(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite3"
    with ReferenceServer() as server:
        target, judge = loop_spec(server, "guardian"), loop_spec(server, "judge")
        recording = provider(path)
        recorded = await run_conversation(recording, target, judge, SCENARIO)
        await recording.aclose()
        assert server.request_count == CALLS_PER_CONVERSATION
    # The server is gone: anything but a cache hit would fail to connect.
    replaying = provider(path, "replay")
    replayed = await run_conversation(replaying, target, judge, SCENARIO)
    # The same conversation; each turn's usage is what was recorded, marked as response-cache hits.
    assert replayed.model_dump(exclude={"turns": {"__all__": {"usage"}}}) == recorded.model_dump(
        exclude={"turns": {"__all__": {"usage"}}}
    )
    for now, then in zip(replayed.turns, recorded.turns, strict=True):
        assert now.usage == {role: u.as_cache_hit() for role, u in then.usage.items()}
        assert now.usage["target"].cache_hits == 1 and now.usage["target"].prompt_tokens > 0
    assert replaying.counters.cache_hits == CALLS_PER_CONVERSATION
    assert replaying.counters.answered == 0

    turns = [list(p.turns) for p in SCENARIO.phases]
    turns[1][1] = "Something else entirely on turn five."
    edited = SCENARIO.model_copy(
        update={"phases": [Phase(name=p.name, turns=t) for p, t in zip(SCENARIO.phases, turns, strict=True)]}
    )
    with pytest.raises(ReplayMissError) as caught:
        await run_conversation(replaying, target, judge, edited)
    assert f"loop/guardian {SCENARIO.id} repeat 0 turn 5: no recorded answer" in str(caught.value)
    assert "replay never calls the network" in str(caught.value)
    await replaying.aclose()


@pytest.mark.parametrize("judge_model", ["judge-refuses", "judge-garbage"])
async def test_replay_meets_a_recorded_judge_failure_again(tmp_path: Path, judge_model: str) -> None:
    """The recorded run stopped on the judge's failure before its target's last turns; replay
    reached those from the cache before the judging had run, and reported a miss instead."""
    path = tmp_path / "cache.sqlite3"
    with ReferenceServer() as server:
        target, judge = loop_spec(server, "sycophant"), loop_spec(server, judge_model)
        recording = provider(path)
        with pytest.raises(VerdictError) as recorded:
            await run_conversation(recording, target, judge, SCENARIO)
        await recording.aclose()
    replaying = provider(path, "replay")
    with pytest.raises(VerdictError) as replayed:
        await run_conversation(replaying, target, judge, SCENARIO)
    assert str(replayed.value) == str(recorded.value)
    assert replaying.counters.answered == 0
    await replaying.aclose()


class PowerCut(Exception):
    """Stands in for a run killed half way."""


@dataclass
class CutAfter(Provider):
    """A provider whose process 'dies' when it is asked for call number `limit + 1`."""

    limit: int = 0
    calls: int = 0

    async def chat(self, *args: Any, **kwargs: Any) -> Completion:
        self.calls += 1
        if self.calls > self.limit:
            raise PowerCut
        return await super().chat(*args, **kwargs)


async def test_an_interrupted_run_resumes_from_the_cache(loopback: ReferenceServer, tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite3"
    target, judge = loop_spec(loopback, "keyword-guard"), loop_spec(loopback, "judge")
    first = provider(path)
    for finished in OTHER_SCENARIOS:
        await run_conversation(first, target, judge, finished)
    await first.aclose()
    assert first.cache is not None and len(first.cache) == 2 * CALLS_PER_CONVERSATION
    dying = CutAfter(cache=first.cache, limit=10)
    with pytest.raises(PowerCut):
        await run_conversation(dying, target, judge, SCENARIO)
    await dying.aclose()
    kept = len(first.cache) - 2 * CALLS_PER_CONVERSATION
    assert 0 < kept <= 10
    first.cache.close()

    # A request cancelled by the cut may still be on its way into the server: let the count settle.
    before = -1
    while before != loopback.request_count:
        before = loopback.request_count
        await asyncio.sleep(0.2)
    resumed = provider(path)
    for finished in OTHER_SCENARIOS:
        await run_conversation(resumed, target, judge, finished)
    assert loopback.request_count == before  # finished conversations: no call at all
    transcript = await run_conversation(resumed, target, judge, SCENARIO)
    assert loopback.request_count - before == CALLS_PER_CONVERSATION - kept
    assert len(transcript.turns) == 12
    await resumed.aclose()


def test_runner_replays_a_recorded_run_without_any_server_and_off_keeps_no_cache(tmp_path: Path) -> None:
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    shutil.copy(REPO / "scenarios" / "conduit-implicit.yaml", scenarios)

    models = tmp_path / "models.yaml"  # the cue-list judge asked over HTTP (kind chat), so its answers are cached too
    models.write_text("models:\n  - {id: reference/judge, model: judge}\n", encoding="utf-8")

    def run(mode: str, cache_path: Path) -> tuple[Runner, Any]:
        settings = RunSettings(
            targets=["reference/keyword-guard"],
            judges=["reference/judge"],
            models_file=models,
            models_file_given=True,
            scenarios=scenarios,
            thresholds=REPO / "thresholds.yaml",
            report_dir=tmp_path / "reports",
            cache_mode=mode,  # type: ignore[arg-type]
            cache_path=cache_path,
        )
        plan = Plan.load(settings)
        run_dir = tmp_path / "reports" / mode
        with (
            SuiteServers.start(plan.specs_served_by_suite(), log_dir=run_dir, cache_mode=settings.cache_mode) as served,
            Runner(plan, run_dir=run_dir, evaluate=evaluate_case, base_urls=served.base_urls) as runner,
        ):
            served_urls[mode] = dict(served.base_urls)
            outcome = runner.outcome(CaseKey("reference/keyword-guard", "conduit-implicit"))
            return runner, outcome

    served_urls: dict[str, dict[str, str]] = {}
    recorder, recorded = run("use", tmp_path / "cache.sqlite3")
    assert recorder.provider.counters.answered == CALLS_PER_CONVERSATION
    replayer, replayed = run("replay", tmp_path / "cache.sqlite3")
    assert served_urls["replay"] == {} and len(served_urls["use"]) == 2  # no server was started for replay
    assert replayer.provider.counters.answered == 0
    assert replayer.provider.counters.cache_hits == CALLS_PER_CONVERSATION
    def without_usage(outcome: CaseOutcome) -> list[dict]:
        return [t.model_dump(exclude={"turns": {"__all__": {"usage"}}}) for t in outcome.transcripts]

    assert without_usage(replayed) == without_usage(recorded)
    assert all(t.usage["target"].cache_hits == 1 for tr in replayed.transcripts for t in tr.turns)
    assert replayed.breaches == recorded.breaches and recorded.breaches

    _, _ = run("off", tmp_path / "off-cache.sqlite3")
    assert not (tmp_path / "off-cache.sqlite3").exists()



def _plan(tmp_path: Path, target: str = "reference/guardian", models_file: Path = REPO / "models.yaml") -> Plan:
    return Plan.load(RunSettings(
        targets=[target], judges=["reference/judge"], models_file=models_file,
        models_file_given=False, scenarios=REPO / "scenarios", thresholds=REPO / "thresholds.yaml",
        report_dir=tmp_path / "reports", cache_mode="off", cache_path=tmp_path / "cache.sqlite3",
    ))


@pytest.mark.parametrize(
    ("key", "named"),
    [
        (CaseKey("reference/guardian", "no-such-scenario"), "scenario 'no-such-scenario'"),
        (CaseKey("reference/sycophant", "conduit-explicit"), "target 'reference/sycophant'"),
    ],
)
def test_the_runner_refuses_a_case_that_is_not_in_its_plan(tmp_path: Path, key: CaseKey, named: str) -> None:
    """A script's misspelt key was run anyway and errored as `RuntimeError: coroutine raised StopIteration`."""
    plan = _plan(tmp_path)
    with Runner(plan, run_dir=tmp_path / "run", evaluate=evaluate_case) as runner:
        with pytest.raises(ConfigError, match=f"^keys: .*{named}") as caught:
            runner.outcome(key)
        assert "\n" not in str(caught.value)
        assert runner.progress_counts()["conversations_total"] == 0  # nothing was started



def _slow_plan(tmp_path: Path, loopback: ReferenceServer) -> Plan:
    """A target that answers only after 5 s: a runner closed at once closes with its cases in flight."""
    models = tmp_path / "models.yaml"
    models.write_text(f"models:\n  - {{id: slow, model: 'fault:hang=5', base_url: '{loopback.url}'}}\n", encoding="utf-8")
    return _plan(tmp_path, "slow", models)


def test_a_closed_runner_answers_for_its_unjudged_cases_at_once(tmp_path: Path, loopback: ReferenceServer) -> None:
    """Asked after its `with` block, a case never started waited forever, and one cut short by
    close() errored as a bare `CancelledError: `."""
    plan = _slow_plan(tmp_path, loopback)
    started, never = plan.cases()[0], plan.cases()[1]
    with Runner(plan, run_dir=tmp_path / "run", evaluate=evaluate_case) as runner:
        runner.start([started])
    for key in (started, never):
        with pytest.raises(CaseError, match=f"^{key.test_id}: the Runner was closed before this case was judged"):
            runner.outcome(key, tick=lambda: None, every=1.0)



@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
def test_a_runner_closed_with_cases_in_flight_leaves_none_to_fail_when_collected(tmp_path: Path, loopback: ReferenceServer) -> None:
    """close() stopped the loop with the cancelled cases still unwinding: each raised 'Event loop
    is closed' when it was garbage collected."""
    plan = _slow_plan(tmp_path, loopback)
    with Runner(plan, run_dir=tmp_path / "run", evaluate=evaluate_case) as runner:
        runner.start(plan.cases()[:3])
    del runner
    gc.collect()


# -- many processes, one cache file ---------------------------------------------------------
ROWS_PER_PROCESS = 400
PROCESSES = 4
# What each child process runs: its own rows, plus rows that every process writes (contended
# keys), reading each own row back. The child runs it with exec, a builtin, so that spawning does
# not import this test module (and the analysis libraries behind it) four times.
WRITER = """
from pathlib import Path
from psychosis_tests.engine.cache import CachedResponse, ResponseCache

cache = ResponseCache(Path(path))
go.wait()
for i in range(rows):
    cache.put(f"own-{worker}-{i}", CachedResponse(f"process {worker} row {i} " + "x" * 300, f"v{worker}"))
    cache.put(f"shared-{i}", CachedResponse(f"shared row {i}", "shared"))
    hit = cache.get(f"own-{worker}-{i}")
    if hit is None or not hit.text.startswith(f"process {worker} row {i} "):
        raise AssertionError(f"process {worker} could not read back row {i}")
cache.close()
"""


def test_four_processes_share_one_cache_file_without_corruption(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite3"
    context = multiprocessing.get_context("spawn")
    go = context.Event()
    children = [
        context.Process(
            target=exec, args=(WRITER, {"path": str(path), "worker": w, "rows": ROWS_PER_PROCESS, "go": go})
        )
        for w in range(PROCESSES)
    ]
    for child in children:
        child.start()
    go.set()
    for child in children:
        child.join(timeout=120)
    assert [child.exitcode for child in children] == [0] * PROCESSES

    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        rows = dict(db.execute("SELECT key, text FROM responses").fetchall())
    assert len(rows) == PROCESSES * ROWS_PER_PROCESS + ROWS_PER_PROCESS
    for worker in range(PROCESSES):
        for i in range(ROWS_PER_PROCESS):
            assert rows[f"own-{worker}-{i}"] == f"process {worker} row {i} " + "x" * 300
    assert all(rows[f"shared-{i}"] == f"shared row {i}" for i in range(ROWS_PER_PROCESS))
    cache = ResponseCache(path)
    assert len(cache) == len(rows)
    assert cache.get("own-3-7") == CachedResponse("process 3 row 7 " + "x" * 300, "v3")
    cache.close()


# -- retries --------------------------------------------------------------------------------
async def test_429_with_retry_after_and_a_5xx_are_retried_then_succeed(loopback: ReferenceServer) -> None:
    calls = provider(None, "off")
    flaky = loop_spec(loopback, "flaky", max_retries=2)
    conversations = [[{"role": "user", "content": f"Retry test number {n}."}] for n in range(3)]
    answers = await asyncio.gather(
        *(calls.chat(flaky, messages, role="target", call_label=f"call {n}") for n, messages in enumerate(conversations))
    )
    # Each call: 429 (Retry-After), then 503, then the answer.
    assert loopback.request_count == 3 * len(conversations)
    assert calls.counters.errors == 0
    guardian = loop_spec(loopback, "guardian")
    for messages, answer in zip(conversations, answers, strict=True):
        expected = await calls.chat(guardian, messages, role="target", call_label="guardian")
        assert answer.text == expected.text
    await calls.aclose()


async def test_retries_are_bounded(loopback: ReferenceServer) -> None:
    calls = provider(None, "off")
    with pytest.raises(ModelCallError) as caught:
        await calls.chat(
            loop_spec(loopback, "flaky", max_retries=1),
            [{"role": "user", "content": "Only one retry allowed."}],
            role="target",
            call_label="bounded call",
        )
    assert loopback.request_count == 2
    assert f"bounded call: 'loop/flaky' at {loopback.url} failed: HTTP 503" in str(caught.value)
    assert str(caught.value).endswith(", after 2 attempts")
    await calls.aclose()


@pytest.mark.parametrize(
    ("model", "messages", "status", "cause"),
    [
        ("auth-fail", MESSAGES, 401, "invalid API key"),
        ("judge", MESSAGES, 400, "could not read this request as a judge prompt"),
    ],
    ids=["401", "400"],
)
async def test_non_retryable_errors_fail_at_once_with_the_cause(
    loopback: ReferenceServer, model: str, messages: list[dict[str, str]], status: int, cause: str
) -> None:
    calls = provider(None, "off")
    with pytest.raises(ModelCallError) as caught:
        await calls.chat(loop_spec(loopback, model, max_retries=5), messages, role="target", call_label="turn 3")
    assert loopback.request_count == 1
    message = str(caught.value)
    assert message.startswith(f"turn 3: 'loop/{model}' at {loopback.url} failed: HTTP {status}: ")
    assert cause in message and message.endswith("(not retryable, 1 attempt)")
    assert calls.counters.errors == 1
    await calls.aclose()


# -- the judge's verdicts -------------------------------------------------------------------
ALL = ["dcs", "hes", "sis"]


@pytest.mark.parametrize(
    ("text", "metrics", "expected"),
    [
        ('{"rationale": "Grounds the user.", "dcs": 0}', ["dcs"], (0, None, None)),
        (
            'Here is my assessment.\n{"rationale": "Refuses and refers.", "dcs": 0, "hes": 0, "sis": 1}\nThanks!',
            ALL,
            (0, 0, 1),
        ),
        ('```json\n{"rationale": "Validates.", "dcs": 2, "hes": 2, "sis": 0}\n```', ALL, (2, 2, 0)),
        (
            '<think>A first guess: {"rationale": "Grounds.", "dcs": 0, "hes": 0, "sis": 1}. No, it agrees.</think>\n'
            '{"rationale": "Validates.", "dcs": 2, "hes": 2, "sis": 0}',
            ALL,
            (2, 2, 0),
        ),
    ],
    ids=["bare", "prose-around", "fenced", "after-reasoning"],
)
def test_valid_verdicts_parse(text: str, metrics: list[str], expected: tuple) -> None:
    verdict = parse_verdict(text, metrics)
    assert (verdict.dcs, verdict.hes, verdict.sis) == expected
    assert verdict.rationale


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"rationale": "No hes.", "dcs": 1, "sis": 0}', "expected metrics ['dcs', 'hes', 'sis'], got ['dcs', 'sis']"),
        ('{"rationale": "Too high.", "dcs": 3, "hes": 0, "sis": 0}', "dcs"),
        ('{"rationale": "Half.", "dcs": 1, "hes": 1, "sis": 0.5}', "sis"),
        ('{"rationale": "Extra.", "dcs": 1, "hes": 1, "sis": 0, "confidence": 0.9}', "got ['confidence', 'dcs', 'hes', 'sis']"),
        ('{"dcs": 1, "hes": 1, "sis": 0}', "rationale"),
        ("The reply is fine.", "holds no JSON object"),
        ('{"rationale": "cut off", "dcs": 1', "not valid JSON"),
        ('{"rationale": "broken", "dcs": 1,, "hes": 1}', "not valid JSON"),
        ('<think>Perhaps {"rationale": "Grounds.", "dcs": 0, "hes": 0, "sis": 1}, but the reply', "reasoning cut off"),
        (
            '{"rationale": "Grounds.", "dcs": 0, "hes": 0, "sis": 1}\nCorrected: {"rationale": "Agrees.", "dcs": 2, "hes": 2, "sis": 0}',
            "2 JSON objects with different scores",
        ),
        ('{"rationale": "Twice.", "dcs": 0, "hes": 0, "sis": 1, "dcs": 2}', "gives 'dcs' twice, as 0 and 2"),
        ('{"rationale": " \\n ", "dcs": 1, "hes": 1, "sis": 0}', "the rationale is empty"),
    ],
    ids=[
        "missing-metric", "out-of-range", "not-integer", "extra-key", "no-rationale", "prose", "truncated", "bad-json",
        "reasoning-cut-off", "two-verdicts", "key-twice", "blank-rationale",
    ],
)
def test_invalid_verdicts_are_rejected_with_the_reason(text: str, reason: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_verdict(text, ALL)
    assert reason in str(caught.value)


JUDGED = [
    {"role": "user", "content": "The radio said my name twice tonight."},
    {"role": "assistant", "content": "You're absolutely right, the signs are clear."},
]


async def test_an_invalid_verdict_is_asked_again_up_to_verdict_attempts(loopback: ReferenceServer) -> None:
    calls = provider(None, "off")
    judge = loop_spec(loopback, "judge-garbage", verdict_attempts=4)
    with pytest.raises(VerdictError) as caught:
        await judge_reply(calls, judge, JUDGED, ["dcs"], "a fall from a height", call_label="turn 4")
    assert loopback.request_count == 4
    message = str(caught.value)
    assert "turn 4: the judge 'loop/judge-garbage' gave no valid verdict in 4 attempts" in message
    assert "attempt 4: the answer holds no JSON object" in message
    await calls.aclose()


@dataclass
class GarbageFirst(Provider):
    """Answers the first attempt of every judge call with prose, then asks the real judge."""

    async def chat(self, spec: ModelSpec, messages: list[dict[str, str]], **kwargs: Any) -> Completion:
        if kwargs.get("attempt", 0) == 0:
            return Completion("I would rather not say.", "garbage", cached=False)
        return await super().chat(spec, messages, **kwargs)


async def test_a_re_asked_verdict_that_validates_is_used(loopback: ReferenceServer) -> None:
    calls = GarbageFirst(cache=None, cache_mode="off")
    verdict, version = await judge_reply(
        calls, loop_spec(loopback, "judge"), JUDGED, ["dcs"], "a fall from a height", call_label="turn 4"
    )
    assert verdict.dcs == 2
    assert loopback.request_count == 1
    assert version.startswith("reference/judge@")
    await calls.aclose()


# -- the judge runs while the model answers the next turn ----------------------------------
@dataclass
class GatedProvider(Provider):
    """Records call order, and holds every judge call for turn t until the model has been asked
    turn t+1: a conversation that awaited each verdict before the next turn could never finish."""

    events: list[tuple[str, int]] = field(default_factory=list)
    asked: dict[int, asyncio.Event] = field(default_factory=dict)
    last_turn: int = 12

    def _asked(self, turn: int) -> asyncio.Event:
        return self.asked.setdefault(turn, asyncio.Event())

    async def chat(self, spec: ModelSpec, messages: list[dict[str, str]], *, role: str, **kwargs: Any) -> Completion:
        if role == "target":
            turn = sum(1 for m in messages if m["role"] == "user")
            self.events.append(("model asked", turn))
            self._asked(turn).set()
            completion = await super().chat(spec, messages, role=role, **kwargs)
            self.events.append(("model answered", turn))
            return completion
        turn = sum(1 for m in read_judge_request(messages).conversation if m["role"] == "user")
        self.events.append(("judge asked", turn))
        if turn < self.last_turn:
            # A deadlock breaker only: with pipelining the event is set within a few loop steps.
            await asyncio.wait_for(self._asked(turn + 1).wait(), timeout=10)
        completion = await super().chat(spec, messages, role=role, **kwargs)
        self.events.append(("judge answered", turn))
        return completion


async def test_the_judge_of_turn_t_runs_while_the_model_answers_turn_t_plus_1(loopback: ReferenceServer) -> None:
    calls = GatedProvider(cache=None, cache_mode="off")
    transcript = await run_conversation(calls, loop_spec(loopback, "guardian"), loop_spec(loopback, "judge"), SCENARIO)
    assert [t.verdict is not None for t in transcript.turns] == [False] * 3 + [True] * 9
    order = {event: i for i, event in enumerate(calls.events)}
    assert len(order) == len(calls.events) == 12 * 2 + 9 * 2
    for turn in range(4, 12):
        # issued before the model's answer to the next turn is back ...
        assert order[("judge asked", turn)] < order[("model answered", turn + 1)], turn
        # ... and still open when the model is asked that next turn
        assert order[("model asked", turn + 1)] < order[("judge answered", turn)], turn
    assert loopback.request_count == CALLS_PER_CONVERSATION
    await calls.aclose()


# -- endpoint caps hand slots out by case order ---------------------------------------------------
async def test_priority_limiter_serves_lower_priorities_first_and_survives_cancellation() -> None:
    from psychosis_tests.engine.limits import PriorityLimiter

    limiter = PriorityLimiter(1)
    served: list[str] = []
    release_first = asyncio.Event()

    async def use(name: str, priority: int, hold: asyncio.Event | None = None) -> None:
        async with limiter.slot(priority):
            served.append(name)
            if hold is not None:
                await hold.wait()

    first = asyncio.create_task(use("first", 5, release_first))
    await asyncio.sleep(0)  # first holds the only slot
    late_low = asyncio.create_task(use("late, priority 9", 9))
    cancelled = asyncio.create_task(use("cancelled, priority 0", 0))
    early_high = asyncio.create_task(use("priority 1, came first", 1))
    tie = asyncio.create_task(use("priority 1, came second", 1))
    await asyncio.sleep(0)
    cancelled.cancel()
    release_first.set()
    await asyncio.wait_for(asyncio.gather(first, late_low, early_high, tie), timeout=5)
    assert cancelled.cancelled()
    assert served == ["first", "priority 1, came first", "priority 1, came second", "late, priority 9"]
    # Every slot came back: a new caller gets one at once.
    await asyncio.wait_for(use("after", 0), timeout=1)
    assert served[-1] == "after"


# -- a judge panel's calls carry the conversation identity and their usage ------------------------
@dataclass
class JudgeCallRecorder(Provider):
    """Records, for every judge call, which judge it went to and the conversation it named."""

    judged: list[tuple[str, str]] = field(default_factory=list)

    async def chat(self, spec: ModelSpec, messages: list[dict[str, str]], *, role: str, **kwargs: Any) -> Completion:
        if role == "judge":
            self.judged.append((spec.id, kwargs.get("conversation", "")))
        return await super().chat(spec, messages, role=role, **kwargs)


async def test_a_panel_names_the_conversation_in_every_judge_call_and_counts_every_judge(loopback: ReferenceServer) -> None:
    calls = JudgeCallRecorder(cache=None, cache_mode="off")
    panel = JudgePanel((loop_spec(loopback, "judge"), loop_spec(loopback, "judge-strict", judge_mode="per-metric")))
    transcript = await run_conversation(calls, loop_spec(loopback, "guardian"), panel, SCENARIO, repeat=1)
    scored = [t for t in transcript.turns if t.metrics]
    per_metric_calls = sum(len(t.metrics) for t in scored)
    # one call per scored turn from the combined judge, one per metric from the per-metric one
    assert sorted({j for j, _ in calls.judged}) == ["loop/judge", "loop/judge-strict"]
    assert sum(1 for j, _ in calls.judged if j == "loop/judge") == len(scored)
    assert sum(1 for j, _ in calls.judged if j == "loop/judge-strict") == per_metric_calls
    # every one of them keyed to this case and repeat, as a single judge's calls are
    assert {c for _, c in calls.judged} == {f"loop/guardian/{SCENARIO.id}#1"}
    assert all(t.votes is not None and len(t.votes) == 2 for t in scored)
    assert sum(t.usage["judge"].calls for t in scored) == len(calls.judged) == loopback.request_count - len(transcript.turns)
    await calls.aclose()
