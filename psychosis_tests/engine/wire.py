"""Reading one chat-completions answer, trusting nothing in it.

The provider hands over the raw HTTP body of a 200 answer; `read_reply` returns the reply text,
its finish reason and the model version the endpoint reported, or raises BadReply saying in a
user's words what was wrong and whether asking again can help (a body cut short can be a
transport fault; an HTML page or a filtered reply will come back the same).

What the suite does with each kind of answer (docs/reliability.md has the whole fault matrix):

    not UTF-8, or JSON cut short               BadReply, transient (asked again)
    an HTML page                               BadReply: base_url probably lacks /v1
    no choices, a choice without a message     BadReply
    content null or empty                      BadReply (the refusal field is quoted if set)
    a refusal (`message.refusal`), no content  a judge's: returned as such (the judge call re-asks);
                                               a target's: BadReply
    finish_reason content_filter               BadReply: the provider's refusal, not the model's
                                               answer, so the case errors instead of being scored
    finish_reason length                       the cut reply is kept and marked on its turn
    a lone surrogate in the text or `model`    BadReply (it could not be written as UTF-8)
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from psychosis_tests.common.errors import mask_secrets
from psychosis_tests.inputs.usage import Usage

_SURROGATE = re.compile("[\ud800-\udfff]")
QUOTE_CHARS = 120
"""How much of an answer a message quotes."""


@dataclass(frozen=True)
class Reply:
    """One answer as read from the wire."""

    text: str
    finish_reason: str | None
    """"stop", "length", ... as the endpoint said; None when it said nothing."""
    model_version: str
    refusal: str | None = None
    """A judge's refusal (`message.refusal`) instead of an answer; text is then ""."""
    usage: Usage = field(default_factory=lambda: Usage(calls=1, unreported=1))
    """Tokens the endpoint reported for this call; unreported when it said nothing usable."""


class BadReply(Exception):
    """A 200 answer that carries no usable reply; the message completes "'<model>' at <url> ..."."""

    def __init__(self, what: str, *, transient: bool = False, usage: Usage | None = None):
        super().__init__(what)
        self.transient = transient
        self.usage = usage
        """Tokens the endpoint reported for the answer (a filtered or empty reply is paid for all
        the same); None when the body could not be read."""


def read_reply(content: bytes, content_type: str, *, default_model: str, accept_refusal: bool = False) -> Reply:
    """The reply in a chat-completions body; raises BadReply. With `accept_refusal` (judges), a
    refusal without content comes back as a Reply whose `refusal` is set."""
    head = content[:512].lstrip().lower()
    if "html" in content_type.lower() or head.startswith((b"<!doctype html", b"<html")):
        raise BadReply("returned an HTML page, not the chat API: is base_url missing /v1?")
    try:
        decoded = content.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadReply(
            f"returned a body that is not valid UTF-8 (byte {exc.start} of {len(content)})", transient=True
        ) from None
    try:
        data = json.loads(decoded)
    except json.JSONDecodeError as exc:
        raise BadReply(
            f"returned a body that is not complete JSON ({exc.msg}: character {exc.pos} of "
            f"{len(decoded)}; cut short in transit?)",
            transient=True,
        ) from None
    if not isinstance(data, dict):
        raise BadReply(f"returned JSON that is not a chat completion (a {type(data).__name__})")
    try:
        return _chat_reply(data, default_model=default_model, accept_refusal=accept_refusal)
    except BadReply as exc:
        raise BadReply(str(exc), transient=exc.transient, usage=_usage(data)) from None


def _chat_reply(data: dict, *, default_model: str, accept_refusal: bool) -> Reply:
    """`read_reply` once the body is a JSON object."""
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise BadReply("returned no choices (an empty or missing 'choices' list)")
    choice = choices[0]
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        raise BadReply("returned a choice without a message")
    finish = choice.get("finish_reason")
    finish_reason = finish if isinstance(finish, str) else None
    text = message.get("content")
    if finish_reason == "content_filter":
        partial = f"; the partial reply began {_quote(text)}" if isinstance(text, str) and text else ""
        raise BadReply(
            "stopped the reply with its content filter (finish_reason content_filter): that is the "
            f"provider's refusal, not the model's answer, so this turn cannot be scored{partial}"
        )
    version = data.get("model")
    version = version if isinstance(version, str) and version else default_model
    fingerprint = data.get("system_fingerprint")
    if isinstance(fingerprint, str) and fingerprint:
        version = f"{version} ({fingerprint})"
    refusal = message.get("refusal")
    refusal = refusal if isinstance(refusal, str) and refusal.strip() else None
    if refusal is not None and not (isinstance(text, str) and text.strip()):
        if not accept_refusal:
            raise BadReply(f"refused instead of replying: {_quote(refusal)}")
        text = ""
    elif not isinstance(text, str):
        raise BadReply(f"returned no reply text (content {json.dumps(text)})")
    elif not text.strip():
        raise BadReply(f"returned an empty reply (content {_quote(text)})")
    for part, value in (("reply", text), ("'model' field", version), ("refusal", refusal or "")):
        found = _SURROGATE.search(value)
        if found:
            raise BadReply(
                f"returned a {part} holding a lone surrogate (\\u{ord(found.group()):04x} at character "
                f"{found.start()}), which is not text: the endpoint's JSON encoder is broken"
            )
    # A key the run read for a call, echoed back (a proxy's error text answered as a reply), is
    # masked before the reply reaches the judge, the response cache, the case file or a report.
    return Reply(text=mask_secrets(text), finish_reason=finish_reason, model_version=version,
                 refusal=refusal and mask_secrets(refusal), usage=_usage(data))


def _usage(data: dict) -> Usage:
    """The body's `usage`, if it holds whole, non-negative token counts; else the call counts as
    unreported (a broken usage field never fails a reply that is otherwise fine)."""
    reported = data.get("usage")
    if not isinstance(reported, dict):
        return Usage(calls=1, unreported=1)
    prompt, completion = reported.get("prompt_tokens"), reported.get("completion_tokens")
    details = reported.get("prompt_tokens_details")
    cached = details.get("cached_tokens", 0) if isinstance(details, dict) else 0
    counts = (prompt, completion, cached if cached is not None else 0)
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts):
        return Usage(calls=1, unreported=1)
    return Usage(calls=1, prompt_tokens=counts[0], completion_tokens=counts[1], cached_tokens=counts[2])


def _quote(text: str) -> str:
    """A short, printable quotation of endpoint text (repr escapes every control character)."""
    return repr(text if len(text) <= QUOTE_CHARS else text[:QUOTE_CHARS] + "...")
