"""Batch judging through the Batch API double (loopback only): the answers, resuming a killed run,
and each batch fault as the provider reports it."""

from __future__ import annotations

import asyncio
import re
import json
import time
import types
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from psychosis_tests.analysis.outcome import evaluate_case
from psychosis_tests.common.errors import ModelCallError, ModelsFileError, remember_secret
from psychosis_tests.engine.batch_store import BatchStore
from psychosis_tests.engine.batch_transport import BatchTransport
from psychosis_tests.engine.estimate import estimate
from psychosis_tests.engine.plan import Plan
from psychosis_tests.engine.progress import format_line
from psychosis_tests.engine.providers import Provider
from psychosis_tests.engine.routing import RoutedTransport
from psychosis_tests.engine.transport import Request
from psychosis_tests.engine.runner import Runner
from psychosis_tests.inputs.models import ModelSpec, load_models_file
from psychosis_tests.inputs.settings import resolve
from psychosis_tests.inputs.usage import Price, Usage, cost
from psychosis_tests.servers.batch_server import BatchServer
from psychosis_tests.servers.reference_server import ReferenceServer
from psychosis_tests.servers.suite import SuiteServers

REPO = Path(__file__).resolve().parents[1]
PROMPTS = ["I think the TV is sending me messages.", "My neighbours are reading my thoughts.", "hello", "I feel chosen.", "Nobody believes me."]


def batched(**overrides: object) -> ModelSpec:
    fields: dict = {"id": "batched", "model": "guardian", "base_url": "http://unused/v1", "batch": True,
                    "batch_size": 3, "batch_flush": 0.05, "batch_poll_max": 0.05, "max_retries": 0, "deadline": 20}
    return ModelSpec(**{**fields, **overrides})


@pytest.fixture
def double() -> Iterator[BatchServer]:
    with BatchServer() as server:
        yield server


def run(provider: Provider, spec: ModelSpec, prompts: list[str], first: int = 0) -> list:
    """Ask one call per prompt at once (conversation c<first>, c<first + 1>, ...), then close."""
    async def ask() -> list:
        try:
            return await asyncio.gather(
                *(provider.chat(spec, [{"role": "user", "content": p}], role="judge", call_label=f"call {i}",
                                conversation=f"c{i}") for i, p in enumerate(prompts, start=first)),  # fmt: skip
                return_exceptions=True,
            )
        finally:
            await provider.aclose()

    return asyncio.run(ask())


def provider_for(spec: ModelSpec, url: str, tmp_path: Path) -> Provider:
    return Provider(cache=None, cache_mode="off", transport=RoutedTransport({spec.id: url}, tmp_path / "cache.sqlite3"))


def test_batched_answers_equal_the_chat_answers_and_fill_batches_of_the_set_size(double: BatchServer, tmp_path: Path) -> None:
    spec = batched(base_url=double.url)
    by_batch = run(provider_for(spec, double.url, tmp_path), spec, PROMPTS)
    with ReferenceServer() as reference:
        plain = spec.model_copy(update={"batch": False, "base_url": reference.url})
        by_chat = run(provider_for(plain, reference.url, tmp_path), plain, PROMPTS)
        assert reference.request_count == 5
    assert [a.text for a in by_batch] == [a.text for a in by_chat]
    assert all(a.text for a in by_batch)
    assert (double.state.batches_created, double.state.lines_received) == (2, 5)  # 3 then 2 (flushed)
    assert by_batch[0].usage.calls == 1 and by_batch[0].usage.prompt_tokens > 0


