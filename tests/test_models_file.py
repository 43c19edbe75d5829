"""The shipped models.yaml and the model registry: what a user reads there and what an unknown id says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from psychosis_tests.common.errors import ModelsFileError
from psychosis_tests.inputs.models import (
    LOCAL_ID,
    REFERENCE_FAULT_MODELS,
    REFERENCE_JUDGE_FAULTS,
    REFERENCE_JUDGE_VARIANTS,
    REFERENCE_MODELS,
    REFERENCE_PREFIX,
    builtin_models,
    select,
)

MODELS_YAML = Path(__file__).resolve().parents[1] / "models.yaml"


def _built_in_comment() -> str:
    """The comment block of models.yaml that lists the built-in models."""
    text = MODELS_YAML.read_text(encoding="utf-8")
    block = text.partition("# Built in, no entry needed:")[2].partition("# Each entry")[0]
    assert block.strip(), "models.yaml has no list of built-in models"
    return block


FAULT_DOUBLES = {REFERENCE_PREFIX + name for name in REFERENCE_FAULT_MODELS + REFERENCE_JUDGE_FAULTS}


def test_models_yaml_names_every_built_in_model_a_user_may_select() -> None:
    block = _built_in_comment()
    named = {m.group(1) for m in re.finditer(r"^#\s+([a-z0-9/-]+)(?:,|\s{2,})", block, re.M)}
    named |= set(re.findall(r"reference/[a-z0-9-]+", block))
    usable = set(builtin_models()) - FAULT_DOUBLES
    assert {LOCAL_ID, *(REFERENCE_PREFIX + n for n in REFERENCE_MODELS + REFERENCE_JUDGE_VARIANTS)} <= usable
    assert usable <= named, f"models.yaml does not name {sorted(usable - named)}"
    unknown = {n for n in named if "/" in n or n == LOCAL_ID} - set(builtin_models())
    assert not unknown, f"models.yaml names models that are not built in: {sorted(unknown)}"


@pytest.mark.parametrize(
    ("typo", "suggested"),
    [("reference/guardain", "reference/guardian"), ("reference/judge-strct", "reference/judge-strict"), ("lcoal", "local")],
)
def test_an_unknown_id_suggests_the_closest_and_lists_no_fault_double(typo: str, suggested: str) -> None:
    with pytest.raises(ModelsFileError) as caught:
        select(builtin_models(), ["local", typo], models_file=MODELS_YAML)
    message = str(caught.value)
    assert f"unknown model id {typo!r} (did you mean {suggested!r}?); known ids: " in message
    listed = set(message.partition("known ids: ")[2].split(", "))
    assert listed == set(builtin_models()) - FAULT_DOUBLES
    assert {LOCAL_ID, *(REFERENCE_PREFIX + n for n in REFERENCE_MODELS + REFERENCE_JUDGE_VARIANTS)} <= listed


def test_an_id_far_from_every_known_one_gets_no_guess() -> None:
    with pytest.raises(ModelsFileError, match=r"unknown model id 'gpt-4o'; known ids: local, ") as caught:
        select(builtin_models(), ["gpt-4o"], models_file=MODELS_YAML)
    assert "did you mean" not in str(caught.value)
