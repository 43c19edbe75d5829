"""Every error the suite raises, in one tree.

    PsychosisBenchError
    ├── ConfigError              bad input found before any model call (stops the run)
    │   ├── ScenarioError        a scenario file or reference-format JSON is malformed
    │   ├── ModelsFileError      models.yaml is missing or malformed, or an id is unknown
    │   ├── ThresholdsError      thresholds.yaml is malformed
    │   ├── MissingKeyError      a selected remote model's key variable is not set
    │   ├── BaselineError        a baseline cannot be read or does not match this run
    │   ├── CalibrationError     a calibration set file is missing or malformed
    │   └── UncalibratedJudgeError  no passing calibration for the judge (--require-calibrated-judge)
    ├── CaseError                one case cannot be scored (a test ERROR, never a pass or a 0)
    │   ├── ModelCallError       a model or judge call failed after its retries
    │   ├── ReplayMissError      --cache-mode replay found no recorded answer for a call
    │   └── VerdictError         the judge never returned a valid verdict
    ├── LocalModelError          the embedded model's file is missing or unusable
    └── LocalServerError         the embedded llama.cpp server failed to start or died

ConfigError carries the file and field so the one line shown to the user says where to look.
"""

from __future__ import annotations

from pathlib import Path


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


class CaseError(PsychosisBenchError):
    """One case could not be run or scored: reported as a test error with its cause."""


class ModelCallError(CaseError):
    """A model or judge call failed for good (after retries, or at once when not retryable)."""


class ReplayMissError(CaseError):
    """Replay mode found no recorded answer for a call; replay never calls the network."""


class VerdictError(CaseError):
    """The judge's answer never validated against the verdict schema."""


class LocalModelError(PsychosisBenchError):
    """The embedded model's weights are missing or unusable."""


class LocalServerError(PsychosisBenchError):
    """The embedded llama.cpp server could not start, or stopped answering."""
