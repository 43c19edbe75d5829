"""--max-cost: what the run has spent on priced models, and which conversations may still start.

Checking only what has been spent lets every conversation that starts before the first answer is
priced through: with an endpoint cap of 16, a $0.01 budget once let 16 conversations start and
spent $0.0266. So each conversation, when admitted, commits its expected cost (`--estimate`'s
figure for one conversation of its case), and a new one is admitted only while the spending plus
what the conversations under way are still expected to spend (their commitment less what each has
spent so far) is below the cap. A conversation expected to cost nothing (only unpriced models) is
admitted while that sum is within the cap. The run so ends above the cap by at most one
conversation's expected cost, plus what the estimate does not foresee (re-asks, longer replies).

A conversation is admitted at its first call that the response cache does not answer: one the
cache answers in full costs nothing, so a rerun with the same cap resumes where the budget
stopped the last run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from psychosis_tests.common.errors import BudgetError


@dataclass
class Budget:
    """The run's spending and its conversations' commitments; the cap is None without --max-cost."""

    cap: float | None = None
    spent: float = 0.0
    """Dollars spent on calls to priced models (response-cache hits cost nothing)."""
    _expected: dict[str, float] = field(default_factory=dict)
    """Conversation -> its expected cost, set before it runs."""
    _pending: set[str] = field(default_factory=set)
    """Conversations that have begun but made no paid call yet: admitted at their first."""
    _running: dict[str, float] = field(default_factory=dict)
    """Admitted conversations -> what each has spent so far."""

    def expect(self, conversation: str, dollars: float) -> None:
        """What one conversation is expected to cost, known before it begins."""
        self._expected[conversation] = dollars

    def begin(self, conversation: str) -> None:
        """The conversation makes its first call; it is admitted at its first paid one."""
        if conversation not in self._running:
            self._pending.add(conversation)

    @property
    def committed(self) -> float:
        """What the admitted conversations are still expected to spend."""
        return sum(max(self._expected.get(c, 0.0) - spent, 0.0) for c, spent in self._running.items())

    def admit(self, conversation: str, call_label: str, *, first_call: bool) -> None:
        """Before a call the cache does not answer: a conversation that has begun and not yet been
        admitted is admitted now, or BudgetError (its calls so far, if any, were cache hits)."""
        if conversation not in self._pending:
            return
        expected = self._expected.get(conversation, 0.0)
        projected = self.spent + self.committed
        if self.cap is not None and not (projected < self.cap or projected + expected <= self.cap):
            under_way = f", plus ${self.committed:.4f} expected for the conversations under way" if self.committed else ""
            what = "not started" if first_call else "stopped before its first call the cache could not answer"
            raise BudgetError(
                f"{call_label}: {what}: the run has spent ${self.spent:.4f}{under_way}, "
                f"more than --max-cost ${self.cap:g} allows"
            )
        self._pending.discard(conversation)
        self._running[conversation] = 0.0

    def charge(self, conversation: str, dollars: float) -> None:
        """An answered call's cost, counted for the run and for its conversation."""
        self.spent += dollars
        if conversation in self._running:
            self._running[conversation] += dollars

    def end(self, conversation: str) -> None:
        """The conversation is over (finished, failed or cancelled): it commits nothing more."""
        self._pending.discard(conversation)
        self._running.pop(conversation, None)
        self._expected.pop(conversation, None)
