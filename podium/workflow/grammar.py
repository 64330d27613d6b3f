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
"""

from __future__ import annotations

from collections.abc import Sequence

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
) -> str:
    if not worker_ids:
        raise ValueError("the grammar needs at least one worker id")
    if max_steps < 1:
        raise ValueError("max_steps must be at least 1")
    alternatives = [f"wf{n}" for n in range(1, max_steps + 1)]
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
    for n in range(1, max_steps + 1):
        ids = ' ", " '.join(["id"] * n)
        strs = ' ", " '.join(["str"] * n)
        first = "acc" if allow_empty else '"[]"'  # in a recursion round step 0 may see it
        accs = ' ", " '.join([first] + ["acc"] * (n - 1))
        head = "" if opened else '"model_id = [" '
        rules.append(
            f'wf{n} ::= {head}{ids} "]\\nsubtasks = [" {strs} '
            f'"]\\naccess_list = [" {accs} "]"'
        )
    return "\n".join(rules) + "\n"
