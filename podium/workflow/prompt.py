"""The Conductor's prompts: what the planning model reads before it writes a workflow.

A Conductor call is three chat messages (PAPER.md §2.1):

1. a short system message;
2. a user message: the routing template filled with the step limit, a few-shot block, the
   question and the worker pool (shown as ordinal ids only by default, §2.4);
3. an assistant prefill that the model continues with its reasoning and the three lists
   ``model_id``, ``subtasks`` and ``access_list`` (§3.1).

A recursion round (§10) continues that conversation: the previous assistant turn is closed with
the completion, a new user turn shows the final answer of the previous round (and, for template
``v2``, the previous workflow), and a new assistant prefill opens the next plan. Writing three
empty lists keeps the answer; anything else is a new workflow.

Prompt versions and few-shot sets live in small registries (`PROMPTS`, `FEWSHOT_SETS`) so that
the ablations (other few-shot sets, no examples, recursion templates) are a name away. All
wording here is podium's own; the few-shot questions are written for podium and come from none
of the benchmarks it evaluates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from podium.errors import ConfigError
from podium.workflow.types import Workflow

PoolDisplay = Literal["masked", "names", "descriptions"]
POOL_DISPLAYS: tuple[str, ...] = ("masked", "names", "descriptions")

CROP_NOTE = "[... cropped]"


# --------------------------------------------------------------------------------------------
# Worker pool
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PoolEntry:
    """One worker as the Conductor may see it: its id and, optionally, a name and description."""

    id: int
    name: str = ""
    description: str = ""


def format_pool(pool: Sequence[PoolEntry], display: PoolDisplay = "masked") -> str:
    """One line per worker, under the worker's own id (a sub-pool may show ids 0, 2, 5).

    * ``masked``: ``Model id 3`` (the paper's setting: no names, no metadata);
    * ``names``: ``Model id 3: <name>``;
    * ``descriptions``: ``Model id 3: <name> - <description>`` (description left out if empty).
    """
    if display not in POOL_DISPLAYS:
        raise ConfigError(
            f"unknown pool display {display!r}; use one of {', '.join(POOL_DISPLAYS)}"
        )
    if not pool:
        raise ConfigError("the worker pool is empty; list at least one worker")
    ids = [entry.id for entry in pool]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"worker ids must be unique in the pool, got {ids}")
    lines = []
    for entry in pool:
        line = f"Model id {entry.id}"
        if display != "masked":
            label = entry.name
            if display == "descriptions" and entry.description:
                label = f"{label} - {entry.description}" if label else entry.description
            if label:
                line = f"{line}: {label}"
        lines.append(line)
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Few-shot examples
# --------------------------------------------------------------------------------------------


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

FEWSHOT_SETS: dict[str, tuple[FewShot, ...]] = {
    "ood": _OOD,
    "none": (),
}
DEFAULT_FEWSHOTS = "ood"


def format_examples(fewshots: str) -> str:
    """The few-shot block for the routing template; ``""`` for the set ``none``."""
    if fewshots not in FEWSHOT_SETS:
        raise ConfigError(
            f"unknown few-shot set {fewshots!r}; known sets: {', '.join(sorted(FEWSHOT_SETS))}"
        )
    examples = FEWSHOT_SETS[fewshots]
    if not examples:
        return ""
    parts = [f"Example {i + 1}\n{ex.render()}" for i, ex in enumerate(examples)]
    return "Examples of good plans:\n\n" + "\n\n".join(parts) + "\n\n"


# --------------------------------------------------------------------------------------------
# Prompt versions
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConductorPrompt:
    """One version of the Conductor's wording.

    `template` takes the ``str.format`` fields ``{max_steps}``, ``{examples}``, ``{question}``
    and ``{models}``. Each recursion template takes ``{answer}``; ``v2`` also ``{workflow}``.
    """

    name: str
    system: str
    template: str
    prefill: str
    recursion: dict[str, str] = field(default_factory=dict)
    recursion_prefill: str = ""


_SYSTEM_V1 = (
    "You are a helpful assistant. Before you answer, you think privately about how best to "
    "coordinate a team of models to serve the user."
)

_TEMPLATE_V1 = """\
Your job is to answer the user's question by consulting a team of strong language models \
with different skills, one step at a time. You are given the question and a numbered list of \
models; output a plan of at most {max_steps} steps.

Each step has three parts: a model, a subtask for that model, and an access list saying which \
earlier steps are placed in its context.

A subtask can ask the model to solve the problem from scratch, to refine or check the work of \
an earlier step, to make a plan, or to do any other job that helps the steps after it.

How the plan runs: the first model receives the question and its subtask. Each later model \
receives the subtask/response pairs of the earlier steps its access entry names, then its own \
subtask. The last model's response is returned to the user as the answer, so the last step \
must produce the final answer in the format the question asks for.

Output format: reason first, then end with exactly three lines:
model_id = [...] (integers: the model of each step)
subtasks = [...] (strings: the subtask of each step)
access_list = [...] (per step: "all" to see every earlier step, or [] to see none)
The three lists must have the same length.

{examples}=== QUESTION ===
{question}
=== END QUESTION ===

=== MODELS ===
{models}
=== END MODELS ==="""

_PREFILL_V1 = (
    "I will reason step by step about how to split this question into subtasks, which models "
    "should handle them, and what each step should be able to see."
)

_EMPTY_LISTS = "model_id = []\nsubtasks = []\naccess_list = []"

_RECURSION_HEAD = """\
You already coordinated the team on this question. The final answer of that workflow was:

=== PREVIOUS ANSWER ===
{answer}
=== END PREVIOUS ANSWER ===
"""

_RECURSION_WORKFLOW = """
The workflow you wrote for it was:
{workflow}
"""

_RECURSION_RULES = f"""
Decide whether this answer should stand. To keep it unchanged, end with three empty lists:
{_EMPTY_LISTS}
Otherwise write a new workflow in the same format and under the same rules as before. The \
models in the new workflow can also see the steps of the previous round."""

_VERIFY_ONCE = Workflow.of(
    [
        (
            2,
            "Check the previous steps for errors and give the corrected final answer in the "
            "format the question asks for.",
            "all",
        )
    ]
)
_REATTEMPT = Workflow.of(
    [
        (0, "Solve the question again from scratch.", ()),
        (
            1,
            "Compare the new solution with the previous answer and give the better one in the "
            "format the question asks for.",
            "all",
        ),
    ]
)

_RECURSION_EXAMPLES = f"""

Examples.
Keep the answer as it is:
{_EMPTY_LISTS}
Have one model verify the previous work:
{_VERIFY_ONCE.to_text()}
Re-attempt with two models:
{_REATTEMPT.to_text()}"""

_RECURSION_V1 = {
    "v0": _RECURSION_HEAD + _RECURSION_RULES,
    "v1": _RECURSION_HEAD + _RECURSION_RULES + _RECURSION_EXAMPLES,
    "v2": _RECURSION_HEAD + _RECURSION_WORKFLOW + _RECURSION_RULES + _RECURSION_EXAMPLES,
}

_RECURSION_PREFILL_V1 = (
    "I will consider whether the previous workflow and its answer need any changes."
)

PROMPTS: dict[str, ConductorPrompt] = {
    "v1": ConductorPrompt(
        name="v1",
        system=_SYSTEM_V1,
        template=_TEMPLATE_V1,
        prefill=_PREFILL_V1,
        recursion=_RECURSION_V1,
        recursion_prefill=_RECURSION_PREFILL_V1,
    ),
}
DEFAULT_PROMPT = "v1"
DEFAULT_RECURSION = "v1"


def get_prompt(name: str) -> ConductorPrompt:
    """The prompt version `name`; ConfigError naming the known versions if there is none."""
    try:
        return PROMPTS[name]
    except KeyError:
        raise ConfigError(
            f"unknown Conductor prompt {name!r}; known prompts: {', '.join(sorted(PROMPTS))}"
        ) from None


# --------------------------------------------------------------------------------------------
# Messages
# --------------------------------------------------------------------------------------------


def conductor_messages(
    question: str,
    pool: Sequence[PoolEntry],
    *,
    prompt: str = DEFAULT_PROMPT,
    fewshots: str = DEFAULT_FEWSHOTS,
    max_steps: int = 5,
    display: PoolDisplay = "masked",
) -> list[dict[str, str]]:
    """The root-round messages: system, user (the filled template), assistant (the prefill).

    The last message is an open assistant turn: render it with the chat template's
    "continue the final message" option so the model carries on from the prefill.
    """
    if max_steps < 1:
        raise ConfigError(f"max_steps must be at least 1, got {max_steps}")
    p = get_prompt(prompt)
    user = p.template.format(
        max_steps=max_steps,
        examples=format_examples(fewshots),
        question=question.strip(),
        models=format_pool(pool, display),
    )
    return [
        {"role": "system", "content": p.system},
        {"role": "user", "content": user},
        {"role": "assistant", "content": p.prefill},
    ]


def crop_answer(answer: str, max_chars: int | None) -> str:
    """Keep at most `max_chars` characters of `answer`: its head and its tail (where a final
    ``<answer>`` tag usually sits), joined by a ``[... cropped]`` note."""
    if max_chars is not None and max_chars < 1:
        raise ConfigError(f"max_answer_chars must be positive or None, got {max_chars}")
    if max_chars is None or len(answer) <= max_chars:
        return answer
    head = max_chars // 2
    tail = max_chars - head
    return f"{answer[:head]}\n{CROP_NOTE}\n{answer[len(answer) - tail :]}"


def recursion_messages(
    previous: list[dict[str, str]],
    completion: str,
    answer: str,
    *,
    prompt: str = DEFAULT_PROMPT,
    template: str = DEFAULT_RECURSION,
    workflow_text: str = "",
    max_answer_chars: int | None = 4000,
) -> list[dict[str, str]]:
    """The messages of a recursion round.

    `previous` is the previous round's messages, ending with its assistant prefill. That turn
    is closed as prefill + `completion` (one assistant message); a user turn follows with the
    recursion template filled with `answer` (cropped to `max_answer_chars`) and, for ``v2``,
    `workflow_text`; a new assistant prefill opens the next plan.
    """
    if not previous or previous[-1].get("role") != "assistant":
        raise ValueError("`previous` must end with the assistant prefill of the previous round")
    p = get_prompt(prompt)
    if template not in p.recursion:
        raise ConfigError(
            f"unknown recursion template {template!r}; known templates: "
            f"{', '.join(sorted(p.recursion))}"
        )
    text = p.recursion[template]
    if "{workflow}" in text and not workflow_text.strip():
        raise ConfigError(
            f"recursion template {template!r} shows the previous workflow; pass workflow_text"
        )
    prefill = previous[-1]["content"]
    # The model continued the prefill token by token; keep the two apart if it did not.
    sep = "" if not completion or prefill[-1:].isspace() or completion[:1].isspace() else "\n"
    closed = {"role": "assistant", "content": prefill + sep + completion}
    fields = {"answer": crop_answer(answer.strip(), max_answer_chars)}
    if "{workflow}" in text:
        fields["workflow"] = workflow_text.strip()
    return [
        *(dict(m) for m in previous[:-1]),
        closed,
        {"role": "user", "content": text.format(**fields)},
        {"role": "assistant", "content": p.recursion_prefill},
    ]


__all__ = [
    "CROP_NOTE",
    "DEFAULT_FEWSHOTS",
    "DEFAULT_PROMPT",
    "DEFAULT_RECURSION",
    "FEWSHOT_SETS",
    "POOL_DISPLAYS",
    "PROMPTS",
    "ConductorPrompt",
    "FewShot",
    "PoolDisplay",
    "PoolEntry",
    "conductor_messages",
    "crop_answer",
    "format_examples",
    "format_pool",
    "get_prompt",
    "recursion_messages",
]
