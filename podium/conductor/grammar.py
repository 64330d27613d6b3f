"""A GBNF grammar that only admits valid workflows, for small Conductors.

A 135M-parameter Conductor almost never writes three parseable, equal-length lists unaided.
Where the backend can constrain decoding (llama.cpp GBNF, vLLM structured outputs), the
Conductor's completion is held to:

    free reasoning (up to 3 short lines by default, no brackets, '=' or ':')
    model_id = [i, ...]          ids drawn from the pool
    subtasks = ["...", ...]      one instruction per step: a capital letter, then 9+ characters
                                 (no ':' or '=', so no subtask reads as a list's label; no
                                 curly quotes or backticks, which the parser normalises)
    access_list = [[], ...]      [] or "all" ("all" at step 0 only in a recursion round,
                                 where it shows the previous round)

with one alternative per step count (1..max_steps), so the three lists always agree in length.
In a recursion round the grammar also admits three empty lists (keep the previous answer).
The output reads back through `parse_workflow` like any other completion.

When the prompt's prefill already opens the lists (the compact prompt's ``model_id = [``),
`opened=True` gives the grammar of the rest: no reasoning, the first id straight away.

`skeleton=(ids, access)` holds the workflow to one plan (its worker ids and access values,
e.g. ``((2, 0), ("[]", "all"))``) and leaves only the reasoning and the subtasks free: the
exploration rollouts of training (`[rollout] explore`, `podium.train.rollout.explore`) are sampled so.
With `subtasks` as well, one per step, the subtasks are literals too
(`[rollout] explore_subtasks = "question"`); opened, such a grammar admits exactly one text,
`fixed_workflow`, which training then writes instead of sampling.

`prices` (one call's list price per id) with `budget` holds the id list to plans whose list
price fits the budget (`run.hold_budget`, `podium.conductor.budget`): each step count's ids come from a
rule per (steps left, money left), so a two-step plan of dear workers is refused where one
dear step is not. When no worker fits even alone, the grammar holds the plan to one step of
the cheapest worker (the nearest the budget there is; the run says it is over); in a recursion
round the three empty lists (keep the answer) always remain.

`last_ids` holds the last step's id to those ids (a request with tools: only a worker that
can act may write the answer, `podium.pipeline`); held to the budget as well, a plan's last
id is one of them, and the cheapest of them when nothing fits. Ids that include every worker
id hold nothing, and the grammar is the one without them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from podium.conductor.budget import budget_limit

OPENING = "model_id = ["  # a prefill that ends with this has opened the lists


def workflow_grammar(
    worker_ids: Sequence[int],
    max_steps: int = 5,
    *,
    allow_empty: bool = False,
    max_reason_chars: int = 240,
    max_subtask_chars: int = 160,
    max_reason_lines: int = 3,
    opened: bool = False,
    skeleton: tuple[Sequence[int], Sequence[str]] | None = None,
    subtasks: Sequence[str] | None = None,
    prices: Mapping[int, float] | None = None,
    budget: float | None = None,
    last_ids: Sequence[int] | None = None,
) -> str:
    if not worker_ids:
        raise ValueError("the grammar needs at least one worker id")
    if subtasks is not None and skeleton is None:
        raise ValueError("literal subtasks need a skeleton (the plan they belong to)")
    if max_steps < 1:
        raise ValueError("max_steps must be at least 1")
    last = _last_ids(worker_ids, last_ids)
    held = _held_ids(worker_ids, max_steps, prices, budget, allow_empty, last) \
        if budget is not None and skeleton is None else None
    steps = range(1, max_steps + 1) if held is None else [n for n in held[0]]
    alternatives = [f"wf{n}" for n in steps]
    if allow_empty:
        alternatives.insert(0, "keep")
    reasoning = [
        "root ::= reason \"\\n\" workflow",
        f"reason ::= [ \\n]? text (\"\\n\" text){{0,{max(max_reason_lines - 1, 0)}}}",
        f"text ::= [^\\n\\[\\]=:`]{{1,{max_reason_chars}}}",
    ]
    rules = [
        *(["root ::= workflow"] if opened else reasoning),
        "workflow ::= " + " | ".join(alternatives),
        "id ::= " + " | ".join(f'"{i}"' for i in sorted(set(worker_ids))),
        f"str ::= \"\\\"\" [A-Z] [^\"\\\\\\n:=“”‘’`]{{9,{max_subtask_chars}}} \"\\\"\"",
        "acc ::= \"[]\" | \"\\\"all\\\"\"",
        f'keep ::= "{"" if opened else "model_id = ["}]\\nsubtasks = []\\naccess_list = []"',
    ]
    head = "" if opened else '"model_id = [" '
    if skeleton is not None:  # one plan: the ids and access values are literals
        ids, access = _literal_plan(skeleton, worker_ids, max_steps, allow_empty, last)
        strs = ' ", " '.join(["str"] * len(skeleton[0]) if subtasks is None
                             else _literal_subtasks(subtasks, len(skeleton[0])))
        at = next(i for i, r in enumerate(rules) if r.startswith("workflow ::="))
        rules[at] = (f'workflow ::= {head}"{ids}]\\nsubtasks = [" {strs} '
                     f'"]\\naccess_list = [{access}]"')
        return "\n".join(rules) + "\n"
    if held is not None:
        rules += held[1]
    elif last is not None:
        rules.append("last ::= " + " | ".join(f'"{i}"' for i in last))
    for n in steps:
        ids = ' ", " '.join(["id"] * (n - 1) + ["last" if last else "id"]) \
            if held is None else held[0][n]
        strs = ' ", " '.join(["str"] * n)
        first = "acc" if allow_empty else '"[]"'  # in a recursion round step 0 may see it
        accs = ' ", " '.join([first] + ["acc"] * (n - 1))
        rules.append(
            f'wf{n} ::= {head}{ids} "]\\nsubtasks = [" {strs} '
            f'"]\\naccess_list = [" {accs} "]"'
        )
    return "\n".join(rules) + "\n"


def fixed_workflow(skeleton: tuple[Sequence[int], Sequence[str]],
                   subtasks: Sequence[str]) -> str:
    """The one text `workflow_grammar(..., opened=True, skeleton=skeleton, subtasks=subtasks)`
    admits (the arguments as that grammar checks them)."""
    ids, access = skeleton
    accs = ", ".join("[]" if a == "[]" else '"all"' for a in access)
    subs = ", ".join(f'"{s}"' for s in subtasks)
    return f"{', '.join(str(i) for i in ids)}]\nsubtasks = [{subs}]\naccess_list = [{accs}]"


def _last_ids(worker_ids: Sequence[int], last_ids: Sequence[int] | None) -> list[int] | None:
    """The ids the last step is held to (sorted), or None when they hold nothing."""
    if last_ids is None:
        return None
    last = sorted(set(last_ids))
    if not last or not set(last) <= set(worker_ids):
        raise ValueError(f"the last step's ids {list(last_ids)} must be some of the worker "
                         f"ids {sorted(set(worker_ids))}")
    return None if set(last) == set(worker_ids) else last


def _literal_plan(skeleton: tuple[Sequence[int], Sequence[str]], worker_ids: Sequence[int],
                  max_steps: int, allow_empty: bool,
                  last: Sequence[int] | None) -> tuple[str, str]:
    """The id list and access list of a fixed plan, as GBNF string contents."""
    ids, access = list(skeleton[0]), list(skeleton[1])
    if not 1 <= len(ids) <= max_steps or len(access) != len(ids):
        raise ValueError(f"a skeleton needs 1..{max_steps} ids and one access value each, "
                         f"not {ids} and {access}")
    if not set(ids) <= set(worker_ids):
        raise ValueError(f"skeleton ids {ids} are not all among {sorted(set(worker_ids))}")
    if last is not None and ids[-1] not in last:
        raise ValueError(f"the skeleton's last id {ids[-1]} is not among the last step's "
                         f"ids {list(last)}")
    if any(a not in ("[]", "all") for a in access) or (access[0] == "all" and not allow_empty):
        raise ValueError(f"skeleton access values are [] or 'all' ('all' not at step 0 "
                         f"outside a recursion round), not {access}")
    accs = ", ".join("[]" if a == "[]" else '\\"all\\"' for a in access)
    return ", ".join(str(i) for i in ids), accs


def _literal_subtasks(subtasks: Sequence[str], steps: int) -> list[str]:
    """A fixed plan's subtasks as GBNF literals (each with its JSON quotes)."""
    if len(subtasks) != steps or any(not s or set(s) & set('"\\\n') for s in subtasks):
        raise ValueError(f"literal subtasks are {steps} non-empty strings without a quote, "
                         f"backslash or newline, not {list(subtasks)}")
    return [f'"\\"{s}\\""' for s in subtasks]



