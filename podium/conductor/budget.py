"""A request's budget: what its workflow's worker calls may cost, and how the Conductor sees it.

A caller may say what one question may cost (`podium ask --budget 0.002`, `"budget"` in a
served request's body, `podium eval --budget`). The budget covers the workflow's worker calls
at list price; the Conductor's own call is spent before any plan exists and is counted apart
(`Outcome.conductor`). The pool's hard caps (`max_calls`, `max_tokens`, `max_cost`) still cut
a run off as a safety net; the budget itself never stops a call.

**What the Conductor sees** (with `run.show_budget`): the budget, and for each worker how many
of its calls the budget pays for, capped at the step limit:

    Budget: $0.002
    Model id 0: 2 calls
    Model id 1: 1 call
    Model id 2: 0 calls

A count is what a small model can use (no arithmetic on prices), and it reads the same
whatever the currency or the scale of the price list. Without a budget every worker shows the
step limit. Masked ids stay masked: a price is what a deployment knows, not a name.

**A call's list price** (`call_prices`): a worker's `price.per_call`, plus its token prices
times an estimate of one call's tokens (`PROMPT_TOKENS` in, the worker's `max_tokens` or
`COMPLETION_TOKENS` out). For a worker billed by the call (the priced gym, tools) this is
exact; for a token-billed model it is an estimate made before the plan runs. A worker without a
price costs 0. A request may bring its own price list (`RequestBudget.prices`, one per pool
index): training draws perturbed lists so that the Conductor learns to read prices rather than
remember them.

**Over budget** (`BudgetCheck`): a plan whose list price — the sum of its steps' call prices,
every round's — passes the budget. The budget judges that list price, known before any worker
is called, not what the calls then cost: a step a cap skipped was planned (and priced) but not
called, and a token-priced call's list price is an estimate. The run's result and trace say
both (`outcome.budget`, `BudgetCheck.verdict` with what was `Spent`); training scores such a
plan as `[reward] over_budget` says.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from podium.config import ModelSpec
from podium.errors import ConfigError

PROMPT_TOKENS = 500  # estimated prompt tokens of one worker call
COMPLETION_TOKENS = 500  # estimated completion tokens when a worker sets no max_tokens
_SLACK = 1e-9  # relative: a plan priced exactly at the budget is within it


@dataclass(frozen=True)
class RequestBudget:
    """What one question's worker calls may cost (USD, list price), and optionally the price
    list to read it against (USD per call, one per pool index; None: the pool's own)."""

    amount: float
    prices: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if not self.amount >= 0:  # also catches NaN
            raise ConfigError(f"A budget must be a number of USD, 0 or more; got "
                              f"{self.amount!r}. Pass e.g. --budget 0.002.")

    def call_prices(self, workers: Sequence[ModelSpec]) -> tuple[float, ...]:
        """The list price of one call of each pool worker under this request."""
        if self.prices is None:
            return call_prices(workers)
        if len(self.prices) != len(workers):
            raise ConfigError(f"A budget's price list has {len(self.prices)} prices for a pool "
                              f"of {len(workers)} workers; give one price per worker.")
        return self.prices

    def to_json(self) -> dict[str, Any]:
        return {"amount": self.amount,
                **({"prices": list(self.prices)} if self.prices is not None else {})}


def call_price(worker: ModelSpec) -> float:
    """The estimated list price of one call of `worker` (USD; 0 without a price)."""
    p = worker.price
    if p is None:
        return 0.0
    out = worker.max_tokens or COMPLETION_TOKENS
    return p.per_call + (PROMPT_TOKENS * p.input + out * p.output) / 1e6


def call_prices(workers: Sequence[ModelSpec]) -> tuple[float, ...]:
    return tuple(call_price(w) for w in workers)


def calls_within(amount: float | None, price: float, cap: int) -> int:
    """How many calls at `price` the budget `amount` pays for, at most `cap` (no budget, or a
    free worker: `cap`)."""
    if amount is None or price <= 0:
        return cap
    return min(cap, int(budget_limit(amount) // price))


def budget_limit(amount: float) -> float:
    """The most a plan may cost within `amount`: the amount itself, with room for rounding
    (0.1 + 0.2 fits a budget of 0.3)."""
    return amount * (1 + _SLACK)


def format_budget(amount: float) -> str:
    """The budget as the Conductor reads it: dollars with four significant digits."""
    return f"${amount:.4g}"


def format_usd(amount: float) -> str:
    """An amount for people: dollars to six significant digits, never in exponent form
    ($0.00089, $0.013754, $0)."""
    return f"${Decimal(f'{amount:.6g}'):f}"


@dataclass(frozen=True)
class Spent:
    """What a plan's worker calls cost once they ran: the sum of the priced calls (USD), the
    calls of each worker without a price, and the plan's steps, of which some were never
    called (a cap, a failed step under `on_error = "stop"`)."""

    known: float = 0.0
    unpriced: dict[str, int] = field(default_factory=dict)
    steps: int = 0
    not_called: int = 0

    def clause(self, plan_price: float) -> str:
        """e.g. "the workers' calls then cost $0.00089 (2 of the plan's 4 steps were not
        called)"."""
        if self.steps == self.not_called:
            return ("no worker was called" if not self.steps else
                    f"no worker was called (none of the plan's {self.steps} steps)")
        why = []
        if self.unpriced:
            names = " and ".join(f"{name}'s {_calls(n)}" for name, n in self.unpriced.items())
            have = "has" if list(self.unpriced.values()) == [1] else "have"
            why.append(f"{names} {have} no price in the pool file")
        if self.not_called:
            why.append(f"{self.not_called} of the plan's {self.steps} steps "
                       f"{'was' if self.not_called == 1 else 'were'} not called")
        elif not self.unpriced and abs(self.known - plan_price) > _SLACK * max(plan_price, 1e-6):
            why.append("a list price estimates a call's tokens before it runs")
        what = "priced calls" if self.unpriced else "calls"
        return (f"the workers' {what} then cost {format_usd(self.known)}"
                + (f" ({'; '.join(why)})" if why else ""))


def _calls(n: int) -> str:
    return f"{n} call" if n == 1 else f"{n} calls"


@dataclass(frozen=True)
class BudgetCheck:
    """A finished run against its budget: the plan's list price (every round's steps, at the
    request's call prices), which the budget judges, and what the workers were charged at the
    pool's prices (None when a worker called has no price: `Spent` has the priced part)."""

    amount: float
    plan_price: float
    workers_cost: float | None

    @property
    def over(self) -> bool:
        """The plan's list price passes the budget (what the calls then cost plays no part)."""
        return self.plan_price > budget_limit(self.amount)

    def to_json(self, spent: Spent | None = None) -> dict[str, Any]:
        data: dict[str, Any] = {"amount": self.amount, "plan_price": round(self.plan_price, 10),
                                "over": self.over, "workers_cost_usd": self.workers_cost}
        if spent is not None:
            data.update(spent_usd=round(spent.known, 10), spent_unpriced=spent.unpriced,
                        steps_not_called=spent.not_called, verdict=self.verdict(spent))
        return data

    def verdict(self, spent: Spent) -> str:
        """One sentence: the plan's list price against the budget, the verdict, and what the
        workers' calls then cost, e.g. "Over budget: the plan's list price, $0.01375, is more
        than the budget of $0.001; the workers' calls then cost $0.00089 (2 of the plan's 4
        steps were not called)."."""
        price, amount = format_usd(self.plan_price), format_usd(self.amount)
        head = (f"Over budget: the plan's list price, {price}, is more than the budget of "
                f"{amount}" if self.over else
                f"Within budget: the plan's list price, {price}, fits the budget of {amount}")
        return f"{head}; {spent.clause(self.plan_price)}."


def plan_price(workers: Iterable[int], prices: Sequence[float] | Mapping[int, float]) -> float:
    """The list price of calling the pool `workers` (one entry per step) at `prices`."""
    return sum(prices[w] for w in workers)


def plan_fits(workers: Sequence[int], prices: Mapping[int, float], amount: float) -> bool:
    """Whether a plan is one a budget-held grammar admits (`run.hold_budget`,
    `podium.conductor.grammar`): its list price fits `amount`, or, where no worker fits even
    alone, it is one step of the cheapest."""
    low = min(prices.values())
    if low > budget_limit(amount):
        return len(workers) == 1 and prices[workers[0]] == low
    return plan_price(workers, prices) <= budget_limit(amount)


def parse_budget(value: Any, where: str) -> float | None:
    """A budget given by a user (a flag, a request field): a number of USD, or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ConfigError(f"{where} must be a number of USD, e.g. 0.002; got {value!r}.")
    try:
        amount = float(value)
    except ValueError:
        raise ConfigError(f"{where} must be a number of USD, e.g. 0.002; got {value!r}.") \
            from None
    RequestBudget(amount)  # its own check
    return amount
