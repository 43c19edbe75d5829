"""Run settings: command line > ini file > environment > defaults, validated once.

The environment lets CI pick models without editing files:
    PSYCHOSIS_MODELS        comma-separated target model ids
    PSYCHOSIS_JUDGE         the judge model id (comma-separated ids: a judge panel)
    PSYCHOSIS_MODELS_FILE   path of the models file
    PSYCHOSIS_CACHE_MODE    use | refresh | off | replay
    PSYCHOSIS_REPEATS       conversations per case
    PSYCHOSIS_USER_MODEL    the model that plays the user (adaptive mode)
    PSYCHOSIS_TURNS         user turns per conversation
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from psychosis_tests.errors import ConfigError
from psychosis_tests.inputs.method import MAX_TURNS
from psychosis_tests.inputs.models import LOCAL_ID, REFERENCE_PREFIX, is_builtin
from psychosis_tests.inputs.shards import ShardSpec

CacheMode = Literal["use", "refresh", "off", "replay"]
CACHE_MODES: tuple[str, ...] = ("use", "refresh", "off", "replay")

ENV_MODELS = "PSYCHOSIS_MODELS"
ENV_JUDGE = "PSYCHOSIS_JUDGE"
ENV_MODELS_FILE = "PSYCHOSIS_MODELS_FILE"
ENV_CACHE_MODE = "PSYCHOSIS_CACHE_MODE"
ENV_REPEATS = "PSYCHOSIS_REPEATS"
ENV_USER_MODEL = "PSYCHOSIS_USER_MODEL"
ENV_TURNS = "PSYCHOSIS_TURNS"
UserMode = Literal["scripted", "adaptive"]
USER_MODES: tuple[str, ...] = ("scripted", "adaptive")
REFERENCE_JUDGE = f"{REFERENCE_PREFIX}judge"


class RunSettings(BaseModel):
    """Everything a run needs to know before it starts."""

    targets: list[str] = Field(min_length=1)
    """Target model ids."""
    judges: list[str] = Field(min_length=1)
    """Judge model ids: one judge, or a panel that votes (median DCS/HES, majority SIS)."""
    models_file: Path
    models_file_given: bool
    """Whether the user named the models file (then it must exist)."""
    scenarios: Path
    thresholds: Path
    report_dir: Path
    cache_mode: CacheMode = "use"
    cache_path: Path
    repeats: int = Field(default=1, ge=1, le=100)
    baseline: Path | None = None
    force_baseline: bool = False
    require_calibrated_judge: bool = False
    """Refuse to run unless a passing calibration result for this judge's fingerprint exists."""
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
    """--max-cost USD: start no new conversation once the run has spent more than this."""

    @property
    def judge(self) -> str:
        """The judges as one id (`A+B+C` for a panel)."""
        return "+".join(self.judges)


def _default_judge(targets: list[str]) -> str:
    """The judge implied by the targets: the local model judges itself, the reference judge
    (a test double written for them) judges the reference models; otherwise none."""
    if targets == [LOCAL_ID]:
        return LOCAL_ID
    if all(t.startswith(REFERENCE_PREFIX) and is_builtin(t) for t in targets):
        return REFERENCE_JUDGE
    return ""


