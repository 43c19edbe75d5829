"""Reading the suite's YAML inputs, with problems (the YAML's or the schema's) told in one line
that names the file; `validated` checks any input document (YAML or JSON) against its schema so."""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from psychosis_tests.common.errors import ConfigError

Document = TypeVar("Document", bound=BaseModel)

_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader where PyYAML was built with it: the scenarios load about ten times faster
(every run reads them all before its first call)."""
_MERGE_TAG = "tag:yaml.org,2002:merge"
_BOOLEAN = re.compile(r"^(?:yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON)$")
"""YAML 1.1's booleans but off: thresholds.yaml's word for no limit stays that word, so a `no` or
`false` written as a limit is refused rather than read as off (YAML 1.1 reads all three as false)."""


class _Loader(_SAFE_LOADER):  # type: ignore[valid-type,misc]
    """The safe loader, refusing a key written twice in one mapping: PyYAML keeps the last one
    without a word, so a second `solidification:` or `title:` would silently replace the first.
    A key that overrides one brought in by a merge (`<<: *base`) is no repetition. A bare off is
    the string "off" (`_BOOLEAN`)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set = set()
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                repeated = key in seen
            except TypeError:
                continue  # an unhashable key: the base loader refuses it
            if repeated:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark, f"found duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep)


_Loader.yaml_implicit_resolvers = {
    first: [(tag, _BOOLEAN if tag == "tag:yaml.org,2002:bool" else regexp) for tag, regexp in resolvers]
    for first, resolvers in _SAFE_LOADER.yaml_implicit_resolvers.items()
}


def yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's multi-line message as one line: what is wrong and where (line and column, 1-based)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    context = getattr(exc, "context", None)
    return " ".join(f"{where}{problem}{f' ({context})' if context else ''}".split())


def read_text(path: Path, error: type[ConfigError], encoding: str = "utf-8") -> str:
    """The file's text; a missing or unreadable file raises `error` naming it, in one line."""
    try:
        return path.read_text(encoding=encoding)
    except FileNotFoundError:
        raise error("no such file", file=path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"cannot read it ({type(exc).__name__}: {exc})", file=path) from None


def read_yaml(path: Path, error: type[ConfigError]) -> object:
    """The parsed document; a missing, unreadable or malformed file raises `error` naming it."""
    text = read_text(path, error)
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        raise error(f"not valid YAML at {yaml_problem(exc)}", file=path) from None
    except RecursionError:
        raise error("not YAML this suite reads (nested too deep)", file=path) from None


def validated(
    model: type[Document],
    raw: object,
    error: type[ConfigError],
    *,
    file: Path,
    message: Callable[[str, str], str] = lambda field, problem: problem,
) -> Document:
    """`raw` validated as a `model` document; otherwise `error` naming the file and the field of
    pydantic's first error, its text `message(field, problem)` (the problem told by schema_problem)."""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        field, problem = schema_problem(exc, model)
        raise error(message(field, problem), file=file, field=field) from exc


def numbers_not_booleans(model: type[BaseModel], data: object) -> object:
    """`data` for a `model` document, refusing a boolean (or a mapping holding one) for a field
    that takes none: YAML reads yes, no and on as booleans, which pydantic takes for 1 and 0, so
    `max_concurrency: yes` would be 1 and a price of `on` one dollar. For a mode="before" model
    validator."""
    if isinstance(data, dict):
        for key, value in data.items():
            field = model.model_fields.get(key) if isinstance(key, str) else None
            if field is None or _takes_bool(field.annotation):
                continue
            if isinstance(value, bool):
                no_booleans({key: value})
            elif isinstance(value, dict) and any(
                typing.get_origin(a) is dict for a in (field.annotation, *typing.get_args(field.annotation))
            ):  # a mapping of numbers, such as a price's or a cascade's thresholds
                no_booleans({f"{key}.{k}": v for k, v in value.items()})
    return data


