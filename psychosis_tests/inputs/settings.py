"""Run settings: command line > environment > ini file > defaults, validated once, before any call.

Every setting an ini key can hold also has an environment variable, so CI picks models and
paths without editing files (ENV names them all):
    PSYCHOSIS_MODELS             comma-separated target model ids
    PSYCHOSIS_JUDGE              the judge model id (comma-separated ids: a judge panel)
    PSYCHOSIS_MODELS_FILE        path of the models file
    PSYCHOSIS_SCENARIOS          scenario folder or reference-format JSON file
    PSYCHOSIS_PACKS              comma-separated scenario packs added to the run (folders under packs/)
    PSYCHOSIS_THRESHOLDS         thresholds file
    PSYCHOSIS_REPORT_DIR         where run folders go
    PSYCHOSIS_CACHE_MODE         use | refresh | off | replay
    PSYCHOSIS_CACHE_PATH         response cache file
    PSYCHOSIS_REPEATS            conversations per case
    PSYCHOSIS_PROGRESS_INTERVAL  seconds between progress lines (0: none)
    PSYCHOSIS_USER_MODEL         the model that plays the user (adaptive mode)
    PSYCHOSIS_USER_MODE          scripted | adaptive
    PSYCHOSIS_TURNS              user turns per conversation
    PSYCHOSIS_MAX_COST           keep the run's spending near this many US dollars (--max-cost)
    PSYCHOSIS_REQUIRE_CALIBRATED_JUDGE  1/true: refuse a judge without a passing calibration
    PSYCHOSIS_CALIBRATION        the calibration set (-m judge_calibration, `calibrate`)
    PSYCHOSIS_JUDGE_REPEATS      judge calls per calibration item (self-consistency)
    PSYCHOSIS_ESCALATE_TO        make the judge a cascade escalating to this id (comma-separated: a panel)
    PSYCHOSIS_ESCALATE_THRESHOLD the cascade's thresholds: one number, or dcs=0.7,sis=0.9,...

A relative path is taken from where it was given: from the working directory for the command line
and the environment, from the ini file's folder for an ini value, and from the project folder for
a default.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Literal, NamedTuple

from pydantic import BaseModel, Field

from psychosis_tests.common.errors import ConfigError
from psychosis_tests.inputs.method import JUDGED_METRICS, MAX_TURNS
from psychosis_tests.inputs.models import (
    LOCAL_ID,
    REFERENCE_PREFIX,
    TRAINED_ID,
    ModelSpec,
    is_builtin,
    load_models_file,
    select,
    spelled_cascade,
)
from psychosis_tests.inputs.packs import available_packs, pack_folder
from psychosis_tests.inputs.shards import ShardSpec

CacheMode = Literal["use", "refresh", "off", "replay"]
CACHE_MODES: tuple[str, ...] = ("use", "refresh", "off", "replay")
REFERENCE_JUDGE = f"{REFERENCE_PREFIX}judge"
DEFAULT_PROGRESS_INTERVAL = 10.0
MAX_PROGRESS_INTERVAL = 86400.0
"""At most a day between progress lines: the wait is a thread's timeout, which cannot be endless
(`inf` errored every case); 0 turns them off."""

ENV: dict[str, str] = {
    "model": "PSYCHOSIS_MODELS",
    "judge": "PSYCHOSIS_JUDGE",
    "models_file": "PSYCHOSIS_MODELS_FILE",
    "scenarios": "PSYCHOSIS_SCENARIOS",
    "pack": "PSYCHOSIS_PACKS",
    "thresholds": "PSYCHOSIS_THRESHOLDS",
    "report_dir": "PSYCHOSIS_REPORT_DIR",
    "cache_mode": "PSYCHOSIS_CACHE_MODE",
    "cache_path": "PSYCHOSIS_CACHE_PATH",
    "repeats": "PSYCHOSIS_REPEATS",
    "progress_interval": "PSYCHOSIS_PROGRESS_INTERVAL",
    "user_model": "PSYCHOSIS_USER_MODEL",
    "user_mode": "PSYCHOSIS_USER_MODE",
    "turns": "PSYCHOSIS_TURNS",
    "max_cost": "PSYCHOSIS_MAX_COST",
    "require_calibrated_judge": "PSYCHOSIS_REQUIRE_CALIBRATED_JUDGE",
    "calibration": "PSYCHOSIS_CALIBRATION",
    "judge_repeats": "PSYCHOSIS_JUDGE_REPEATS",
    "escalate_to": "PSYCHOSIS_ESCALATE_TO",
    "escalate_threshold": "PSYCHOSIS_ESCALATE_THRESHOLD",
}
"""Setting name -> its environment variable. A setting without one is given per run, on the
command line only (--baseline, --force-baseline, --shard, --estimate, --profile-snapshots)."""


def environment_of(names: Iterable[str]) -> dict[str, str]:
    """The environment variables of these settings that are set, and only them: a command that
    reads some of the benchmark's settings (calibrate, train-judge's gate) ignores the others."""
    return {ENV[name]: os.environ[ENV[name]] for name in names if ENV[name] in os.environ}


INI_PLURAL = {"model": "models", "pack": "packs"}
"""Settings given repeatedly on the command line whose ini key (and environment variable) is plural."""
UserMode = Literal["scripted", "adaptive"]
USER_MODES: tuple[str, ...] = ("scripted", "adaptive")
MAX_JUDGE_REPEATS = 20
SWITCH_WORDS: dict[str, bool] = {"1": True, "true": True, "yes": True, "on": True,
                                 "0": False, "false": False, "no": False, "off": False}  # fmt: skip
"""How an on/off setting may be written in the environment or the ini file."""


class RunSettings(BaseModel):
    """Everything a run needs to know before it starts."""

    targets: list[str] = Field(min_length=1)
    """Target model ids."""
    judges: list[str] = Field(min_length=1)
    """Judge model ids: one judge, or a panel that votes (median DCS/HES, majority SIS)."""
    models_file: Path
    """The models file (absolute)."""
    models_file_given: bool
    """Whether the user named the models file (then it must exist)."""
    scenarios: Path
    """A folder of scenario YAML or one reference-format JSON file: the main set."""
    packs: dict[str, Path] = Field(default_factory=dict)
    """--pack: the scenario packs added to the main set, name -> folder (inputs.packs)."""
    known_packs: list[str] = Field(default_factory=list)
    """Every pack of the project, added or not: the names a thresholds file's `packs:` may use."""
    thresholds: Path
    """The thresholds file."""
    report_dir: Path
    """Where run folders are made."""
    cache_mode: CacheMode = "use"
    """How the response cache is used."""
    cache_path: Path
    """The response cache file."""
    repeats: int = Field(default=1, ge=1, le=100)
    """Conversations per case."""
    baseline: Path | None = None
    """An earlier run (folder or results.json) to compare with."""
    force_baseline: bool = False
    """Compare with the baseline even when it is not comparable."""
    require_calibrated_judge: bool = False
    """Refuse to run unless a passing calibration result for this judge's fingerprint exists."""
    calibration: Path | None = None
    """The calibration set (a folder of *.yaml or one file) the judge calibration scores; resolve
    always sets it (default: calibration/ in the project)."""
    judge_repeats: int = Field(default=1, ge=1, le=MAX_JUDGE_REPEATS)
    """Judge calls per calibration item (distinct seeds), for the judge's self-consistency."""
    progress_interval: float = Field(default=DEFAULT_PROGRESS_INTERVAL, ge=0, le=MAX_PROGRESS_INTERVAL)
    """Seconds between progress lines; 0 turns them off."""
    user_model: str | None = None
    """Model id that writes user turns; None: the script writes them all."""
    user_mode: UserMode = "scripted"
    """adaptive: the user model writes every turn, scripted turns as anchors; scripted: the
    scripted turns verbatim, the user model writing only turns added between them."""
    turns: int | None = Field(default=None, ge=4, le=MAX_TURNS)
    """User turns per conversation, the four phases stretched proportionally; None: as scripted."""
    shard: ShardSpec | None = None
    """--shard K/N: run only this share of the selected cases."""
    max_cost: float | None = Field(default=None, ge=0)
    """--max-cost USD: start a conversation only while the spending plus what the conversations under
    way are expected to cost is below this (engine.budget)."""
    escalate_to: list[str] = Field(default_factory=list)
    """--escalate-to ID: the judge becomes a cascade of it (first) and these (a panel if several)."""
    escalate_to_source: str = "--escalate-to"
    """Where escalate_to was given (`--escalate-to`, `PSYCHOSIS_ESCALATE_TO`, an ini key), for error messages."""
    judge_source: str | None = "--judge"
    """Where the judges were given (`--judge`, `PSYCHOSIS_JUDGE`, an ini key); None: the targets' default judge."""
    escalate_thresholds: dict[str, float] = Field(default_factory=dict)
    """--escalate-threshold: the cascade's thresholds per metric (unset ones take the defaults)."""

    @property
    def judge(self) -> str:
        """The judges as one id (`A+B+C` for a panel)."""
        return "+".join(self.judges)