def resolve(
    get: Callable[[str], object],
    environ: dict[str, str],
    root: Path,
) -> RunSettings:
    """Build settings; `get(name)` returns the CLI value if given, else the ini value, else None."""

    def pick(name: str, env: str | None = None) -> object:
        value = get(name)
        if value in (None, "", []) and env:
            value = environ.get(env) or None
        return value

    def path(value: object, default: Path) -> Path:
        if value in (None, ""):
            return default
        p = Path(str(value)).expanduser()
        return p if p.is_absolute() else (root / p)

    targets = pick("model", ENV_MODELS)
    if isinstance(targets, str):
        targets = [t.strip() for t in targets.split(",") if t.strip()]
    targets = list(dict.fromkeys(targets or [LOCAL_ID]))
    judge_value = pick("judge", ENV_JUDGE)
    if isinstance(judge_value, str):
        judge_value = [j.strip() for j in judge_value.split(",") if j.strip()]
    judges = list(dict.fromkeys(judge_value or [])) or [j for j in [_default_judge(targets)] if j]
    if not judges:
        raise ConfigError(
            f"no judge model: pass --judge ID or set {ENV_JUDGE} "
            f"(a judge is chosen for you only when the targets are the default {LOCAL_ID!r} "
            f"or all built-in {REFERENCE_PREFIX}* models)",
            field="--judge",
        )
    models_file_value = pick("models_file", ENV_MODELS_FILE)
    cache_mode = str(pick("cache_mode", ENV_CACHE_MODE) or "use")
    if cache_mode not in CACHE_MODES:
        raise ConfigError(f"invalid --cache-mode {cache_mode!r}; valid: {', '.join(CACHE_MODES)}", field="--cache-mode")
    repeats_value = pick("repeats", ENV_REPEATS) or 1
    try:
        repeats = int(str(repeats_value))
    except ValueError:
        raise ConfigError(f"--repeats must be a whole number, got {repeats_value!r}", field="--repeats") from None
    if not 1 <= repeats <= 100:
        raise ConfigError(f"--repeats must be between 1 and 100, got {repeats}", field="--repeats")
    report_dir = path(pick("report_dir"), root / "reports")
    baseline = pick("baseline")
    user_model = str(pick("user_model", ENV_USER_MODEL) or "") or None
    user_mode = str(pick("user_mode") or ("adaptive" if user_model else "scripted"))
    if user_mode not in USER_MODES:
        raise ConfigError(f"invalid --user-mode {user_mode!r}; valid: {', '.join(USER_MODES)}", field="--user-mode")
    if user_mode == "adaptive" and not user_model:
        raise ConfigError("--user-mode adaptive needs --user-model ID (the model that plays the user)",
                          field="--user-mode")
    turns_value = pick("turns", ENV_TURNS)
    turns = None
    if turns_value not in (None, ""):
        try:
            turns = int(str(turns_value))
        except ValueError:
            raise ConfigError(f"--turns must be a whole number, got {turns_value!r}", field="--turns") from None
        if not 4 <= turns <= MAX_TURNS:
            raise ConfigError(f"--turns must be between 4 (one per phase) and {MAX_TURNS}, got {turns}",
                              field="--turns")
    shard = get("shard")
    max_cost = pick("max_cost")
    try:
        max_cost = float(str(max_cost)) if max_cost not in (None, "") else None
    except ValueError:
        raise ConfigError(f"--max-cost must be an amount in US dollars, got {max_cost!r}", field="--max-cost") from None
    if max_cost is not None and max_cost < 0:
        raise ConfigError(f"--max-cost must not be negative, got {max_cost}", field="--max-cost")
    return RunSettings(
        targets=targets,
        judges=judges,
        models_file=path(models_file_value, root / "models.yaml"),
        models_file_given=models_file_value not in (None, ""),
        scenarios=path(pick("scenarios"), root / "scenarios"),
        thresholds=path(pick("thresholds"), root / "thresholds.yaml"),
        report_dir=report_dir,
        cache_mode=cache_mode,  # type: ignore[arg-type]
        cache_path=path(pick("cache_path"), report_dir / "cache.sqlite3"),
        repeats=repeats,
        baseline=path(baseline, Path()) if baseline else None,
        force_baseline=bool(get("force_baseline")),
        require_calibrated_judge=bool(get("require_calibrated_judge")),
        user_model=user_model,
        user_mode=user_mode,  # type: ignore[arg-type]
        turns=turns,
        shard=ShardSpec.parse(str(shard)) if shard not in (None, "") else None,
        max_cost=max_cost,
    )
