"""Token usage of model calls, as endpoints report it, and what it costs at a model's price.

One Usage describes one call or the sum of several. It is kept per turn and role in transcripts,
with each answer in the response cache (a cache hit reports the usage its answer was recorded
with, counted under `cache_hits`), and summed per model and role in the run's summary.
"""

from __future__ import annotations

from pydantic import BaseModel, Field, model_validator

from psychosis_tests.inputs.yaml_files import numbers_not_booleans

ROLES = ("target", "judge", "user")
"""Who a call was made for: the model under test, the judge, the simulated user."""


class Price(BaseModel):
    """A model's price in US dollars per million tokens (`price:` on a models-file entry); finite,
    as a cost of inf dollars cannot be written to results.json."""

    model_config = {"extra": "forbid"}

    input_per_mtok: float = Field(ge=0, allow_inf_nan=False)
    """Dollars per million prompt tokens."""
    output_per_mtok: float = Field(ge=0, allow_inf_nan=False)
    """Dollars per million completion tokens."""
    cached_input_per_mtok: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    """Dollars per million prompt tokens the endpoint served from its prompt cache; None: the input price."""
    batch_input_per_mtok: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    """Through the provider's Batch API (`batch: true`): dollars per million prompt tokens; None:
    the input price less `batch_discount`."""
    batch_output_per_mtok: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    """Through the Batch API: dollars per million completion tokens; None: the output price less `batch_discount`."""
    batch_discount: float = Field(default=0.0, ge=0, lt=1)
    """The share the Batch API takes off the prices it does not set (0.5: half price)."""

    @model_validator(mode="before")
    @classmethod
    def _numbers(cls, data: object) -> object:
        return numbers_not_booleans(cls, data)

    def for_batch(self) -> Price:
        """The prices a call sent through the Batch API pays."""
        keep = 1 - self.batch_discount
        given = (self.batch_input_per_mtok, self.batch_output_per_mtok)
        return Price(
            input_per_mtok=self.input_per_mtok * keep if given[0] is None else given[0],
            output_per_mtok=self.output_per_mtok * keep if given[1] is None else given[1],
            cached_input_per_mtok=None if self.cached_input_per_mtok is None else self.cached_input_per_mtok * keep,
        )


class Usage(BaseModel):
    """Tokens of one call, or the sum over several."""

    calls: int = 0
    """Calls counted."""
    prompt_tokens: int = 0
    """Prompt (input) tokens the endpoint reported."""
    completion_tokens: int = 0
    """Completion (output) tokens the endpoint reported."""
    cached_tokens: int = 0
    """Of the prompt tokens, those the endpoint served from its own prompt cache (where it says)."""
    unreported: int = 0
    """Calls whose endpoint reported no usage (counted as 0 tokens)."""
    cache_hits: int = 0
    """Calls answered from the suite's response cache, or by the same request already on its way
    in the run: not sent, not paid again."""
    hit_prompt_tokens: int = 0
    """Prompt tokens of those calls, as recorded with their answers."""
    hit_completion_tokens: int = 0
    """Completion tokens of those calls, as recorded with their answers."""
    hit_cached_tokens: int = 0
    """Of their prompt tokens, those the endpoint had served from its prompt cache: not to be taken
    off the prompt tokens of the calls paid for."""

    def __add__(self, other: Usage) -> Usage:
        return Usage(**{name: getattr(self, name) + getattr(other, name) for name in Usage.model_fields})

    def as_cache_hit(self) -> Usage:
        """This recorded call's usage, now answered from the response cache."""
        return self.model_copy(
            update={
                "cache_hits": self.calls,
                "hit_prompt_tokens": self.prompt_tokens,
                "hit_completion_tokens": self.completion_tokens,
                "hit_cached_tokens": self.cached_tokens,
            }
        )

    def share(self, fraction: float) -> Usage:
        """The expected usage of `fraction` of these calls (each count scaled and rounded: a share
        of many conversations' calls, not of each one's, or a few calls a conversation round to 0)."""
        return Usage(**{name: round(getattr(self, name) * fraction) for name in Usage.model_fields})

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def total(usages: list[Usage]) -> Usage:
    return sum(usages, Usage())


def cost(usage: Usage, price: Price, *, paid_only: bool = True) -> float:
    """Dollars for these tokens; `paid_only` leaves out calls answered from the response cache."""
    prompt = usage.prompt_tokens - (usage.hit_prompt_tokens if paid_only else 0)
    completion = usage.completion_tokens - (usage.hit_completion_tokens if paid_only else 0)
    cached = min(usage.cached_tokens - (usage.hit_cached_tokens if paid_only else 0), prompt)
    cached_price = price.input_per_mtok if price.cached_input_per_mtok is None else price.cached_input_per_mtok
    return ((prompt - cached) * price.input_per_mtok + cached * cached_price + completion * price.output_per_mtok) / 1e6
