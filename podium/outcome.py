"""What a finished run came to: its answer, what it spent, and what went wrong.

This module is the one owner of a run's outcome. The pipeline builds an `Outcome` once, from
the rounds it ran (`build_outcome`); `podium eval`, the CLI, the summaries and training's
rewards read it and never work it out again. Records are frozen: grading makes a new
`Outcome` (`grade_outcome`), it does not change the old one.

**The answer across rounds.** Round 0 produces the first answer (or none). A recursion round
either keeps it, revises it, or fails. A revision that produces an answer replaces it; a round
that produces none (cut short by a cap, its final step failed) leaves the previous answer
standing, and a note says why. A recursion round whose output is not a valid workflow scores
as a format error under `recursion_format_error = "zero"` (the paper's scoring: the answer is
None) or leaves the previous answer standing under `"keep"`.

**Usage, twice.** `used` counts every call the run made, cache hits included, at list price:
what the workflow needs, the figure to compare systems on (the paper's Tables 5-6). `paid`
counts what this run actually paid: answers from the response cache are free. A failed call
costs what its usage says (usually 0), so one failure never makes a priced run's cost unknown.
**Costs add up** over the calls that have a price (`Usage.known_cost`); a call to a model with
no price in the pool file is counted by name (`Usage.unpriced`: `conductor` for the Conductor,
a worker by its pool name), so one unpriced model leaves the rest of the sum standing. The
total (`Usage.cost`) is None only then: the known sum is a lower bound. `Outcome.conductor` and
`Outcome.workers_used` split it (the budget judges the workers' part).

**Failure classes.** Everything that went wrong is a `Failure` with a class that answers
"whose fault, and will running it again help?":

* ``model``: the system's own output is at fault, and a rerun of the same workflow will not
  help: the Conductor's output is not a valid workflow (reason ``parse:<reason>``), a worker
  kept answering with nothing (``empty``) or was given more context than it holds
  (``context_length``), the run reached one of its caps (``cap``: `max_calls`, `max_tokens`,
  `max_cost`).
* ``worker``: a model call failed: unreachable or timed out (``transport``), rejected key
  (``auth``), rate-limited after every retry (``rate_limit``), a server error (``server``),
  a rejected request (``bad_request``), any other provider failure (``other``). Fix the
  endpoint and rerun (`podium eval --retry-errors`).
* ``infra``: podium's own machinery failed: a grader crashed, the code sandbox could not
  start, the math-verify pool broke, a grader's package is missing (``grader``), or a backend
  raised an exception it should have converted (``internal``).

**Tool calls.** When the step that wrote the answer acted (a run with tools), its calls are
the team's reply (`Outcome.tool_calls`; `answer` is its text, possibly empty), and
`Outcome.acting` is what continues it (`podium.acting.ActingState`, set by the pipeline).

`Outcome.cause` is the failure that decided the run when it has no usable result: it is
`None` for a graded answer. An item whose cause is a worker or infra failure is an *error*
(`status == "error"`): it is not scored, it is counted apart and rerun by `--retry-errors`;
training drops it or scores it 0 (`on_infra_failure`). A model failure is scored: 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from podium.acting import ActingState
from podium.conductor.budget import BudgetCheck, Spent
from podium.errors import INTERNAL
from podium.llm.tools import ToolCall
from podium.scoring.base import Grade

if TYPE_CHECKING:  # records only: the pipeline builds them
    from podium.conductor import ConductorTurn
    from podium.tasks.base import Item, Task
    from podium.workflow.execute import Execution

FailureClass = Literal["model", "worker", "infra"]
FAILURE_CLASSES: tuple[str, ...] = ("model", "worker", "infra")
# Call failures that the workflow itself caused: asking again the same way will not help.
MODEL_CALL_KINDS = frozenset({"empty", "context_length"})

Decision = Literal["planned", "fixed", "fallback", "format_error", "failed", "kept", "revised"]
RecursionFormatError = Literal["zero", "keep"]


@dataclass(frozen=True)
class Failure:
    """One thing that went wrong: its class, a short stable reason, a line for people, and
    where it happened ("conductor, round 0", "step 2 (w1), round 1", "grader")."""

    cls: FailureClass
    reason: str
    detail: str = ""
    where: str = ""

    def to_json(self) -> dict[str, str]:
        return {"class": self.cls, "reason": self.reason, "detail": self.detail,
                "where": self.where}

    def sentence(self) -> str:
        return f"{self.where}: {self.detail or self.reason}" if self.where else \
            (self.detail or self.reason)


def call_failure(kind: str | None, detail: str, where: str) -> Failure:
    """The failure of a model call whose error kind is `kind` (see `podium.errors`)."""
    kind = kind or "other"
    cls: FailureClass = ("model" if kind in MODEL_CALL_KINDS
                         else "infra" if kind == INTERNAL else "worker")
    return Failure(cls, kind, detail, where)


def grade_failure(grade: Grade) -> Failure | None:
    """An infra failure when the grader itself failed (`Grade.failed`), else None."""
    if not grade.failed:
        return None
    return Failure("infra", "grader", grade.reason, "grader")


Unpriced = tuple[tuple[str, int], ...]  # (model, calls without a price), first call first
CONDUCTOR = "conductor"  # how the Conductor's calls are named in `Usage.unpriced`


def _merge(a: Unpriced, b: Unpriced, sign: int = 1) -> Unpriced:
    counts = dict(a)
    for name, n in b:
        counts[name] = counts.get(name, 0) + sign * n
    return tuple((name, n) for name, n in counts.items() if n > 0)


@dataclass(frozen=True)
class Usage:
    """Calls, tokens and cost: `known_cost` (USD) sums the calls that have a price;
    `unpriced` counts, by model, the calls that have none."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    known_cost: float = 0.0
    unpriced: Unpriced = ()

    @classmethod
    def call(cls, name: str, prompt: int, completion: int, cost: float | None) -> Usage:
        """One call of the model `name` (cost None: it has no price)."""
        return cls(1, prompt, completion, cost or 0.0, () if cost is not None else ((name, 1),))

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.calls + other.calls, self.prompt_tokens + other.prompt_tokens,
                     self.completion_tokens + other.completion_tokens,
                     self.known_cost + other.known_cost, _merge(self.unpriced, other.unpriced))

    def __sub__(self, part: Usage) -> Usage:
        """What is left of this usage without `part` (a part of it)."""
        return Usage(self.calls - part.calls, self.prompt_tokens - part.prompt_tokens,
                     self.completion_tokens - part.completion_tokens,
                     max(self.known_cost - part.known_cost, 0.0),
                     _merge(self.unpriced, part.unpriced, -1))

    @property
    def cost(self) -> float | None:
        """The whole cost (USD), or None when a call had no price (`known_cost` is then a
        lower bound)."""
        return None if self.unpriced else self.known_cost

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_json(self) -> dict[str, Any]:
        return {"calls": self.calls, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "total_tokens": self.total_tokens,
                "cost_usd": _usd(self.cost), "known_cost_usd": _usd(self.known_cost),
                "unpriced": dict(self.unpriced)}