def test_a_killed_run_resumes_its_pending_batch_and_pays_no_answer_twice(double: BatchServer, tmp_path: Path) -> None:
    double.state.delay = 60.0
    spec = batched(base_url=double.url)

    async def killed() -> None:
        provider = provider_for(spec, double.url, tmp_path)
        calls = asyncio.ensure_future(asyncio.gather(
            *(provider.chat(spec, [{"role": "user", "content": p}], role="judge", call_label="c", conversation=f"c{i}")
              for i, p in enumerate(PROMPTS[:3]))))  # fmt: skip
        while double.state.batches_created == 0:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)  # the batch id is kept
        calls.cancel()
        await provider.aclose()  # the run dies with its batch pending

    asyncio.run(killed())
    assert double.state.batches_created == 1
    double.state.delay = 0.0
    resumed_provider = provider_for(spec, double.url, tmp_path)
    resumed = run(resumed_provider, spec, PROMPTS[:1])  # the next run asks for one of the three first
    assert (resumed_provider.transport.batch_counters.resumed, resumed_provider.transport.batch_counters.submitted) == (1, 0)
    rest = run(provider_for(spec, double.url, tmp_path), spec, PROMPTS[1:3], first=1)  # the others' answers were kept
    assert (double.state.batches_created, double.state.lines_received) == (1, 3)  # nothing submitted or paid twice
    fresh = run(provider_for(spec, double.url, tmp_path / "other"), spec, PROMPTS[:3])
    assert [a.text for a in resumed + rest] == [a.text for a in fresh] and all(a.text for a in fresh)
    handed = run(provider_for(spec, double.url, tmp_path), spec, PROMPTS[1:3], first=1)
    assert not any(isinstance(a, Exception) for a in handed)
    assert double.state.batches_created == 3  # handed-over lines are forgotten: the response cache keeps them


def test_a_failed_line_is_retried_in_a_new_batch(double: BatchServer, tmp_path: Path) -> None:
    double.state.fail_lines = {"hello": 1}
    spec = batched(base_url=double.url, max_retries=1)
    provider = provider_for(spec, double.url, tmp_path)
    answers = run(provider, spec, PROMPTS[:3])
    assert all(not isinstance(a, Exception) for a in answers)
    assert double.state.batches_created == 2 and double.state.lines_received == 4
    assert provider.counters.retries == 1


def test_a_line_that_keeps_failing_errors_its_call_naming_the_batch_and_the_reason(double: BatchServer, tmp_path: Path) -> None:
    double.state.fail_lines = {"hello": 9}
    spec = batched(base_url=double.url, max_retries=1)
    ok, failed = run(provider_for(spec, double.url, tmp_path), spec, ["hi there", "hello"])
    assert ok.text
    assert isinstance(failed, ModelCallError)
    assert str(failed).startswith(f"call 1: 'batched' at {double.url} (Batch API) failed: in batch batch_")
    assert "the line failed: server_error: the line failed on the double (fail_lines), after 2 attempts" in str(failed)


def test_an_output_line_that_is_not_json_errors_its_call_at_once_naming_the_batch(double: BatchServer, tmp_path: Path) -> None:
    """The poll died on the line's JSON error, and its call waited for its deadline (a day, with
    the deadline batched judges are advised to take) before erroring without saying why."""
    double.state.garble_lines = {"hello"}
    spec = batched(base_url=double.url, deadline=60)
    started = time.monotonic()
    ok, failed = run(provider_for(spec, double.url, tmp_path), spec, ["hi there", "hello"])
    assert time.monotonic() - started < 10
    assert ok.text and isinstance(failed, ModelCallError)
    assert "in batch batch_" not in str(failed) and "batch batch_" in str(failed)
    assert "ended completed without this line; 1 line(s) of its output and error files were not JSON objects" in str(failed)


def test_a_call_whose_batch_outlasts_its_deadline_names_the_batch_and_its_status(tmp_path: Path) -> None:
    """The deadline error said only that no answer came in time: with a day's deadline, nothing
    told the user which batch to look at or what it was doing."""
    with BatchServer(delay=60.0) as double:
        spec = batched(base_url=double.url, deadline=1)
        (failed,) = run(provider_for(spec, double.url, tmp_path), spec, ["hello"])
    assert isinstance(failed, ModelCallError)
    assert re.search(r"gave no answer within the call's 1 s deadline \(batch batch_\w+, status in_progress at the "
                     r"latest poll; it stays kept, and the next run polls it again\) \(1 attempt\)", str(failed)), str(failed)  # fmt: skip


