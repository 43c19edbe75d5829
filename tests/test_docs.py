"""The docs name every option the commands of `python -m psychosis_tests` take."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from psychosis_tests.__main__ import build_parser

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted(REPO.glob("*/README.md")), *sorted(REPO.glob("packs/*/README.md"))]


def test_every_option_of_every_command_is_documented() -> None:
    text = "\n".join(path.read_text(encoding="utf-8") for path in DOCS)
    (commands,) = (a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    missing = [
        f"{name} {option}"
        for name, command in commands.choices.items()
        for action in command._actions
        for option in action.option_strings
        if option.startswith("--") and option != "--help" and not re.search(rf"{re.escape(option)}(?![\w-])", text)
    ]
    assert missing == []


def test_the_merge_help_names_the_refusals_added_with_the_shards_settings() -> None:
    """`merge --help` lists why runs cannot be merged; it missed the refusals of other user turns,
    a target or user model sent elsewhere, a damaged case file and an unreadable --allure-from."""
    (commands,) = (a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    text = commands.choices["merge"].description
    for reason in ("repeats", "user turns", "endpoint or parameters", "damaged case file", "--allure-from folder"):
        assert reason in text, reason


def test_the_force_options_help_names_user_turns() -> None:
    """A baseline with other user turns (or user model settings) is refused too; the help of the
    options that force a comparison named scenario sets and judges only."""
    (commands,) = (a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    helps = {option: action.help for name in ("compare", "merge") for action in commands.choices[name]._actions
             for option in action.option_strings if option in ("--force", "--force-baseline")}  # fmt: skip
    assert set(helps) == {"--force", "--force-baseline"}
    assert all("user turns" in text for text in helps.values()), helps


def test_every_test_the_docs_name_exists() -> None:
    """The fault tables and the prose cite tests as proof; a renamed or shortened name (one was
    quoted as `test_random_429s_and_500s_under_load_...`) points at nothing."""
    defined = {
        name
        for folder in ("tests", "psychosis_tests")
        for path in (REPO / folder).rglob("*.py")
        for name in re.findall(r"^\s*(?:async )?def (test_\w+)", path.read_text(encoding="utf-8"), re.MULTILINE)
    }
    named = {
        (path.name, name)
        for path in DOCS
        for name, rest in re.findall(r"`(?:tests/\w+\.py::)?(test_\w*)([^`\n]*)`", path.read_text(encoding="utf-8"))
        if not rest.startswith(".py")  # a file, not a test
    }
    assert sorted(named - {(doc, name) for doc, name in named if name in defined}) == []
