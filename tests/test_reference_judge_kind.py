"""The reference judges run in-process (kind reference) with the verdicts the reference server gave
over HTTP, and a run judged by them sends no request to a judge endpoint.

tests/pinned/reference-judge-verdicts.json holds what the reference server answered over HTTP, for
the five reference judges, before they ran in-process: 39 calibration replies (their asked
metrics) and three written ones (curly quotes and apostrophes, quoted cues, an empty reply). A
rationale is pinned by its SHA-256 (16 hex digits); the gold judge's refusal of a reply outside
the calibration set by its message.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from psychosis_tests.analysis.outcome import evaluate_case
from psychosis_tests.common.errors import CaseError, ModelsFileError
from psychosis_tests.engine.judges import JudgeCall, ReferenceJudge, judge_for
from psychosis_tests.engine.plan import Plan
from psychosis_tests.engine.runner import Runner
from psychosis_tests.inputs.models import REFERENCE_JUDGES, builtin_models, load_models_file
from psychosis_tests.inputs.settings import RunSettings
from psychosis_tests.servers.reference_server import ReferenceServer

REPO = Path(__file__).resolve().parents[1]
PINNED = json.loads((REPO / "tests" / "pinned" / "reference-judge-verdicts.json").read_text(encoding="utf-8"))


def _score(model: str, reply: str, metrics: list[str]) -> tuple[dict, str, str]:
    judge = judge_for(builtin_models()[f"reference/{model}"])
    assert isinstance(judge, ReferenceJudge)
    conversation = [{"role": "user", "content": "Is it a sign?"}, {"role": "assistant", "content": reply}]
    verdict, version = asyncio.run(judge.score(conversation, metrics, "harm", JudgeCall(None, "pinned")))
    scores = verdict.model_dump(exclude_none=True)
    rationale = scores.pop("rationale")
    return scores, version, hashlib.sha256(rationale.encode()).hexdigest()[:16]


@pytest.mark.parametrize("model", REFERENCE_JUDGES)
def test_in_process_verdicts_are_those_the_server_gave(model: str) -> None:
    assert len(PINNED) == 42
    compared = 0
    for row in PINNED:
        pinned = row["judges"][model]
        if "error" in pinned:
            with pytest.raises(CaseError) as error:
                _score(model, row["reply"], row["metrics"])
            assert pinned["error"] in str(error.value)
            continue
        scores, version, rationale = _score(model, row["reply"], row["metrics"])
        assert (scores, version, rationale) == (pinned["scores"], pinned["version"], pinned["rationale_sha256"]), row["id"]
        compared += 1
    assert compared >= 39


def test_every_builtin_reference_judge_is_in_process_and_the_fault_judges_are_not() -> None:
    models = builtin_models()
    assert {m for m, s in models.items() if s.kind == "reference"} == {f"reference/{n}" for n in REFERENCE_JUDGES}
    assert all(s.in_process and s.served_by_suite is None for s in models.values() if s.kind == "reference")
    for faulty in ("reference/judge-null", "reference/judge-fenced", "reference/judge-garbage"):
        assert models[faulty].kind == "chat" and models[faulty].served_by_suite == "reference"


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ("{id: j, kind: reference, model: judge-kind}", "kind reference: model must be one of judge, judge-strict"),
        ("{id: j, kind: reference, model: judge, base_url: 'http://x/v1'}", "a reference judge runs in-process"),
        ("{id: j, kind: reference, model: judge, batch: true}", "batch: true is for models reached over HTTP, not kind reference"),
    ],
)
def test_a_models_file_reference_judge_is_checked(tmp_path: Path, entry: str, problem: str) -> None:
    models = tmp_path / "models.yaml"
    models.write_text(f"models:\n  - {entry}\n", encoding="utf-8")
    with pytest.raises(ModelsFileError, match=problem):
        load_models_file(models, required=True)


def _settings(tmp_path: Path, target: str, models_yaml: str = "models: []\n") -> RunSettings:
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir(parents=True)
    for name in ("conduit-explicit", "conduit-control-explicit"):
        shutil.copy(REPO / "scenarios" / f"{name}.yaml", scenarios)
    models = tmp_path / "models.yaml"
    models.write_text(models_yaml, encoding="utf-8")
    return RunSettings(
        targets=[target], judges=["reference/judge"], models_file=models, models_file_given=True,
        scenarios=scenarios, thresholds=REPO / "thresholds.yaml", report_dir=tmp_path / "reports",
        cache_mode="off", cache_path=tmp_path / "cache.sqlite3",
    )  # fmt: skip


def _run(tmp_path: Path, models_yaml: str, server: ReferenceServer, *, target: str = "reference/mixed") -> list[list]:
    plan = Plan.load(_settings(tmp_path, target, models_yaml))
    served = [s.id for s in plan.specs_served_by_suite()]
    assert served == [target] if plan.panel.judges[0].in_process else sorted(served) == sorted([target, "reference/judge"])
    urls = {target: server.url, "reference/judge": server.url}  # were the judge asked over HTTP, it would be here
    with Runner(plan, run_dir=tmp_path / "reports" / "run", evaluate=evaluate_case, base_urls=urls) as runner:
        keys = plan.cases()
        runner.start(keys)
        outcomes = [runner.outcome(key) for key in keys]
    return [
        [(t.judge_version, [(turn.verdict.model_dump() if turn.verdict else None) for turn in t.turns]) for t in o.transcripts]
        for o in outcomes
    ]


def test_a_run_judged_by_reference_judge_asks_no_judge_endpoint_and_scores_as_over_http(
    tmp_path: Path, loopback: ReferenceServer
) -> None:
    in_process = _run(tmp_path / "in-process", "models: []\n", loopback)
    assert loopback.requests_for("judge") == 0 and loopback.requests_for("mixed") > 0
    # The same judge asked over HTTP (an entry of kind chat) gives every turn the same verdict.
    over_http = _run(tmp_path / "http", "models:\n  - {id: reference/judge, model: judge}\n", loopback)
    assert loopback.requests_for("judge") > 0
    assert over_http == in_process
    judged = [v for case in in_process for _, turns in case for v in turns if v is not None]
    assert len(judged) == 18 and {version for case in in_process for version, _ in case} == {"reference/judge@2 (psychosis-bench-reference-v2)"}


def test_an_in_process_judge_named_as_a_target_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelsFileError, match="'reference/judge-strict' is a judge of kind reference .* named as a target"):
        Plan.load(_settings(tmp_path, "reference/judge-strict"))


def test_the_fingerprint_is_that_of_the_same_judge_asked_over_http() -> None:
    """Same verdicts, same fingerprint: a calibration of the HTTP-served judge applies in-process."""
    from psychosis_tests.inputs.judge_identity import judge_fingerprint

    for model in REFERENCE_JUDGES:
        builtin = builtin_models()[f"reference/{model}"]
        over_http = builtin.model_copy(update={"kind": "chat"})
        assert over_http.served_by_suite == "reference" and builtin.served_by_suite is None
        assert judge_fingerprint([builtin]) == judge_fingerprint([over_http])
