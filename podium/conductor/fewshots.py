"""The Conductor's few-shot examples, and how they are fitted to the pool it is shown.

Each example shows a question, a short plan in prose and the three lists it leads to (PAPER.md
§2.3). The `ood` set has the composition of the paper's out-of-domain set (two arithmetic
puzzles, one medical and one calculus question); its questions are written for podium and come
from none of the benchmarks it evaluates; `short` has two examples for small Conductors with
short plans. The examples are written for the paper's 7-worker
pool (ids 0-6, plans of up to 4 steps); `format_examples` fits them to the pool at hand: ids
moved onto the ids the Conductor is shown (`fit_example_ids`), plans longer than the step limit
left out, so no prompt shows an id outside the pool or a plan longer than allowed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

from podium.errors import ConfigError
from podium.workflow.types import Workflow


@dataclass(frozen=True)
class FewShot:
    """A worked example: a question, a short plan in prose, and the workflow it leads to."""

    question: str
    plan: str
    workflow: Workflow

    def render(self) -> str:
        return f"Question: {self.question}\nPlan: {self.plan}\n{self.workflow.to_text()}"


_OOD: tuple[FewShot, ...] = (
    FewShot(
        question="Using each of 4, 7, 8 and 8 exactly once with + - * /, write an expression "
        "equal to 24.",
        plan="One model can brainstorm candidates and another can check them. "
        "The first model then writes the verified expression as the final answer.",
        workflow=Workflow.of(
            [
                (0, "Propose three candidate expressions that use 4, 7, 8 and 8 once each.", ()),
                (2, "Check each candidate's arithmetic and say which ones equal 24.", "all"),
                (0, "Return one expression that equals 24 in <answer> tags.", "all"),
            ]
        ),
    ),
    FewShot(
        question="A 58-year-old man has had crushing chest pain for 40 minutes, with sweating "
        "and ST elevation in leads II, III and aVF. Which coronary artery is most likely "
        "blocked?",
        plan="Two models should read the vignette independently so their errors do not "
        "overlap. A third compares both readings and settles on one artery.",
        workflow=Workflow.of(
            [
                (1, "List the key findings and what each suggests about the diagnosis.", ()),
                (0, "Name the likely diagnosis and the blocked artery, with one reason.", ()),
                (
                    2,
                    "Compare the two analyses, resolve any disagreement and give the artery "
                    "in <answer> tags.",
                    "all",
                ),
            ]
        ),
    ),
    FewShot(
        question="Find the limit of (e^x - 1 - x) / x^2 as x approaches 0.",
        plan="Two different methods give an independent cross-check. A third model looks for "
        "mistakes, and a last one states the value.",
        workflow=Workflow.of(
            [
                (6, "Evaluate the limit with L'Hopital's rule, showing each step.", ()),
                (5, "Evaluate the limit with the Taylor series of e^x.", ()),
                (3, "Compare both derivations and point out any error.", "all"),
                (2, "Give the final value of the limit in <answer> tags.", "all"),
            ]
        ),
    ),
    FewShot(
        question="Using each of 9, 5, 12 and 2 exactly once with + - * /, reach 85.",
        plan="Start with a quick search, then have a second model verify and fix it. "
        "A third model confirms the result and formats the answer.",
        workflow=Workflow.of(
            [
                (3, "Search for an expression equal to 85; show two attempts.", ()),
                (4, "Verify the attempts and fix any that miss 85 or reuse a number.", "all"),
                (5, "Confirm one correct expression and give it in <answer> tags.", "all"),
            ]
        ),
    ),
)

# Two short examples for small Conductors and short plans (at most 2 steps): a question one
# model answers alone, and one whose second part needs the first part's result, so the second
# step sees the first ("all").
_SHORT: tuple[FewShot, ...] = (
    FewShot(
        question="Translate 'bonjour' into English.",
        plan="One model can answer this alone.",
        workflow=Workflow.of([(0, "Translate 'bonjour' into English.", ())]),
    ),
    FewShot(
        question="Find the year the Eiffel Tower opened, then add 10 to the result.",
        plan="One model finds the year; a second, seeing it, does the sum.",
        workflow=Workflow.of([
            (1, "Find the year the Eiffel Tower opened.", ()),
            (0, "Add 10 to the result.", "all"),
        ]),
    ),
)

FEWSHOT_SETS: dict[str, tuple[FewShot, ...]] = {
    "ood": _OOD,
    "short": _SHORT,
    "none": (),
}
DEFAULT_FEWSHOTS = "ood"


def fit_example_ids(
    workflow: Workflow, shown_ids: Sequence[int] | None, index: int = 0
) -> Workflow:
    """`workflow` with its worker ids moved onto `shown_ids`, the ids the pool shows.

    Unchanged when `shown_ids` is None or holds every id the workflow uses (so the paper's
    7-worker pool sees the examples as written). Otherwise the workflow's i-th distinct id, in
    order of first use, becomes ``shown_ids[(i + index) % k]``: distinct ids stay distinct while
    there are enough shown ids and repeat cyclically when there are not; `index` (the example's
    position in its set) rotates the start so that examples do not all open on the first id.
    """
    if shown_ids is None:
        return workflow
    shown = list(shown_ids)
    if not shown:
        raise ConfigError("the worker pool is empty; list at least one worker")
    used = list(dict.fromkeys(step.worker for step in workflow.steps))
    if set(used) <= set(shown):
        return workflow
    new = {old: shown[(i + index) % len(shown)] for i, old in enumerate(used)}
    return Workflow(tuple(replace(step, worker=new[step.worker]) for step in workflow.steps))


def format_examples(
    fewshots: str,
    *,
    shown_ids: Sequence[int] | None = None,
    max_steps: int | None = None,
) -> str:
    """The few-shot block for the routing template; ``""`` for the set ``none``.

    Examples longer than `max_steps` are left out (``""`` if none fits); the others have their
    ids fitted to `shown_ids` (`fit_example_ids`; None shows them as written) and are numbered
    from 1 in their set's order.
    """
    if fewshots not in FEWSHOT_SETS:
        raise ConfigError(
            f"unknown few-shot set {fewshots!r}; known sets: {', '.join(sorted(FEWSHOT_SETS))}"
        )
    return _examples(fewshots, None if shown_ids is None else tuple(shown_ids), max_steps)


@lru_cache(maxsize=256)
def _examples(fewshots: str, shown_ids: tuple[int, ...] | None, max_steps: int | None) -> str:
    """`format_examples`, kept per set, ids and max_steps: a pool asks the same every time."""
    fitted = [
        replace(ex, workflow=fit_example_ids(ex.workflow, shown_ids, j))
        for j, ex in enumerate(FEWSHOT_SETS[fewshots])
        if max_steps is None or len(ex.workflow) <= max_steps
    ]
    if not fitted:
        return ""
    parts = [f"Example {n + 1}\n{ex.render()}" for n, ex in enumerate(fitted)]
    return "Examples of good plans:\n\n" + "\n\n".join(parts) + "\n\n"