def no_booleans(values: object) -> object:
    """A mapping of numbers as written, refusing a boolean among its values (YAML reads yes, no and
    on as booleans, which pydantic would take for 1 and 0); for a mode="before" field validator."""
    if isinstance(values, dict):
        for key, value in values.items():
            if isinstance(value, bool):
                raise ValueError(f"{key}: {str(value).lower()} is not a number (YAML reads yes, no and on as true or false)")
    return values


def _takes_bool(annotation: object) -> bool:
    return annotation is bool or any(_takes_bool(a) for a in typing.get_args(annotation))


def entry_id(raw: object, field: str, key: str, noun: str) -> str:
    """' (<noun> id X)' when `field` points inside the list raw[key] (`models.3.base_url`): which
    entry of a long list the problem is in, by the id the user wrote."""
    loc = field.split(".")
    if len(loc) >= 2 and loc[0] == key and loc[1].isdigit() and isinstance(raw, dict):
        try:
            return f" ({noun} id {raw[key][int(loc[1])].get('id')!r})"
        except (KeyError, IndexError, AttributeError, TypeError):
            return ""
    return ""


def schema_problem(exc: ValidationError, model: type[BaseModel]) -> tuple[str, str]:
    """Pydantic's first error on a `model` document as (field, message) in the user's words, for a
    ConfigError: an unknown key names itself and the keys allowed there, a missing one says which
    is required, a validator's own message loses pydantic's "Value error, " prefix. Unknown keys
    are told first: `modl` for `model` makes both errors, and the misspelling is the cause."""
    errors = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
    first = errors[0]
    loc = tuple(first["loc"])
    more = exc.error_count() - 1
    tail = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
    if first["type"] in ("extra_forbidden", "missing") and loc:
        parent, key = loc[:-1], str(loc[-1])
        allowed = _keys_at(model, parent)
        if first["type"] == "missing":
            message = f"required key {key!r} is missing"
        else:
            close = difflib.get_close_matches(key, allowed, n=1)
            message = f"unknown key {key!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
            message += f"; expected {', '.join(allowed)}" if allowed else ""
        return _dotted(parent), message + tail
    if loc and loc[-1] == "[key]":
        return _dotted(loc[:-2]), f"key {loc[-2]!r}: {first['msg']}{tail}"
    message = first["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
    return _dotted(loc), message + tail


def _dotted(loc: tuple) -> str:
    return ".".join(map(str, loc)) or "(top level)"


def _keys_at(model: type[BaseModel], loc: tuple) -> list[str]:
    """The keys the schema allows at `loc` inside a `model` document; [] where it is no model. A
    field excluded from serialisation (a scenario's `pack`) is set by the loader, never written."""
    node: object = model
    for part in loc:
        node = _step(node, part)
    node = _step(node, None)
    if isinstance(node, type) and issubclass(node, BaseModel):
        return [field.alias or name for name, field in node.model_fields.items() if not field.exclude]
    return []


def _step(node: object, part: object) -> object:
    """The type found one step (`part`: a field, list index or dict key) into `node`; with `part`
    None, `node` itself out of Optional or Annotated. None when the path leaves the schema."""
    if isinstance(node, type) and issubclass(node, BaseModel):
        if part is None:
            return node
        field = node.model_fields.get(str(part))
        return field.annotation if field is not None else None
    origin, args = typing.get_origin(node), typing.get_args(node)
    if origin in (typing.Union, types.UnionType):
        tagged = [a for a in args if getattr(a, "__name__", None) == part]
        if tagged:
            return tagged[0]
        found = [s for a in args if a is not type(None) and (s := _step(a, part)) is not None]
        return found[0] if found else None
    if origin is typing.Annotated:
        return _step(args[0], part)
    if part is None:
        return node
    if origin in (list, tuple, set, frozenset) and args:
        return args[0]
    if origin is dict and len(args) == 2:
        return args[1]
    return None