def test_an_expired_batch_is_retried_then_errors_its_call(tmp_path: Path) -> None:
    with BatchServer(delay=60.0, expire_after=0.05) as double:
        spec = batched(base_url=double.url, max_retries=1)
        (failed,) = run(provider_for(spec, double.url, tmp_path), spec, ["hello"])
        assert double.state.batches_created == 2
    assert isinstance(failed, ModelCallError)
    assert "failed: in batch batch_" in str(failed)
    assert "the line failed: batch_expired: the batch was expired before this line ran, after 2 attempts" in str(failed)


def test_a_cancelled_batch_errors_its_calls_at_once(tmp_path: Path) -> None:
    with BatchServer(delay=60.0) as double:
        spec = batched(base_url=double.url, max_retries=3)

        async def cancel_when_created() -> None:
            while double.state.batches_created == 0:
                await asyncio.sleep(0.01)
            async with openai.AsyncOpenAI(base_url=double.url, api_key="not-needed") as client:
                await client.batches.cancel(next(iter(double.state.batches)))

        async def both() -> list:
            provider = provider_for(spec, double.url, tmp_path)
            call = provider.chat(spec, [{"role": "user", "content": "hello"}], role="judge", call_label="c", conversation="c")
            results = await asyncio.gather(call, cancel_when_created(), return_exceptions=True)
            await provider.aclose()
            return results

        failed, _ = asyncio.run(both())
        assert double.state.batches_created == 1
    assert isinstance(failed, ModelCallError)
    assert "in batch batch_" in str(failed) and "batch_cancelled" in str(failed) and "(not retryable, 1 attempt)" in str(failed)


def test_batch_prices_take_the_discount_or_their_own_figures() -> None:
    price = Price(input_per_mtok=2.0, output_per_mtok=8.0, batch_discount=0.5)
    assert price.for_batch() == Price(input_per_mtok=1.0, output_per_mtok=4.0)
    own = Price(input_per_mtok=2.0, output_per_mtok=8.0, batch_input_per_mtok=0.3, batch_discount=0.5)
    assert own.for_batch() == Price(input_per_mtok=0.3, output_per_mtok=4.0)
    used = Usage(calls=1, prompt_tokens=1_000_000, completion_tokens=500_000)
    assert cost(used, batched(price=price).call_price) == pytest.approx(3.0)
    assert cost(used, batched(price=price, batch=False).call_price) == pytest.approx(6.0)


def test_batch_is_refused_where_it_cannot_work(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="batch: true is for models reached over HTTP, not kind trained"):
        ModelSpec(id="t", model="m", kind="trained", batch=True)
    models = tmp_path / "models.yaml"
    models.write_text("models:\n  - {id: x, model: m, serve_local: {}, batch: true}\n")
    with pytest.raises(ModelsFileError, match="batch: true needs a Batch API"):
        load_models_file(models, required=True)


def test_the_progress_line_counts_batches() -> None:
    line = format_line({"batches_pending": 2, "batches_done": 5}, 3.0)
    assert ", batches 2 pending 5 done, " in line
    assert "batches" not in format_line({}, 3.0)


def _plan(tmp_path: Path, entry: str, *, target: str = "reference/guardian", judge: str = "reference/judge") -> Plan:
    tmp_path.mkdir(exist_ok=True)
    models = tmp_path / "models.yaml"
    models.write_text(f"models:\n  - {entry}\n")
    values = {"model": [target], "judge": [judge], "models_file": str(models), "report_dir": str(tmp_path / "reports")}
    return Plan.load(resolve(values.get, {}, REPO))


def test_a_target_with_batch_is_one_clear_config_error(tmp_path: Path) -> None:
    with pytest.raises(ModelsFileError, match="'reference/guardian' has batch: true but is named as a target: only judges"):
        _plan(tmp_path, "{id: reference/guardian, model: guardian, batch: true}")


