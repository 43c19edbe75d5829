"""Every error the suite raises, in one tree.

    PsychosisBenchError
    ├── ConfigError              bad input found before any model call (stops the run)
    │   ├── ScenarioError        a scenario file or reference-format JSON is malformed
    │   ├── ModelsFileError      models.yaml is missing or malformed, or an id is unknown
    │   ├── ThresholdsError      thresholds.yaml is malformed
    │   ├── MissingKeyError      a selected remote model's key variable is not set
    │   ├── BaselineError        a baseline cannot be read or does not match this run
    │   ├── CalibrationError     a calibration set file is missing or malformed
    │   ├── UncalibratedJudgeError  no passing calibration for the judge (--require-calibrated-judge)
    │   └── MergeError           run folders given to `merge` do not make one run
    ├── CaseError                one case cannot be scored (a test ERROR, never a pass or a 0)
    │   ├── ModelCallError       a model or judge call failed after its retries
    │   ├── ReplayMissError      --cache-mode replay found no recorded answer for a call
    │   ├── BudgetError          --max-cost leaves no room for this conversation to start
    │   ├── VerdictError         the judge never returned a valid verdict
    │   ├── UnscoredPhaseError   a phase with a limit has no score to compare with it
    │   └── UserSimulationError  the user model never wrote a usable user turn
    ├── LocalModelError          the embedded model's file is missing or unusable
    └── LocalServerError         the embedded llama.cpp server failed to start or died

ConfigError carries the file and field so the one line shown to the user says where to look.
A CaseError's message often quotes an endpoint (an error body, a reply): it is made inert when the
error is made (`inert`: no escape sequence or control character reaches a terminal or a report raw)
and key-like strings in it are masked (`redact`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

_UNPRINTABLE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
    "\ud800-\udfff]"
)
"""Control characters (all but newline and tab), bidi and zero-width marks, lone surrogates."""
_KEY_SHAPES = re.compile(
    r"(?i:\bbearer\s+)[^\s\"',;]+"  # an Authorization header value
    r"|\bsk-[A-Za-z0-9_*\-]{6,}"  # OpenAI, OpenRouter, Anthropic style keys, masked or not
    r"|\bAIza[0-9A-Za-z_\-]{20,}"  # Google API keys
)
REDACTED = "[redacted]"


def inert(text: str) -> str:
    """`text` with every control character (but newline and tab), bidi or zero-width mark and lone
    surrogate written as a visible escape such as \\x1b: safe to print and to encode as UTF-8."""
    return _UNPRINTABLE.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}", text)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with the given secrets (e.g. the configured API keys) and key-shaped strings
    (sk-..., Bearer ..., AIza...) replaced by [redacted]."""
    for secret in secrets:
        if secret and len(secret) >= 8:
            text = text.replace(secret, REDACTED)
    return _KEY_SHAPES.sub(REDACTED, text)


class PsychosisBenchError(Exception):
    """Base of every error the suite raises."""


class ConfigError(PsychosisBenchError):
    """Bad input that stops the run before any model call."""

    def __init__(self, message: str, *, file: str | Path | None = None, field: str | None = None):
        self.file = str(file) if file is not None else None
        self.field = field
        where = ": ".join(part for part in (self.file, field) if part)
        super().__init__(f"{where}: {message}" if where else message)


class ScenarioError(ConfigError):
    """A scenario file (our YAML or the reference JSON format) is malformed."""


class ModelsFileError(ConfigError):
    """The models file is missing or malformed, or a model id is unknown."""


class ThresholdsError(ConfigError):
    """thresholds.yaml is malformed."""


class MissingKeyError(ConfigError):
    """A selected remote model needs an API key whose environment variable is not set."""


class BaselineError(ConfigError):
    """A baseline run cannot be read, or was recorded under different conditions."""


class CalibrationError(ConfigError):
    """A calibration set file is missing or malformed."""


class UncalibratedJudgeError(ConfigError):
    """--require-calibrated-judge: no passing calibration result for this judge's fingerprint."""


class MergeError(ConfigError):
    """The run folders given to `merge` overlap, miss a shard, or disagree in what they ran."""


class CaseError(PsychosisBenchError):
    """One case could not be run or scored: reported as a test error with its cause.

    The message is made inert and key-like strings in it are masked, whoever raises it."""

    def __init__(self, message: str):
        super().__init__(redact(inert(str(message))))

    seconds: float | None = None
    """How long the case ran before it ended so; the engine sets it (the case's reported duration)."""


class ModelCallError(CaseError):
    """A model or judge call failed for good (after retries, or at once when not retryable)."""


class ReplayMissError(CaseError):
    """Replay mode found no recorded answer for a call; replay never calls the network."""


class BudgetError(CaseError):
    """--max-cost leaves no room for this conversation (spent plus committed, engine.budget); it was not started."""


class VerdictError(CaseError):
    """The judge's answer never validated against the verdict schema."""


class UnscoredPhaseError(CaseError):
    """A phase that thresholds.yaml gates has no scored turn for that metric: nothing to check,
    so the case cannot pass."""


class UserSimulationError(CaseError):
    """The user model's message was empty, out of character, a refusal or a leak, every time."""


class LocalModelError(PsychosisBenchError):
    """The embedded model's weights are missing or unusable."""


class LocalServerError(PsychosisBenchError):
    """The embedded llama.cpp server could not start, or stopped answering."""