def _usd(amount: float | None) -> float | None:
    """A sum of prices without the float noise of adding them (0.004 + 0.001 is 0.005)."""
    return None if amount is None else round(amount, 10)


@dataclass(frozen=True)
class RoundOutcome:
    """What one round decided, and the answer its workflow produced (None: no workflow ran,
    or it produced no answer)."""

    round: int
    decision: Decision
    answer: str | None
    parse_reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"round": self.round, "decision": self.decision,
                "parse_reason": self.parse_reason, "answered": self.answer is not None}


@dataclass(frozen=True)
class Outcome:
    """A finished run. `answer_round` is the round whose workflow produced `answer`."""

    answer: str | None
    answer_round: int | None
    rounds: tuple[RoundOutcome, ...]
    failures: tuple[Failure, ...]
    cause: Failure | None  # why there is no usable result; None for a (gradable) answer
    used: Usage  # every call, cache hits included, at list price
    paid: Usage  # what this run paid: cache hits are free
    cache_hits: int = 0
    stopped: str | None = None  # a cap or a failure that cut the run short
    notes: tuple[str, ...] = ()  # plain sentences: fallbacks, kept answers, rounds that failed
    grade: Grade | None = None
    conductor: Usage = Usage()  # the Conductor's own calls: part of `used`
    budget: BudgetCheck | None = None  # the plan against the request's budget, if it had one
    not_called: int = 0  # planned steps never called (a cap, a failed step under "stop")
    tool_calls: tuple[ToolCall, ...] = ()  # the answer step's calls: the team's reply
    acting: ActingState | None = None  # what continues a run that ends in tool calls

    @property
    def over_budget(self) -> bool:
        return self.budget is not None and self.budget.over

    @property
    def workers_used(self) -> Usage:
        """The workers' calls: `used` less the Conductor's own."""
        return self.used - self.conductor

    @property
    def spent(self) -> Spent:
        """What the workers' calls cost, for the budget's verdict."""
        w = self.workers_used
        return Spent(w.known_cost, dict(w.unpriced), w.calls + self.not_called,
                     self.not_called)

    @property
    def budget_verdict(self) -> str | None:
        """One sentence on the budget (None: the request had none): what it judged (the
        plan's list price), the verdict, and what the workers' calls then cost."""
        return self.budget.verdict(self.spent) if self.budget is not None else None

    @property
    def status(self) -> Literal["ok", "error"]:
        """`error` when a worker or infra failure decided the run; `ok` otherwise (graded, or
        a model failure that scores 0)."""
        return "error" if self.cause is not None and self.cause.cls != "model" else "ok"

    @property
    def fallback(self) -> bool:
        return any(r.decision == "fallback" for r in self.rounds)

    @property
    def format_error(self) -> bool:
        """The run scores as a format error: no answer because an output did not parse."""
        return self.cause is not None and self.cause.reason.startswith("parse:")

    @property
    def correct(self) -> bool:
        return self.status == "ok" and self.grade is not None and self.grade.correct

    @property
    def worker_calls(self) -> int:
        """Worker calls made (cache hits included): every call but the Conductor's own."""
        return self.used.calls - sum(r.decision != "fixed" for r in self.rounds)

    @property
    def recursion(self) -> Decision | None:
        """The last recursion round's decision (kept, revised, format_error, failed), if any."""
        return self.rounds[-1].decision if len(self.rounds) > 1 else None

    def parse_failures(self) -> list[tuple[int, str]]:
        """(round, reason) for every round whose output did not parse, fallbacks included."""
        return [(r.round, r.parse_reason) for r in self.rounds if r.parse_reason]

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "answer": self.answer,
            "answer_round": self.answer_round,
            "status": self.status,
            "cause": self.cause.to_json() if self.cause else None,
            "failures": [f.to_json() for f in self.failures],
            "rounds": [r.to_json() for r in self.rounds],
            "fallback": self.fallback,
            "used": self.used.to_json(),
            "used_by": {"conductor": self.conductor.to_json(),
                        "workers": self.workers_used.to_json()},
            "paid": self.paid.to_json(),
            "cache_hits": self.cache_hits,
            "stopped": self.stopped,
            "notes": list(self.notes),
            "tool_calls": [c.openai() for c in self.tool_calls],
            "acting": self.acting.to_json() if self.acting else None,
        }
        if self.budget is not None:
            data["budget"] = self.budget.to_json(self.spent)
        if self.grade is not None:
            g = self.grade
            data["grade"] = {"correct": g.correct, "score": g.score, "extracted": g.extracted,
                             "reason": g.reason, "details": g.details}
        return data


