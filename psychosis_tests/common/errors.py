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
    └── LocalServerError         the embedded llama.cpp server failed to start

ConfigError carries the file and field so the one line shown to the user says where to look.
A CaseError's message often quotes an endpoint (an error body, a reply): it is made inert when the
error is made (`inert`: no escape sequence or control character reaches a terminal or a report raw)
and key-like strings in it are masked (`redact`), as are the credentials a URL in it may carry
(`safe_url`: a base_url's user:password@ and query values).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

_UNPRINTABLE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f"
    "\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb"
    "\ud800-\udfff\U0001d173-\U0001d17a\U000e0000-\U000e0fff]"
)
"""Control characters (all but newline and tab); bidi, zero-width and other invisible format marks
(the Arabic letter mark, word joiner, byte order mark, variation selectors, Hangul fillers...);
Unicode tag characters, which can carry hidden ASCII text; lone surrogates."""
_KEY_SHAPES = re.compile(
    r"(?i:\bbearer\s+)[^\s\"',;]+"  # an Authorization header value
    r"|\bsk-[A-Za-z0-9_*\-]{6,}"  # OpenAI, OpenRouter, Anthropic style keys, masked or not
    r"|\bAIza[0-9A-Za-z_\-]{20,}"  # Google API keys
)
_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s\"'<>]+")
_AUTHORITY = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*://)([^/]*)")
REDACTED = "[redacted]"
SHORTEST_SECRET = 8
"""A secret shorter than this is not masked (it would mask ordinary words); a key cut by a length
limit is masked down to this many of its first characters."""
_SECRETS: set[str] = set()


def remember_secret(value: str) -> None:
    """Mask `value` (an API key read from the environment for a call) in every error, warning and
    report text that `redact` sees from now on, whoever raises it."""
    if len(value) >= SHORTEST_SECRET:
        _SECRETS.add(value)


def inert(text: str) -> str:
    """`text` with every control character (but newline and tab), invisible format mark (bidi,
    zero-width, byte order mark...), tag character and lone surrogate written as a visible escape
    such as \\x1b: safe to print and to encode as UTF-8."""
    return _UNPRINTABLE.sub(lambda m: _escape(ord(m.group())), text)


def _escape(code: int) -> str:
    """A code point written as Python writes it in a string literal: \\x1b, \\u202e, \\U000e0041."""
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with the given secrets and every remembered one (`remember_secret`: the API keys read
    for calls), each also where a length limit cut it short, key-shaped strings (sk-...,
    Bearer ..., AIza...) and the credentials in its URLs (`safe_url`) replaced by [redacted]."""
    text = _KEY_SHAPES.sub(REDACTED, text)  # first: a provider's masked echo (sk-abc****wxyz) goes whole
    text = _URL.sub(lambda found: safe_url(found.group()), text)
    return mask_secrets(text, secrets)


def safe_url(url: str) -> str:
    """`url` with its user info (user:password@) and each value of its query replaced by
    [redacted]: a base_url may carry credentials there, and messages, reports and the judge's
    fingerprint name the endpoint. Split by hand, not by urlsplit, which refuses some malformed
    URLs (an unclosed IPv6 bracket) that a message must still show."""
    rest, hash_, fragment = url.partition("#")
    rest, question, query = rest.partition("?")
    authority = _AUTHORITY.match(rest)
    if authority and "@" in authority.group(2):
        rest = f"{authority.group(1)}{REDACTED}@{authority.group(2).rpartition('@')[2]}{rest[authority.end():]}"
    if query:
        query = "&".join(f"{name}={REDACTED}" if sep else REDACTED
                         for name, sep, _ in (item.partition("=") for item in query.split("&")))  # fmt: skip
    return rest + question + query + hash_ + fragment


def mask_secrets(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with the given secrets and every remembered one replaced by [redacted], also where a
    length limit cut one short, and nothing else: for a reply, whose ordinary words a key shape
    could catch ("the bearer of bad news")."""
    for secret in sorted({*secrets, *_SECRETS}, key=len, reverse=True):
        if len(secret) >= SHORTEST_SECRET:
            text = _mask(text, secret)
    return text


def _mask(text: str, secret: str) -> str:
    """Every run of `text` that is `secret` or a prefix of it at least SHORTEST_SECRET long."""
    head, kept, start = secret[:SHORTEST_SECRET], [], 0
    while (found := text.find(head, start)) >= 0:
        end = found + SHORTEST_SECRET
        while end < len(text) and end - found < len(secret) and text[end] == secret[end - found]:
            end += 1
        kept += [text[start:found], REDACTED]
        start = end
    return "".join(kept) + text[start:]


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


class CacheError(CaseError):
    """The response cache failed to read or keep an answer (a file damaged mid-way, a lock held
    past the busy timeout): the case errors naming the file."""


class UserSimulationError(CaseError):
    """The user model's message was empty, out of character, a refusal or a leak, every time."""


class LocalModelError(PsychosisBenchError):
    """The embedded model's weights are missing or unusable."""


class LocalServerError(PsychosisBenchError):
    """The embedded llama.cpp server could not start, or stopped answering."""