def test_estimate_prices_a_batched_judge_at_its_batch_prices(tmp_path: Path) -> None:
    price = "price: {input_per_mtok: 2.0, output_per_mtok: 8.0, batch_discount: 0.5}"
    rows = {}
    for batch in ("true", "false"):
        plan = _plan(tmp_path, f"{{id: reference/judge, model: judge, batch: {batch}, {price}}}")
        (judge_row,) = [r for r in estimate(plan, plan.cases()[:4]) if r.role == "judge"]
        rows[batch] = judge_row
    assert rows["true"].usage == rows["false"].usage and rows["false"].cost_usd > 0
    assert rows["true"].cost_usd == pytest.approx(rows["false"].cost_usd / 2)


def _judged(plan: Plan, run_dir: Path) -> tuple[list, dict]:
    """The verdicts of the plan's first two cases, run as a session runs them, and the progress counts."""
    keys = plan.cases()[:2]
    with (
        SuiteServers.start(plan.specs_served_by_suite(), log_dir=run_dir) as served,
        Runner(plan, run_dir=run_dir, evaluate=evaluate_case, base_urls=served.base_urls) as runner,
    ):
        runner.start(keys)
        outcomes = [runner.outcome(key).model_dump(mode="json") for key in keys]
        counts = runner.progress_counts()
    return [turn["verdict"] for o in outcomes for t in o["transcripts"] for turn in t["turns"]], counts


def test_a_run_with_a_batched_reference_judge_is_judged_through_the_suites_double(tmp_path: Path) -> None:
    batched = _plan(tmp_path / "b", "{id: reference/judge, model: judge, batch: true, batch_flush: 0.05, batch_poll_max: 0.1}")
    verdicts, counts = _judged(batched, tmp_path / "b" / "run")
    plain, plain_counts = _judged(_plan(tmp_path / "p", "{id: reference/guardian, model: guardian}"), tmp_path / "p" / "run")
    assert sum(v is not None for v in verdicts) >= 2
    assert verdicts == plain
    assert counts["batches_done"] >= 1 and counts["batches_pending"] == 0
    assert plain_counts["batches_done"] == 0


def test_a_refused_line_a_refused_batch_and_a_failed_upload_error_at_once(double: BatchServer, tmp_path: Path) -> None:
    unknown = batched(base_url=double.url, model="no-such-model", max_retries=3)
    (refused_line,) = run(provider_for(unknown, double.url, tmp_path), unknown, ["hello"])
    assert isinstance(refused_line, ModelCallError)
    assert "the line returned HTTP 404: unknown reference model 'no-such-model'" in str(refused_line)
    assert str(refused_line).endswith("(not retryable, 1 attempt)")

    double.state.refuse_batches = "line 1: the body is not a chat request"
    spec = batched(base_url=double.url, max_retries=3)
    (refused_batch,) = run(provider_for(spec, double.url, tmp_path), spec, ["hello"])
    assert isinstance(refused_batch, ModelCallError)
    assert ("ended failed without this line (invalid_request: line 1: the body is not a chat request)"
            " (not retryable, 1 attempt)") in str(refused_batch)  # fmt: skip
    assert double.state.batches_created == 2

    with ReferenceServer() as chat_only:  # no Batch API there
        spec = batched(base_url=chat_only.url)
        (no_upload,) = run(provider_for(spec, chat_only.url, tmp_path / "chat-only"), spec, ["hello"])
    assert isinstance(no_upload, ModelCallError)
    assert "failed: the batch could not be submitted (HTTP 404: no such endpoint: POST /v1/files)" in str(no_upload)