# ------------------------------------------------------------------------------------- build


@dataclass(frozen=True)
class Round:
    """The raw material of one round: the Conductor's turn (no messages: a fixed workflow,
    no Conductor call), the workflow run if one ran, and the answer it gave."""

    conductor: ConductorTurn
    execution: Execution | None
    answer: str | None


@dataclass
class _Ledger:
    used: Usage = field(default_factory=Usage)
    paid: Usage = field(default_factory=Usage)
    conductor: Usage = field(default_factory=Usage)
    hits: int = 0
    not_called: int = 0

    def call(self, name: str, prompt: int, completion: int, cost: float | None, hit: bool,
             conductor: bool = False) -> None:
        one = Usage.call(name, prompt, completion, cost)
        self.used += one
        if conductor:
            self.conductor += one
        if hit:
            self.hits += 1
        else:
            self.paid += one


def _decision(rnd: Round) -> Decision:
    turn = rnd.conductor
    if not turn.messages:
        return "fixed"
    if turn.error is not None:
        return "failed"
    if turn.fallback:
        return "fallback"
    if turn.kept:
        return "kept"
    if turn.parse_reason is not None:
        return "format_error"
    return "planned" if turn.round == 0 else "revised"


def _run_failures(run: Execution) -> list[Failure]:
    out = []
    for s in run.steps:
        where = f"step {s.index} ({s.worker_name}), round {s.round}"
        if s.status == "error":
            out.append(call_failure(s.error_kind, s.error or "", where))
    if run.stopped and run.stopped.startswith("cap"):
        out.append(Failure("model", "cap", run.stopped, f"round {run.steps[0].round}"
                           if run.steps else ""))
    return out


