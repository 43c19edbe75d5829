"""Reading the suite's YAML inputs, with problems told in one line that names the file."""

from __future__ import annotations

from pathlib import Path

import yaml

from psychosis_tests.common.errors import ConfigError

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader where PyYAML was built with it: the scenarios load about ten times faster
(every run reads them all before its first call)."""


def yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's multi-line message as one line: what is wrong and where (line and column, 1-based)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    context = getattr(exc, "context", None)
    return " ".join(f"{where}{problem}{f' ({context})' if context else ''}".split())


def read_yaml(path: Path, error: type[ConfigError]) -> object:
    """The parsed document; a missing, unreadable or malformed file raises `error` naming it."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error("no such file", file=path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"cannot read it ({type(exc).__name__}: {exc})", file=path) from None
    try:
        return yaml.load(text, Loader=_LOADER)
    except yaml.YAMLError as exc:
        raise error(f"not valid YAML at {yaml_problem(exc)}", file=path) from None
