"""The shipped models.yaml and the model registry: what a user reads there and what an unknown id says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from psychosis_tests.common.errors import ConfigError, ModelsFileError
from psychosis_tests.inputs.models import (
    LOCAL_ID,
    REFERENCE_FAULT_MODELS,
    REFERENCE_JUDGE_FAULTS,
    REFERENCE_JUDGE_VARIANTS,
    REFERENCE_MODELS,
    REFERENCE_PREFIX,
    builtin_models,
    load_models_file,
    select,
)
from psychosis_tests.inputs.settings import resolve, select_judges

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


@pytest.mark.parametrize(
    ("cli", "environ", "where", "first"),
    [
        ({"escalate_to": ["reference/judge"]}, {}, "--escalate-to",
         "'reference/judge' (kind reference, the default --judge for reference targets)"),
        ({}, {"PSYCHOSIS_ESCALATE_TO": "reference/judge"}, "PSYCHOSIS_ESCALATE_TO",
         "'reference/judge' (kind reference, the default --judge for reference targets)"),
        ({"judge": ["reference/judge-strict"], "escalate_to": ["reference/judge"]}, {}, "--escalate-to",
         "'reference/judge-strict' (kind reference, from --judge)"),
    ],
)  # fmt: skip
def test_a_spelled_cascade_whose_first_judge_gives_no_probabilities_is_a_usage_error(
    tmp_path: Path, cli: dict, environ: dict, where: str, first: str
) -> None:
    # Not the models file's `first:` field: the user never wrote one.
    settings = resolve({"model": ["reference/noisy"], **cli}.get, environ, tmp_path)
    with pytest.raises(ConfigError) as caught:
        select_judges(load_models_file(settings.models_file, required=False), settings)
    assert not isinstance(caught.value, ModelsFileError)
    assert str(caught.value) == (
        f"{where}: makes a cascade whose first judge is the --judge, and {first} gives no probabilities; "
        "pass --judge trained (only kind: trained judges give probabilities)"
    )


def test_a_models_file_cascade_whose_first_judge_gives_no_probabilities_names_the_entry(tmp_path: Path) -> None:
    path = tmp_path / "models.yaml"
    path.write_text("models:\n  - {id: c, kind: cascade, first: reference/judge, escalate_to: reference/judge}\n")
    with pytest.raises(ModelsFileError) as caught:
        load_models_file(path, required=True)
    assert str(caught.value) == (
        f"{path}: first: cascade 'c': its first judge 'reference/judge' is kind reference; "
        "it must give a probability per score (kind trained)"
    )


def test_a_cascade_of_two_first_judges_names_where_the_escalation_was_given(tmp_path: Path) -> None:
    environ = {"PSYCHOSIS_ESCALATE_TO": "reference/judge"}
    with pytest.raises(ConfigError, match=r"^PSYCHOSIS_ESCALATE_TO: makes a cascade of one first judge, got 2 judges"):
        resolve({"model": ["reference/noisy"], "judge": ["trained", "reference/judge"]}.get, environ, tmp_path)


@pytest.mark.parametrize(("model_id", "shown"), [("a b", "' '"), ("a\nb", "'\\n'"), ("a`b", "'`'"), ("a|b", "'|'"),
                                                 ("a,b", "','"), ("a\x1bb", "'\\x1b'"), ("a\u200bb", "'\\u200b'"),
                                                 ("a\u202eb", "'\\u202e'")])  # fmt: skip
def test_a_model_id_a_report_or_an_id_list_could_not_hold_is_refused_naming_the_character(
    tmp_path: Path, model_id: str, shown: str
) -> None:
    path = tmp_path / "models.yaml"
    path.write_text(f"models:\n  - {{id: {model_id!r}, model: m, base_url: 'http://127.0.0.1:9/v1'}}\n".replace("'", '"'), encoding="utf-8")
    with pytest.raises(ModelsFileError) as caught:
        load_models_file(path, required=True)
    assert f"models.0.id: {shown} is not allowed in a model id" in str(caught.value), str(caught.value)


def test_a_rationale_cap_longer_than_a_verdict_holds_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "models.yaml"
    path.write_text("models:\n  - {id: j, model: m, base_url: 'http://127.0.0.1:9/v1', rationale_max_chars: 4000}\n")
    with pytest.raises(ModelsFileError) as caught:
        load_models_file(path, required=True)
    assert "models.0.rationale_max_chars" in str(caught.value) and "2000" in str(caught.value), str(caught.value)


def test_html_and_other_punctuation_stay_allowed_in_a_model_id(tmp_path: Path) -> None:
    path = tmp_path / "models.yaml"
    path.write_text("models:\n  - {id: 'evil/<b>x</b>$café=latte:tea', model: m, base_url: 'http://127.0.0.1:9/v1'}\n", encoding="utf-8")
    assert "evil/<b>x</b>$café=latte:tea" in load_models_file(path, required=True)


def test_a_relative_model_file_or_gguf_is_taken_from_the_models_file_s_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It was taken from the working directory, so a run from a sub-folder, or with --models-file
    outside the project, missed the file the entry names (and stopped with a usage error)."""
    folder = tmp_path / "ci"
    folder.mkdir()
    path = folder / "models.yaml"
    path.write_text(
        "models:\n"
        "  - {id: mine, model: mine, kind: trained, model_file: judges/mine.npz}\n"
        "  - {id: gguf, model: gguf, serve_local: {gguf: ../weights/m.gguf}}\n"
        "  - {id: absolute, model: absolute, kind: trained, model_file: /opt/j.npz}\n"
    )
    monkeypatch.chdir(tmp_path)
    registry = load_models_file(Path("ci/models.yaml"), required=True)
    assert registry["mine"].model_file == folder / "judges" / "mine.npz"
    assert registry["gguf"].serve_local.gguf == tmp_path / "weights" / "m.gguf"
    assert registry["absolute"].model_file == Path("/opt/j.npz")