def _round_failures(rnd: Round) -> list[Failure]:
    turn = rnd.conductor
    where = f"conductor, round {turn.round}"
    found = []
    if turn.error is not None:
        found.append(call_failure(turn.error_kind, turn.error, where))
    if turn.parse_reason is not None:
        found.append(Failure("model", f"parse:{turn.parse_reason}", turn.parse_detail, where))
    if rnd.execution is not None:
        in_run = _run_failures(rnd.execution)
        if rnd.answer is None and not in_run:
            in_run.append(Failure("model", "no_answer", "the workflow gave no answer",
                                  f"round {turn.round}"))
        found.extend(in_run)
    return found


def _decisive(failures: Sequence[Failure]) -> Failure | None:
    """The failure that explains a round without an answer: an outage before a model fault."""
    for f in failures:
        if f.cls != "model":
            return f
    return failures[0] if failures else None


def build_outcome(rounds: Sequence[Round], *,
                  recursion_format_error: RecursionFormatError = "zero",
                  stopped: str | None = None) -> Outcome:
    """The outcome of `rounds` (round 0 first), with the answer that stands at the end."""
    ledger = _Ledger()
    failures: list[Failure] = []
    summaries: list[RoundOutcome] = []
    notes: list[str] = []
    answer: str | None = None
    answer_round: int | None = None
    cause: Failure | None = None
    for rnd in rounds:
        turn = rnd.conductor
        if turn.messages:
            ledger.call(CONDUCTOR, turn.prompt_tokens, turn.completion_tokens, turn.cost,
                        turn.cache_hit, conductor=True)
        for s in rnd.execution.steps if rnd.execution else ():
            if s.status in ("ok", "error"):
                ledger.call(s.worker_name, s.prompt_tokens, s.completion_tokens, s.cost,
                            s.cache_hit)
            else:
                ledger.not_called += 1
        decision = _decision(rnd)
        found = _round_failures(rnd)
        failures.extend(found)
        summaries.append(RoundOutcome(turn.round, decision, rnd.answer, turn.parse_reason))
        if turn.round == 0:
            answer, answer_round = rnd.answer, (0 if rnd.answer is not None else None)
            cause = None if rnd.answer is not None else _decisive(found)
            if decision == "fallback":
                notes.append(_fallback_note(rnd))
            continue
        answer, answer_round, cause, note = _next_answer(
            rnd, decision, found, (answer, answer_round, cause), recursion_format_error)
        if note:
            notes.append(note)
    if answer is None and cause is None:
        cause = Failure("model", "no_answer", "the run produced no answer", "")
    return Outcome(answer, answer_round, tuple(summaries), tuple(failures), cause,
                   ledger.used, ledger.paid, ledger.hits, stopped, tuple(notes),
                   conductor=ledger.conductor, not_called=ledger.not_called,
                   tool_calls=_calls(rounds[answer_round]) if answer_round is not None else ())


