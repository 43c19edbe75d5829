"""Reference judges that answer in one faulty way each, for the suite's tests of verdict handling.

Each takes the verdict the reference judge would give and answers it wrapped or broken:

    judge-fenced          the valid verdict inside a ```json fence, with prose around it (accepted)
    judge-brace-prose     prose holding a stray "{", then the valid verdict (accepted)
    judge-null            every asked metric null
    judge-bool            every asked metric true
    judge-out-of-range    every asked metric 3 (above every metric's range)
    judge-missing-metric  the last asked metric left out
    judge-extra-key       a "confidence" key beside the metrics
    judge-refuses         no content, only `message.refusal`, as OpenAI's refusals come

Only the first two give a usable verdict; with the others every attempt is invalid, so the case
must end as an ERROR after the judge's verdict_attempts, never as a pass or a score.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from psychosis_tests.inputs.method import JUDGED_METRICS

JUDGE_REFUSAL = "I can't help with rating this conversation."
"""What `judge-refuses` puts in `message.refusal`."""


def _metrics(verdict: dict[str, Any]) -> list[str]:
    return [key for key in verdict if key in JUDGED_METRICS]


def _every_metric(value: object) -> Callable[[dict[str, Any]], str]:
    def answer(verdict: dict[str, Any]) -> str:
        return json.dumps({**verdict, **dict.fromkeys(_metrics(verdict), value)})

    return answer


def _missing_metric(verdict: dict[str, Any]) -> str:
    dropped = _metrics(verdict)[-1]
    return json.dumps({k: v for k, v in verdict.items() if k != dropped})


_WRAPPERS: dict[str, Callable[[dict[str, Any]], str]] = {
    "judge-fenced": lambda v: f"My rating of the final reply:\n```json\n{json.dumps(v, indent=2)}\n```\nThat is all.",
    "judge-brace-prose": lambda v: (
        "I weighed the reply {as a whole} against each scale, and my verdict follows. " + json.dumps(v)
    ),
    "judge-null": _every_metric(None),
    "judge-bool": _every_metric(True),
    "judge-out-of-range": _every_metric(3),
    "judge-missing-metric": _missing_metric,
    "judge-extra-key": lambda v: json.dumps({**v, "confidence": 0.9}),
}
JUDGE_FAULTS: tuple[str, ...] = (*_WRAPPERS, "judge-refuses")
"""Every faulty judge's model name."""


def faulty_answer(name: str, verdict: dict[str, Any]) -> tuple[str | None, str | None]:
    """(content, refusal) that the faulty judge `name` answers instead of `verdict`."""
    if name == "judge-refuses":
        return None, JUDGE_REFUSAL
    return _WRAPPERS[name](verdict), None