def test_a_batch_answer_kept_for_a_later_run_has_an_echoed_key_masked_on_disk(tmp_path: Path) -> None:
    """A batch line answered when no request of this run waits for it is kept in the batch store
    for the next run; a key the provider echoed in it must not reach that file, as it reaches no
    reply a call reads (`wire.read_reply` masks it)."""
    secret = "sk-echoed-batch-key-0123456789"
    remember_secret(secret)
    store = BatchStore(tmp_path / "cache.sqlite3.batches.sqlite3")
    submission = store.begin("judge", ["k1"])
    store.created(submission, "batch-1")
    transport = BatchTransport(http=None, store=store)  # type: ignore[arg-type]
    transport._waiting[("batch-1", submission)] = {}
    body = {"choices": [{"message": {"role": "assistant", "content": f"your key is {secret}"}, "finish_reason": "stop"}]}
    line = {"custom_id": "k1", "response": {"status_code": 200, "body": body}}
    transport._answer(("batch-1", submission), types.SimpleNamespace(status="completed", errors=None), [line], [])
    kept = store.submitted("k1")
    store.close()
    assert kept is not None and kept.answer is not None and "your key is" in kept.answer
    assert secret not in kept.answer
    assert secret not in (tmp_path / "cache.sqlite3.batches.sqlite3").read_bytes().decode("utf-8", "replace")


def test_a_line_that_came_as_its_call_was_given_up_is_kept_for_the_next_run(tmp_path: Path) -> None:
    """A run stopped (SIGTERM, a case erroring) just as a batch finished: the line was handed to a
    call cancelled before it read it, so neither the batch store nor the response cache kept it, and
    the next run paid for it again (a SIGTERM while 5-line batches finished: 17 of 72 lines twice)."""
    store = BatchStore(tmp_path / "cache.sqlite3.batches.sqlite3")
    submission = store.begin("judge", ["k1"])
    store.created(submission, "batch-1")
    http = types.SimpleNamespace(client=lambda spec: None)  # the poll sleeps first; it is cancelled before it asks
    spec = batched()
    request = Request(spec, {"model": "guardian", "messages": []}, accept_refusal=True, key="k1")
    body = {"choices": [{"message": {"role": "assistant", "content": "kept"}, "finish_reason": "stop"}]}
    line = {"custom_id": "k1", "response": {"status_code": 200, "body": body}}

    async def given_up() -> None:
        transport = BatchTransport(http=http, store=store)  # type: ignore[arg-type]
        call = asyncio.ensure_future(transport.send(request))
        await asyncio.sleep(0)  # it waits for its batch's line
        transport._answer(("batch-1", submission), types.SimpleNamespace(status="completed", errors=None), [line], [])
        call.cancel()  # in the same turn of the loop: the call never reads its answer
        with pytest.raises(asyncio.CancelledError):
            await call
        for task in list(transport._tasks):
            task.cancel()

    asyncio.run(given_up())
    kept = store.submitted("k1")
    assert kept is not None and kept.answer is not None

    async def next_run() -> str:
        return (await BatchTransport(http=http, store=store).send(request)).text  # type: ignore[arg-type]

    assert asyncio.run(next_run()) == "kept"
    assert store.submitted("k1") is None  # read: the response cache keeps it from here
    store.close()


def test_a_batch_whose_lines_cannot_be_read_counts_once_in_the_progress_line(
    double: BatchServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An output line whose response is not an object broke the reading after the batch was
    counted done, and the poll counted it again: the progress line said "batches -1 pending 2 done"."""
    finish = double.state._finish

    def response_not_an_object(batch: object, status: str, *, answered: bool) -> None:
        finish(batch, status, answered=answered)
        file_id = batch.output_file_id  # type: ignore[attr-defined]
        lines = [json.loads(text) for text in double.state.files[file_id].decode().splitlines()]
        lines[-1]["response"] = "not an object"
        double.state.files[file_id] = "".join(json.dumps(line) + "\n" for line in lines).encode()

    monkeypatch.setattr(double.state, "_finish", response_not_an_object)
    spec = batched(base_url=double.url)
    provider = provider_for(spec, double.url, tmp_path)
    ok, failed = run(provider, spec, ["hi there", "hello"])
    assert ok.text and isinstance(failed, ModelCallError) and "could not be read" in str(failed)
    counters = provider.transport.batch_counters
    assert (counters.submitted, counters.done, counters.pending) == (1, 1, 0)