def _calls(rnd: Round) -> tuple[ToolCall, ...]:
    """The tool calls of the step that wrote `rnd`'s answer (its last)."""
    steps = rnd.execution.steps if rnd.execution else []
    return tuple(steps[-1].tool_calls) if steps and steps[-1].status == "ok" else ()


def _fallback_note(rnd: Round) -> str:
    turn = rnd.conductor
    step = rnd.execution.steps[0] if rnd.execution and rnd.execution.steps else None
    who = f"worker {step.worker} ({step.worker_name})" if step else "one worker"
    if "cannot_act" in turn.extra:
        return (f"The workflow's last step is on {turn.extra['cannot_act']}, which cannot act "
                "with tools (its pool entry lacks tools = true, or its backend takes none); "
                f"one step on {who} answered instead (run.fallback).")
    return (f"The Conductor's output is not a valid workflow ({turn.parse_reason}: "
            f"{turn.parse_detail}); one step on {who} answered instead (run.fallback).")


def _next_answer(rnd: Round, decision: Decision, found: list[Failure],
                 standing: tuple[str | None, int | None, Failure | None],
                 on_format_error: RecursionFormatError
                 ) -> tuple[str | None, int | None, Failure | None, str | None]:
    """The answer that stands after recursion round `rnd`, and a note when it did not change
    for a reason worth saying."""
    answer, answer_round, cause = standing
    k = rnd.conductor.round
    kept_from = f"the answer of round {answer_round} stands" if answer_round is not None \
        else "there is still no answer"
    if decision == "revised" and rnd.answer is not None:
        return rnd.answer, k, None, None
    if decision == "kept":
        return answer, answer_round, cause, None
    if decision == "format_error":
        head = (f"The Conductor's round-{k} output is not a valid workflow "
                f"({rnd.conductor.parse_reason})")
        if on_format_error == "zero":
            return None, None, found[0], (f"{head}: scored as a format error "
                                          "(run.recursion_format_error = zero).")
        return answer, answer_round, cause, (f"{head}; {kept_from} "
                                             "(run.recursion_format_error = keep).")
    why = _decisive(found)
    what = (f"round {k} produced no answer ({why.sentence()})" if why
            else f"round {k} produced no answer")
    return answer, answer_round, cause, f"{what[0].upper()}{what[1:]}; {kept_from}."


# ------------------------------------------------------------------------------------- grade


async def grade_outcome(outcome: Outcome, task: Task, item: Item) -> Outcome:
    """`outcome` graded by `task` (a new record). No answer: the grader is not asked (a model
    failure scores 0; a worker/infra one is not scored). A grader that raises, or reports its
    own failure, makes the outcome an infra error."""
    if outcome.cause is not None:
        reason = outcome.cause.reason
        return replace(outcome, grade=Grade.of(False, None, reason))
    try:
        grade = await task.grade(item, outcome.answer)
    except Exception as exc:  # a crashed grader is data: an infra error, never a wrong answer
        grade = Grade.grader_error(f"{type(exc).__name__}: {exc}")
    failed = grade_failure(grade)
    if failed is None:
        return replace(outcome, grade=grade)
    return replace(outcome, grade=grade, cause=failed, failures=(*outcome.failures, failed))
