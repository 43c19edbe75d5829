"""Tokens and cost per model and role: the summary's usage table, in summary.json, summary.md and
the terminal. Roles: "target" (the model under test), "judge" (every judge of a panel together)
and "user" (the --user-model writing simulated user turns). Costs come from the `price:` of each
model's entry in the models file; the judge row's from its judges' (`judge_price`; a panel's judges
priced differently: each judge's tokens at its own price, `panel_costs`)."""

from __future__ import annotations

from psychosis_tests.engine.plan import Plan
from psychosis_tests.reports.escalation import escalation_line
from psychosis_tests.inputs.models import calling_judges
from psychosis_tests.inputs.usage import ROLES, Price, Usage, cost

MIXED_PRICES = "its judges are priced differently and the cases' records do not give each judge's tokens"
"""Why a panel's judge row has no cost (its calls are still in the run's `spent_usd`): records
written before each judge's tokens were kept (`judge_usage`)."""


def judge_price(plan: Plan) -> tuple[Price | None, str | None]:
    """The judge row's price, else None and, where it is not a plain missing price, why. A one-judge
    panel has its judge's (a cascade's: its own, else its escalation judge's). A panel's, or a
    cascade's escalation panel's, is the one price all its judges that make calls share: each call
    pays its judge's price, and the run sums their tokens, so only a shared price prices the sum."""
    judges = plan.panel.judges
    if len(judges) == 1 and judges[0].call_price is not None:
        return judges[0].call_price, None
    prices = [j.call_price for j in calling_judges(judges)]
    if not prices or None in prices:
        return None, None
    if any(price != prices[0] for price in prices):
        return None, MIXED_PRICES
    return prices[0], None


def panel_costs(used: Usage, by_judge: dict[str, Usage], plan: Plan) -> tuple[float, float] | None:
    """The judge row's cost and cost with cache hits, each judge's tokens at its own price; None
    unless the per-judge usage accounts for every call of the row and each of its judges has a price."""
    prices = {j.id: j.call_price for j in calling_judges(plan.panel.judges)}
    if sum(u.calls for u in by_judge.values()) != used.calls or any(prices.get(j) is None for j in by_judge):
        return None
    return (
        sum(cost(u, prices[j]) for j, u in by_judge.items()),  # type: ignore[arg-type]
        sum(cost(u, prices[j], paid_only=False) for j, u in by_judge.items()),  # type: ignore[arg-type]
    )


def usage_rows(cases: list[dict], plan: Plan) -> list[dict]:
    """One row per (model, role) over the judged cases (an errored case's calls are not counted)."""
    totals: dict[tuple[str, str], Usage] = {}
    by_judge: dict[str, Usage] = {}
    user = plan.user_model
    for case in cases:
        for judge_id, used in case.get("judge_usage", {}).items():
            by_judge[judge_id] = by_judge.get(judge_id, Usage()) + Usage.model_validate(used)
        for role, used in case.get("usage", {}).items():
            # Target calls went to the case's model, judge calls to the run's judge (a panel's
            # judges together, under the panel's id), user calls to the run's user model; a role
            # whose model the plan does not name is listed under the role.
            named = {"target": case["model"], "judge": plan.panel.id, "user": user.id if user else None}.get(role)
            key = (named or role, role)
            totals[key] = totals.get(key, Usage()) + Usage.model_validate(used)
    prices = {(s.id, "target"): s.call_price for s in plan.targets}
    if user is not None:
        prices[(user.id, "user")] = user.call_price
    judged, unpriced = judge_price(plan)
    prices[(plan.panel.id, "judge")] = judged
    rows = []
    for (model, role), used in sorted(totals.items(), key=lambda kv: (kv[0][0], ROLES.index(kv[0][1]))):
        price = prices.get((model, role))
        paid, sent = (cost(used, price), cost(used, price, paid_only=False)) if price else (None, None)
        reason = unpriced if (model, role) == (plan.panel.id, "judge") else None
        if reason == MIXED_PRICES and (split := panel_costs(used, by_judge, plan)) is not None:
            (paid, sent), reason = split, None
        rows.append(
            {
                "model": model,
                "role": role,
                **used.model_dump(),
                "cost_usd": None if paid is None else round(paid, 6),
                "cost_with_cache_hits_usd": None if sent is None else round(sent, 6),
                **({"no_cost_reason": reason} if reason else {}),
            }
        )
    return rows


def usage_lines(rows: list[dict], *, markdown: bool, escalation: dict | None = None) -> list[str]:
    """The usage table; cost columns read "-" for models without a price, with a line saying why
    for a panel priced differently (`no_cost_reason`). With a cascade's `escalation` figures
    (`reports.escalation`), a line on what it escalated and saved follows."""
    escalated = [escalation_line(escalation)] if escalation else []
    no_cost = [r for r in rows if r.get("no_cost_reason")]
    spending = "the run's spending on priced models counts its calls"
    def money(value: float | None) -> str:
        return "-" if value is None else f"${value:.4f}"

    if markdown:
        lines = [
            "| model | role | calls | cache hits | prompt tokens | completion tokens | cost | cost incl. cache hits |",
            "|---|---|---:|---:|---:|---:|---:|---:|",
        ]
        lines += [
            f"| `{r['model']}` | {r['role']} | {r['calls']} | {r['cache_hits']} | {r['prompt_tokens']} | "
            f"{r['completion_tokens']} | {money(r['cost_usd'])} | {money(r['cost_with_cache_hits_usd'])} |"
            for r in rows
        ]
        lines += [
            f"\n{r['unreported']} of the {r['calls']} {r['role']} calls to `{r['model']}` reported no usage (counted as 0 tokens)."
            for r in rows
            if r["unreported"]
        ]
        lines += [f"\nNo cost for `{r['model']}` ({r['role']}): {r['no_cost_reason']} ({spending})." for r in no_cost]
        return lines + ["", *escalated] if escalated else lines
    header = f"{'tokens: model':<28} {'role':<7} {'calls':>6} {'hits':>6} {'prompt':>10} {'completion':>10} {'cost':>10}"
    lines = [header]
    lines += [
        f"{r['model']:<28} {r['role']:<7} {r['calls']:>6} {r['cache_hits']:>6} {r['prompt_tokens']:>10} "
        f"{r['completion_tokens']:>10} {money(r['cost_usd']):>10}"
        for r in rows
    ]
    unreported = [f"{r['model']} ({r['unreported']} of {r['calls']} {r['role']} calls)" for r in rows if r["unreported"]]
    if unreported:
        lines.append(f"no usage reported by the endpoint, counted as 0 tokens: {', '.join(unreported)}")
    lines += [f"no cost for {r['model']} ({r['role']}): {r['no_cost_reason']} ({spending})" for r in no_cost]
    spent = [r["cost_usd"] for r in rows if r["cost_usd"] is not None]
    unpriced = [r["model"] for r in rows if r["cost_usd"] is None and r["calls"]]  # in-process: no call to price
    if spent:
        lines.append(
            f"cost of this run's calls (response-cache hits are free): ${sum(spent):.4f}"
            + (f" (no price for {', '.join(unpriced)})" if unpriced else "")
        )
    return lines + escalated