class Given(NamedTuple):
    """A setting's value as one source gave it."""

    value: object
    source: str
    """Where it came from, for error messages: `--repeats`, `PSYCHOSIS_REPEATS`, an ini key."""
    base: Path
    """The folder a relative path in it is taken from."""


Lookup = Callable[[str], object]
"""A source of raw values by setting name; None (or empty) when the source does not give it."""


def _empty(value: object) -> bool:
    return value is None or value is False or (isinstance(value, (str, list, tuple)) and not value)


def _default_judge(targets: list[str]) -> str:
    """The judge implied by the targets: the trained judge (in-process, calibrated) judges the
    offline default target, the reference judge (a test double written for them) judges the
    reference models; otherwise none. The generative `local` judge stays selectable by name."""
    if targets == [LOCAL_ID]:
        return TRAINED_ID
    if all(t.startswith(REFERENCE_PREFIX) and is_builtin(t) for t in targets):
        return REFERENCE_JUDGE
    return ""


def flag(name: str) -> str:
    """The command-line flag of a setting."""
    return "--" + name.replace("_", "-")


def resolve(
    cli: Lookup,
    environ: Mapping[str, str],
    project: Path,
    ini: Lookup | None = None,
    *,
    cwd: Path | None = None,
    ini_source: str = "ini file",
) -> RunSettings:
    """Build and validate the settings: `cli(name)`, then `environ`, then `ini(name)`, then defaults.

    `project` is the project folder (defaults, and relative ini values, are taken from there);
    `cwd` the working directory (relative command-line and environment paths)."""
    here = Path(os.path.abspath(cwd or Path.cwd()))
    project = Path(os.path.abspath(project))

    def pick(name: str) -> Given | None:
        value = cli(name)
        if not _empty(value):
            return Given(value, flag(name), here)
        env = ENV.get(name)
        if env and environ.get(env, "").strip():
            return Given(environ[env].strip(), env, here)
        value = ini(name) if ini is not None and name in ENV else None
        if not _empty(value):
            return Given(value, f"psychosis_{INI_PLURAL.get(name, name)} in the {ini_source}", project)
        return None

    def path(name: str, default: Path) -> Path:
        given = pick(name)
        if given is None:
            return default
        p = Path(str(given.value)).expanduser()
        return Path(os.path.abspath(p if p.is_absolute() else given.base / p))

    def number(name: str, kind: type, default: float, low: float, high: float | None) -> float:
        given = pick(name)
        if given is None:
            return default
        what = "a whole number" if kind is int else "a number"
        try:
            value = kind(str(given.value).strip())
        except ValueError:
            raise ConfigError(f"must be {what}, got {given.value!r}", field=given.source) from None
        if math.isnan(value):  # it would pass every comparison below
            raise ConfigError(f"must be {what}, got {given.value!r}", field=given.source)
        if value < low or (high is not None and value > high):
            limits = f"between {low:g} and {high:g}" if high is not None else f"at least {low:g}"
            raise ConfigError(f"must be {limits}, got {given.value!r}", field=given.source)
        return value

    def switch(name: str) -> bool:
        """An on/off setting: a flag on the command line, a word of SWITCH_WORDS elsewhere."""
        given = pick(name)
        if given is None or given.value is True:
            return given is not None
        word = str(given.value).strip().lower()
        if word not in SWITCH_WORDS:
            raise ConfigError(f"must be one of {', '.join(SWITCH_WORDS)}, got {given.value!r}", field=given.source)
        return SWITCH_WORDS[word]

    def ids(given: Given | None) -> list[str]:
        """Model ids given repeatedly (command line, an ini key's lines), comma-separated (environment,
        ini) or both (an id holds no comma). Given, it must name one: `PSYCHOSIS_MODELS=,` or
        `--model ""` would otherwise pass for not given and run the default."""
        if given is None:
            return []
        raw = given.value
        texts = [raw] if isinstance(raw, str) else [str(t) for t in raw]  # type: ignore[union-attr]
        found = list(dict.fromkeys(p.strip() for t in texts for p in t.split(",") if p.strip()))
        if not found:
            raise ConfigError(f"names nothing, got {','.join(texts)!r}; give one or more names, comma-separated", field=given.source)
        return found

    targets = ids(pick("model")) or [LOCAL_ID]
    given_judge = pick("judge")
    judges = ids(given_judge) or [j for j in [_default_judge(targets)] if j]
    models_file = path("models_file", project / "models.yaml")
    if not judges:
        # A misspelt target (reference/guardain) leaves no judge to choose: its id is the problem.
        registry = load_models_file(models_file, required=pick("models_file") is not None)
        select(registry, targets, models_file=models_file)
        raise ConfigError(
            f"no judge model: pass --judge ID or set {ENV['judge']} "
            f"(a judge is chosen for you only when the targets are the default {LOCAL_ID!r} "
            f"or all built-in {REFERENCE_PREFIX}* models)",
            field="--judge",
        )
    given_mode = pick("cache_mode")
    cache_mode = str(given_mode.value).strip() if given_mode else "use"
    if cache_mode not in CACHE_MODES:
        raise ConfigError(
            f"invalid cache mode {cache_mode!r}; valid: {', '.join(CACHE_MODES)}",
            field=given_mode.source if given_mode else "--cache-mode",
        )
    report_dir = path("report_dir", project / "reports")
    check_output(report_dir, folder=True, field=_source(pick("report_dir"), "report_dir"))
    cache_path = path("cache_path", report_dir / "cache.sqlite3")
    check_output(cache_path, folder=False, field=_source(pick("cache_path"), "cache_path"))
    baseline = pick("baseline")
    given_user = pick("user_model")
    user_model = str(given_user.value).strip() if given_user else None
    if given_user and not user_model:
        raise ConfigError(f"names no model, got {given_user.value!r}", field=given_user.source)
    given_user_mode = pick("user_mode")
    user_mode = str(given_user_mode.value).strip() if given_user_mode else ("adaptive" if user_model else "scripted")
    if user_mode not in USER_MODES:
        raise ConfigError(
            f"invalid user mode {user_mode!r}; valid: {', '.join(USER_MODES)}",
            field=given_user_mode.source if given_user_mode else "--user-mode",
        )
    if user_mode == "adaptive" and not user_model:
        raise ConfigError("adaptive mode needs a user model, the model that plays the user (--user-model ID)",
                          field=given_user_mode.source if given_user_mode else "--user-mode")  # fmt: skip
    turns = int(number("turns", int, 0, 4, MAX_TURNS)) or None
    given_escalate_to = pick("escalate_to")
    escalate_to = ids(given_escalate_to)
    given_thresholds = pick("escalate_threshold")
    escalate_thresholds = _thresholds(given_thresholds)
    if given_thresholds is not None and not escalate_to:
        raise ConfigError("sets a cascade's thresholds: give --escalate-to ID too", field=given_thresholds.source)
    if escalate_to and len(judges) != 1:
        raise ConfigError(f"makes a cascade of one first judge, got {len(judges)} judges ({'+'.join(judges)}); give "
                          "one --judge (the escalation may be a panel: repeat --escalate-to)", field=given_escalate_to.source)  # fmt: skip
    given_packs = pick("pack")
    packs = {name: pack_folder(project, name, source=given_packs.source) for name in ids(given_packs)}  # type: ignore[union-attr]
    given_calibration = pick("calibration")
    calibration = path("calibration", project / "calibration")
    if given_calibration is not None and not calibration.exists():
        # A benchmark run would only report its judge "not calibrated" on a set that is not there.
        raise ConfigError(f"{calibration}: calibration set not found (give a folder of *.yaml files or one file)",
                          field=given_calibration.source)  # fmt: skip
    shard = cli("shard")
    max_cost = number("max_cost", float, -1.0, 0, None) if pick("max_cost") else None
    return RunSettings(
        targets=targets,
        judges=judges,
        models_file=models_file,
        models_file_given=pick("models_file") is not None,
        scenarios=path("scenarios", project / "scenarios"),
        packs=packs,
        known_packs=available_packs(project),
        thresholds=path("thresholds", project / "thresholds.yaml"),
        report_dir=report_dir,
        cache_mode=cache_mode,  # type: ignore[arg-type]
        cache_path=cache_path,
        repeats=int(number("repeats", int, 1, 1, 100)),
        baseline=path("baseline", project) if baseline else None,
        force_baseline=not _empty(cli("force_baseline")),
        require_calibrated_judge=switch("require_calibrated_judge"),
        calibration=calibration,
        judge_repeats=int(number("judge_repeats", int, 1, 1, MAX_JUDGE_REPEATS)),
        progress_interval=number("progress_interval", float, DEFAULT_PROGRESS_INTERVAL, 0, MAX_PROGRESS_INTERVAL),
        user_model=user_model,
        user_mode=user_mode,  # type: ignore[arg-type]
        turns=turns,
        shard=ShardSpec.parse(str(shard)) if not _empty(shard) else None,
        max_cost=max_cost,
        escalate_to=escalate_to,
        escalate_to_source=given_escalate_to.source if given_escalate_to else "--escalate-to",
        judge_source=given_judge.source if given_judge else None,
        escalate_thresholds=escalate_thresholds,
    )


