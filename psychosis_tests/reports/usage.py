"""Tokens and cost per model and role: the summary's usage table, in summary.json, summary.md and
the terminal. Roles: "target" (the model under test), "judge" (every judge of a panel together)
and "user" (the --user-model writing simulated user turns). Costs come from the `price:` of each
model's entry in the models file; the judge row's from its judges' (`judge_price`)."""

from __future__ import annotations

from psychosis_tests.engine.plan import Plan
from psychosis_tests.reports.escalation import escalation_line
from psychosis_tests.inputs.models import judge_leaves
from psychosis_tests.inputs.usage import ROLES, Price, Usage, cost

MIXED_PRICES = "its judges are priced differently and the run records a panel's tokens together, not per judge"
"""Why a panel's judge row has no cost (its calls are still in the run's `spent_usd`)."""


def judge_price(plan: Plan) -> tuple[Price | None, str | None]:
    """The judge row's price, else None and, where it is not a plain missing price, why. A one-judge
    panel has its judge's (a cascade's: its own, else its escalation judge's). A panel's, or a
    cascade's escalation panel's, is the one price all its judges that make calls share: each call
    pays its judge's price, and the run sums their tokens, so only a shared price prices the sum."""
    judges = plan.panel.judges
    if len(judges) == 1 and judges[0].call_price is not None:
        return judges[0].call_price, None
    prices = [j.call_price for j in judge_leaves(judges) if not j.in_process]
    if not prices or None in prices:
        return None, None
    if any(price != prices[0] for price in prices):
        return None, MIXED_PRICES
    return prices[0], None


def usage_rows(cases: list[dict], plan: Plan) -> list[dict]:
    """One row per (model, role) over the judged cases (an errored case's calls are not counted)."""
    totals: dict[tuple[str, str], Usage] = {}
    user = plan.user_model
    for case in cases:
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
        rows.append(
            {
                "model": model,
                "role": role,
                **used.model_dump(),
                "cost_usd": round(cost(used, price), 6) if price else None,
                "cost_with_cache_hits_usd": round(cost(used, price, paid_only=False), 6) if price else None,
                **({"no_cost_reason": unpriced} if unpriced and (model, role) == (plan.panel.id, "judge") else {}),
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
    if spent:
        lines.append(f"cost of this run's calls (response-cache hits are free): ${sum(spent):.4f}")
    return lines + escalated
