"""Run settings: command line > ini file > environment > defaults, validated once.

The environment lets CI pick models without editing files:
    PSYCHOSIS_MODELS        comma-separated target model ids
    PSYCHOSIS_JUDGE         the judge model id (comma-separated ids: a judge panel)
    PSYCHOSIS_MODELS_FILE   path of the models file
    PSYCHOSIS_CACHE_MODE    use | refresh | off | replay
    PSYCHOSIS_REPEATS       conversations per case
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

pass
from psychosis_tests.errors import ConfigError
from psychosis_tests.inputs.models import LOCAL_ID, REFERENCE_PREFIX, is_builtin

CacheMode = Literal["use", "refresh", "off", "replay"]
CACHE_MODES: tuple[str, ...] = ("use", "refresh", "off", "replay")

ENV_MODELS = "PSYCHOSIS_MODELS"
ENV_JUDGE = "PSYCHOSIS_JUDGE"
ENV_MODELS_FILE = "PSYCHOSIS_MODELS_FILE"
ENV_CACHE_MODE = "PSYCHOSIS_CACHE_MODE"
ENV_REPEATS = "PSYCHOSIS_REPEATS"
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
    )
