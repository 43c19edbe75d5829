"""A judge's fingerprint: everything that changes its verdicts, hashed, so a calibration result
is matched only to the judging it measured.

The fingerprint covers, per judge: the model name, the endpoint (`builtin:<id>` for the suite's
own servers; credentials in it masked, `common.errors.safe_url`: the fingerprint is written to
calibration.json and results.json, and a new password judges alike), the output-affecting generation parameters, how the verdict is constrained, how
much context the judge sees, its judge mode and how many times it is asked; and the rubric
(the prompt template with its text). A panel's fingerprint lists its judges in order; a cascade's
holds both its judges' and its thresholds.

A judge's `kind` is left out: the suite's reference judges give the same verdicts in-process (kind
reference) as over HTTP (kind chat), so a calibration of either applies to both
(tests/test_reference_judge_kind.py pins the two paths to the same answers).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, Field

from psychosis_tests.common.errors import safe_url
from psychosis_tests.inputs.method import JUDGED_METRICS, METRICS
from psychosis_tests.inputs.models import ModelSpec
from psychosis_tests.inputs.rubric import build_judge_messages, verdict_schema


def rubric_hash(judge_mode: str = "combined") -> str:
    """Hash of the judge prompt template: the rubric text, the request layout and the verdict schema;
    for a per-metric judge also the layout of a control turn's one-metric calls (each told the turn
    is a control), so that its fingerprint changed when they started to be."""
    conversation = [{"role": "user", "content": "U"}, {"role": "assistant", "content": "A"}]
    sample = build_judge_messages(conversation, list(METRICS), "H")
    document: dict = {"messages": sample, "schema": verdict_schema(list(METRICS))}
    if judge_mode == "per-metric":
        document["control_calls"] = [build_judge_messages(conversation, [m], "H", control=True) for m in JUDGED_METRICS]
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()[:16]


class JudgeIdentity(BaseModel):
    """One judge as it scores: what must match for a calibration to apply to it."""

    id: str
    """The models-file id."""
    model: str
    """The model name sent to the endpoint."""
    base_url: str
    """The endpoint, credentials masked; `builtin:<id>` for the suite's own servers (their address changes per run)."""
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
    cascade: CascadeIdentity | None = None
    """A cascade: both its judges and its thresholds (a changed one needs a new calibration)."""


class CascadeIdentity(BaseModel):
    """What a cascade's verdicts depend on besides its id."""

    first: JudgeIdentity
    escalate_to: list[JudgeIdentity]
    thresholds: dict[str, float]
    """Every metric's threshold, defaults included."""


JudgeIdentity.model_rebuild()


class JudgeFingerprint(BaseModel):
    """The judging of a run or a calibration: one judge, or a panel in order."""

    judges: list[JudgeIdentity] = Field(min_length=1)
    hash: str
    """16 hex digits over `judges`; equal hashes mean the same judging."""


def judge_identity(spec: ModelSpec) -> JudgeIdentity:
    cascade = None
    if spec.kind == "cascade":
        first, escalation = spec.cascade
        cascade = CascadeIdentity(first=judge_identity(first), escalate_to=[judge_identity(e) for e in escalation],
                                  thresholds={m: spec.threshold(m) for m in JUDGED_METRICS})  # fmt: skip
    return JudgeIdentity(
        id=spec.id,
        model=spec.model,
        base_url=safe_url((spec.base_url or f"builtin:{spec.id}").rstrip("/")),
        params=spec.params_for("judge").request_kwargs(0),
        structured_output=spec.structured_output,
        judge_context_messages=spec.judge_context_messages,
        judge_mode=spec.judge_mode,
        verdict_attempts=spec.verdict_attempts,
        rubric_hash=rubric_hash(spec.judge_mode),
        model_file_sha256=_file_sha256(spec.trained_model_file) if spec.kind == "trained" else None,
        cascade=cascade,
    )


def judge_fingerprint(judges: Sequence[ModelSpec]) -> JudgeFingerprint:
    identities = [judge_identity(spec) for spec in judges]
    # The optional fields are left out when None, so the fingerprints of chat judges stay what they
    # were before them.
    encoded = json.dumps([_encoded(i) for i in identities], sort_keys=True)
    return JudgeFingerprint(judges=identities, hash=hashlib.sha256(encoded.encode()).hexdigest()[:16])


def fingerprint_differences(old: JudgeFingerprint, new: JudgeFingerprint) -> list[str]:
    """What differs between two judgings, in words a user can act on (e.g. "cascade thresholds
    dcs 0.65 to 0.95"); empty when the hashes are equal."""
    if old.hash == new.hash:
        return []
    if [j.id for j in old.judges] != [j.id for j in new.judges]:
        return [f"judges {'+'.join(j.id for j in old.judges)} to {'+'.join(j.id for j in new.judges)}"]
    found: list[str] = []
    for before, after in zip(old.judges, new.judges, strict=True):
        found += _identity_differences(before, after, "" if len(old.judges) == 1 else f"{after.id}: ")
    return found or ["fingerprint hash only (recorded by another version of the suite)"]


def _identity_differences(old: JudgeIdentity, new: JudgeIdentity, prefix: str) -> list[str]:
    found = []
    for field in ("model", "base_url", "params", "structured_output", "judge_context_messages", "judge_mode",
                  "verdict_attempts", "rubric_hash", "model_file_sha256"):  # fmt: skip
        if getattr(old, field) != getattr(new, field):
            found.append(f"{prefix}{field.replace('_', ' ')} {_short(getattr(old, field))} to {_short(getattr(new, field))}")
    if (old.cascade is None) != (new.cascade is None):
        found.append(f"{prefix}cascade {'none' if old.cascade is None else 'one'} to {'none' if new.cascade is None else 'one'}")
    elif old.cascade is not None and new.cascade is not None:
        changed = [m for m in sorted(set(old.cascade.thresholds) | set(new.cascade.thresholds))
                   if old.cascade.thresholds.get(m) != new.cascade.thresholds.get(m)]  # fmt: skip
        if changed:
            found.append(f"{prefix}cascade thresholds " + ", ".join(
                f"{m} {old.cascade.thresholds.get(m)} to {new.cascade.thresholds.get(m)}" for m in changed))
        found += _identity_differences(old.cascade.first, new.cascade.first, f"{prefix}first judge {new.cascade.first.id}: ")
        for before, after in zip(old.cascade.escalate_to, new.cascade.escalate_to, strict=False):
            found += _identity_differences(before, after, f"{prefix}escalation judge {after.id}: ")
    return found


def _short(value: object) -> str:
    """A field's value in a message: hashes cut to 12 characters."""
    text = str(value)
    return text[:12] if len(text) == 64 and all(c in "0123456789abcdef" for c in text) else text


def _encoded(identity: JudgeIdentity) -> dict:
    data = identity.model_dump(mode="json", exclude={k for k in ("model_file_sha256", "cascade") if getattr(identity, k) is None})
    if identity.cascade is not None:
        data["cascade"] = {**data["cascade"], "first": _encoded(identity.cascade.first),
                           "escalate_to": [_encoded(e) for e in identity.cascade.escalate_to]}  # fmt: skip
    return data


def _file_sha256(path: Path) -> str:
    """The file's SHA-256; "missing" when it cannot be read (loading the judge then says why)."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return "missing"
