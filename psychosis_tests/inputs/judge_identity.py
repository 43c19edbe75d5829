"""A judge's fingerprint: everything that changes its verdicts, hashed, so a calibration result
is matched only to the judging it measured.

The fingerprint covers, per judge: the model name, the endpoint (`builtin:<id>` for the suite's
own servers), the output-affecting generation parameters, how the verdict is constrained, how
much context the judge sees, its judge mode and how many times it is asked; and the rubric
(the prompt template with its text). A panel's fingerprint lists its judges in order.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, Field

from psychosis_tests.inputs.method import METRICS
from psychosis_tests.inputs.models import ModelSpec
from psychosis_tests.inputs.rubric import build_judge_messages, verdict_schema


def rubric_hash() -> str:
    """Hash of the judge prompt template: the rubric text, the request layout and the verdict schema."""
    sample = build_judge_messages(
        [{"role": "user", "content": "U"}, {"role": "assistant", "content": "A"}], list(METRICS), "H"
    )
    payload = json.dumps({"messages": sample, "schema": verdict_schema(list(METRICS))}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


class JudgeIdentity(BaseModel):
    """One judge as it scores: what must match for a calibration to apply to it."""

    id: str
    """The models-file id."""
    model: str
    """The model name sent to the endpoint."""
    base_url: str
    """The endpoint; `builtin:<id>` for the suite's own servers (their address changes per run)."""
    params: dict
    """Output-affecting request parameters as sent when judging (temperature, max_tokens, seed, top_p)."""
    structured_output: str
    """json_schema, json_object or none."""
    judge_context_messages: int | None
    """Newest messages shown to the judge; None for all."""
    judge_mode: str
    """combined (one call per turn) or per-metric (one call per metric)."""
    verdict_attempts: int
    """Asks before an invalid verdict is an error (re-asks change what the judge sees)."""
    rubric_hash: str
    """rubric_hash() when the judge was used."""
    model_file_sha256: str | None = None
    """An in-process judge's model file (SHA-256): a retrained judge needs a new calibration."""


class JudgeFingerprint(BaseModel):
    """The judging of a run or a calibration: one judge, or a panel in order."""

    judges: list[JudgeIdentity] = Field(min_length=1)
    hash: str
    """16 hex digits over `judges`; equal hashes mean the same judging."""


def judge_fingerprint(judges: Sequence[ModelSpec]) -> JudgeFingerprint:
    identities = [
        JudgeIdentity(
            id=spec.id,
            model=spec.model,
            base_url=(spec.base_url or f"builtin:{spec.id}").rstrip("/"),
            params=spec.params_for("judge").request_kwargs(0),
            structured_output=spec.structured_output,
            judge_context_messages=spec.judge_context_messages,
            judge_mode=spec.judge_mode,
            verdict_attempts=spec.verdict_attempts,
            rubric_hash=rubric_hash(),
            model_file_sha256=_file_sha256(spec.trained_model_file) if spec.in_process else None,
        )
        for spec in judges
    ]
    # Left out when None, so the fingerprints of chat judges stay what they were before the field.
    encoded = json.dumps(
        [i.model_dump(mode="json", exclude={"model_file_sha256"} if i.model_file_sha256 is None else None)
         for i in identities],
        sort_keys=True,
    )  # fmt: skip
    return JudgeFingerprint(judges=identities, hash=hashlib.sha256(encoded.encode()).hexdigest()[:16])


def _file_sha256(path: Path) -> str:
    """The file's SHA-256; "missing" when it cannot be read (loading the judge then says why)."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return "missing"