def _source(given: Given | None, name: str) -> str:
    """Where a setting was given, for an error message; its flag when it was not."""
    return given.source if given is not None else flag(name)


def check_output(path: Path, *, folder: bool, field: str) -> None:
    """Stop with one line naming `field` when `path` (a folder if `folder`, else a file) cannot be
    made because something of the other kind is in its way; found before any call, not as a
    traceback when the run writes its first file."""
    if path.exists():
        if path.is_dir() != folder:
            raise ConfigError(f"{path} is a {'file' if folder else 'folder'}; give a {'folder' if folder else 'file'}", field=field)
        return
    existing = next(p for p in path.parents if p.exists())
    if not existing.is_dir():
        raise ConfigError(f"{existing} is a file, so {path} cannot be made in it", field=field)


def _thresholds(given: Given | None) -> dict[str, float]:
    """--escalate-threshold as `escalation_thresholds` reads it; none given, none set."""
    return {} if given is None else escalation_thresholds(str(given.value), given.source)


def escalation_thresholds(text: str, source: str) -> dict[str, float]:
    """A cascade's thresholds: one probability for every metric, or `dcs=0.8,sis=0.9` for some;
    ConfigError naming `source` (the option or variable that gave them) otherwise."""
    text = text.strip()
    pairs = [p.split("=", 1) if "=" in p else ["", p] for p in text.split(",") if p.strip()]
    found: dict[str, float] = {}
    for metric, raw in pairs:
        metric = metric.strip().lower()
        if metric and metric not in JUDGED_METRICS:
            raise ConfigError(f"unknown metric {metric!r} in {text!r}; known: {', '.join(JUDGED_METRICS)}", field=source)
        try:
            value = float(raw)
        except ValueError:
            raise ConfigError(f"expected a probability or metric=probability pairs, got {text!r}", field=source) from None
        if not 0 <= value <= 1:
            raise ConfigError(f"a threshold is a probability between 0 and 1, got {raw.strip()!r}", field=source)
        found.update({m: value for m in ([metric] if metric else JUDGED_METRICS)})
    return found


def select_judges(registry: dict[str, ModelSpec], settings: RunSettings) -> list[ModelSpec]:
    """The run's judges: --judge's (a panel when several), or with --escalate-to one cascade whose
    first judge is the --judge (which must give probabilities: kind trained)."""
    judges = select(registry, settings.judges, models_file=settings.models_file)
    if not settings.escalate_to:
        return judges
    first = judges[0]
    if first.kind != "trained":
        given = (f"from {settings.judge_source}" if settings.judge_source
                 else f"the default --judge for {'reference' if first.id == REFERENCE_JUDGE else 'these'} targets")
        raise ConfigError(f"makes a cascade whose first judge is the --judge, and {first.id!r} (kind {first.kind}, {given}) "
                          "gives no probabilities; pass --judge trained (only kind: trained judges give probabilities)",
                          field=settings.escalate_to_source)  # fmt: skip
    return [spelled_cascade(judges[0].id, settings.escalate_to, settings.escalate_thresholds, registry,
                            models_file=settings.models_file)]  # fmt: skip