def _held_ids(worker_ids: Sequence[int], max_steps: int, prices: Mapping[int, float] | None,
              budget: float, allow_empty: bool,
              last: Sequence[int] | None = None) -> tuple[dict[int, str], list[str]]:
    """For each step count some plan within `budget` has, the GBNF of its id lists (a rule
    name), and the rules: `bKnJ` admits K ids, comma-separated, whose prices sum to at most
    the J-th amount of money left. Nothing fits: one step of the cheapest worker, or (a
    recursion round, `allow_empty`) no step count at all, leaving only `keep`
    (`podium.conductor.budget.plan_fits` is the same rule, for a plan in hand). With `last`,
    the last id (`b1`'s) is one of those, and the cheapest worker is the cheapest of them."""
    if prices is None:
        raise ValueError("a budget-held grammar needs the price of each worker id")
    ids = sorted(set(worker_ids))
    missing = [i for i in ids if i not in prices]
    if missing:
        raise ValueError(f"a budget-held grammar needs a price for ids {missing}")
    ends = ids if last is None else list(last)
    left0 = budget_limit(budget)
    names: dict[tuple[int, float], str | None] = {}
    rules: list[str] = []

    def rule(k: int, left: float) -> str | None:
        key = (k, round(left, 12))
        if key not in names:
            options = []
            for i in ids:
                if prices[i] > left or (k == 1 and i not in ends):
                    continue
                rest = None if k == 1 else rule(k - 1, left - prices[i])
                if k == 1:
                    options.append(f'"{i}"')
                elif rest is not None:
                    options.append(f'"{i}, " {rest}')
            name = f"b{k}n{sum(1 for (n, _) in names if n == k)}" if options else None
            names[key] = name
            if name:
                rules.append(f"{name} ::= " + " | ".join(options))
        return names[key]

    counts = {n: r for n in range(1, max_steps + 1) if (r := rule(n, left0)) is not None}
    if not counts and not allow_empty:
        cheapest = min(prices[i] for i in ends)
        rules.append("b1n0 ::= " + " | ".join(f'"{i}"' for i in ends if prices[i] == cheapest))
        counts = {1: "b1n0"}
    return counts, rules
