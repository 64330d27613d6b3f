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

The few-shot examples are fitted to the pool the Conductor is shown: an example whose worker
ids are not all in the pool has them moved onto the pool's ids (`fit_example_ids`), and an
example longer than the step limit is left out, so no prompt shows an id outside the pool or a
plan longer than allowed. The paper's 7-worker pool sees the examples as written. The recursion
templates' examples are fitted the same way.

The previous answer shown in a recursion round is cropped (head and tail kept) only when the
estimated size of the whole prompt (`estimate_tokens`) would pass `max_prompt_tokens`.

Prompt versions and few-shot sets live in small registries (`PROMPTS`, `FEWSHOT_SETS`) so that
the ablations (other few-shot sets, no examples, recursion templates) are a name away. `v1` is
the paper's shape (reason first, then the lists); `compact` is for small Conductors and fast CPU
training: a short template whose prefill (``model_id = [``) opens the lists, so the plan comes
at once (the completion is parsed together with the prefill it continues); `compact-reason` is
the same template with a one-line thought first ("The question asks to ..."); `compact-defined`
is `compact` with both access values defined ("all" = the earlier steps' responses);
`compact-subtask` is `compact-defined` for workers that see only their own subtask (it says so,
and asks for the question's operands in the subtask). All
wording here is podium's own; the few-shot questions are written for podium and come from none
of the benchmarks it evaluates.

A question asked with tools is planned as the task `with_tools` makes: the question, then a
`<tools>` block naming each tool and what it does (never its schema); the workers see that same
task. Without tools the prompts are as above, unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from podium.conductor.fewshots import (
    DEFAULT_FEWSHOTS,
    FEWSHOT_SETS,
    FewShot,
    fit_example_ids,
    format_examples,
)
from podium.errors import ConfigError
from podium.llm.tools import Tool
from podium.workflow.types import Workflow

PoolDisplay = Literal["masked", "names", "descriptions"]
POOL_DISPLAYS: tuple[str, ...] = ("masked", "names", "descriptions")

CROP_NOTE = "[... cropped]"
_CROP_JOIN_CHARS = len(CROP_NOTE) + 2  # crop_answer joins head and tail with "\n[... cropped]\n"

CHARS_PER_TOKEN = 3
MESSAGE_OVERHEAD_TOKENS = 8  # role markers and separators a chat template adds per message
DEFAULT_MAX_PROMPT_TOKENS = 16_000  # the reference code's recursion prompt limit (PAPER.md §10)
MIN_ANSWER_CHARS = 200


# --------------------------------------------------------------------------------------------
# Worker pool
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PoolEntry:
    """One worker as the Conductor may see it: its id and, optionally, a name and description."""

    id: int
    name: str = ""
    description: str = ""
    calls: int | None = None  # how many of its calls the request's budget pays for (shown)


def format_pool(pool: Sequence[PoolEntry], display: PoolDisplay = "masked") -> str:
    """One line per worker, under the worker's own id (a sub-pool may show ids 0, 2, 5).

    * ``masked``: ``Model id 3`` (the paper's setting: no names, no metadata);
    * ``names``: ``Model id 3: <name>``;
    * ``descriptions``: ``Model id 3: <name> - <description>`` (description left out if empty).

    A worker whose `calls` is set (`run.show_budget`, `podium.conductor.budget`) also says how many of
    its calls the budget pays for: ``Model id 3: 2 calls``.
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
        if entry.calls is not None:
            count = f"{entry.calls} call{'' if entry.calls == 1 else 's'}"
            line = f"{line}, {count}" if ":" in line else f"{line}: {count}"
        lines.append(line)
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Prompt versions
# --------------------------------------------------------------------------------------------


RecursionTemplate = Callable[[Sequence[int] | None, int | None], str]  # (shown ids, max steps)


@dataclass(frozen=True)
class ConductorPrompt:
    """One version of the Conductor's wording.

    `template` takes the ``str.format`` fields ``{max_steps}``, ``{examples}``, ``{question}``
    and ``{models}``. Each recursion template is built at call time from the shown worker ids
    and the step limit (its examples use the ids, None shows them as written, and leave out
    plans longer than the limit) and then takes the ``str.format`` field ``{answer}``; ``v2``
    also ``{workflow}``.
    """

    name: str
    system: str
    template: str
    prefill: str
    recursion: dict[str, RecursionTemplate] = field(default_factory=dict)
    recursion_prefill: str = ""

    def recursion_text(self, template: str, shown_ids: Sequence[int] | None = None,
                       max_steps: int | None = None) -> str:
        """The recursion template `template` for a pool showing `shown_ids`."""
        if template not in self.recursion:
            raise ConfigError(
                f"unknown recursion template {template!r}; known templates: "
                f"{', '.join(sorted(self.recursion))}"
            )
        return self.recursion[template](shown_ids, max_steps)


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


_RECURSION_EXAMPLE_LABELS = ("Have one model verify the previous work:",
                             "Re-attempt with two models:")


def _recursion_examples(shown_ids: Sequence[int] | None, max_steps: int | None) -> str:
    parts = ["Keep the answer as it is:", _EMPTY_LISTS]
    for j, (label, wf) in enumerate(zip(_RECURSION_EXAMPLE_LABELS, (_VERIFY_ONCE, _REATTEMPT),
                                        strict=True)):
        if max_steps is None or len(wf) <= max_steps:
            parts += [label, fit_example_ids(wf, shown_ids, j).to_text()]
    return "\n\nExamples.\n" + "\n".join(parts)


def _recursion_v0(shown_ids: Sequence[int] | None, max_steps: int | None) -> str:
    return _RECURSION_HEAD + _RECURSION_RULES


def _recursion_v1(shown_ids: Sequence[int] | None, max_steps: int | None) -> str:
    return _RECURSION_HEAD + _RECURSION_RULES + _recursion_examples(shown_ids, max_steps)


def _recursion_v2(shown_ids: Sequence[int] | None, max_steps: int | None) -> str:
    return (_RECURSION_HEAD + _RECURSION_WORKFLOW + _RECURSION_RULES
            + _recursion_examples(shown_ids, max_steps))


_RECURSION_V1: dict[str, RecursionTemplate] = {
    "v0": _recursion_v0,
    "v1": _recursion_v1,
    "v2": _recursion_v2,
}

_RECURSION_PREFILL_V1 = (
    "I will consider whether the previous workflow and its answer need any changes."
)

# A compact prompt for small Conductors and fast CPU training: no reasoning; the prefill opens
# the lists, so the model writes the plan straight away. Meant to be held to the workflow
# grammar (a constrained Conductor, or `[rollout] constrained` in training), which fixes the
# format; left free, a 135M model rarely writes three valid lists from it.
_QUESTION_AND_MODELS = """

{examples}Question: {question}

Models:
{models}"""
_TEMPLATE_COMPACT = """\
Answer the question with a team of models, in at most {max_steps} steps. Each step names a \
model, gives it a subtask, and says which earlier steps it sees ("all" or []); a step that \
needs an earlier step's result must see it. The last step's response is the answer. Write \
model_id, subtasks and access_list as three lists.""" + _QUESTION_AND_MODELS

# The compact template with both access values defined and the rule for using one ("all"
# written about four times as often by the untrained 135M model; docs/gym.md, run H)
_TEMPLATE_COMPACT_DEFINED = """\
Answer the question with a team of models, in at most {max_steps} steps. Write three lists: \
model_id (which model does each step), subtasks (what each step does) and access_list (what \
each step sees: "all" = the responses of the earlier steps, [] = nothing). The last step's \
response is the answer; a step that uses an earlier result must have "all".""" \
    + _QUESTION_AND_MODELS

# compact-defined for workers that read only their own subtask, not the question (the gym's
# subtask mode): the Conductor is told so, and that the subtask must carry the operands
_TEMPLATE_COMPACT_SUBTASK = _TEMPLATE_COMPACT_DEFINED.replace(
    " The last step's", " A model does not see the question, only its own subtask: copy into "
    "the subtask what its step needs from the question. The last step's", 1)


def _v1_with(name: str, template: str, prefill: str) -> ConductorPrompt:
    """A prompt with v1's system message and recursion rounds."""
    return ConductorPrompt(name=name, system=_SYSTEM_V1, template=template, prefill=prefill,
                           recursion=_RECURSION_V1, recursion_prefill=_RECURSION_PREFILL_V1)


PROMPTS: dict[str, ConductorPrompt] = {
    "v1": _v1_with("v1", _TEMPLATE_V1, _PREFILL_V1),
    "compact": _v1_with("compact", _TEMPLATE_COMPACT, "model_id = ["),
    "compact-defined": _v1_with("compact-defined", _TEMPLATE_COMPACT_DEFINED, "model_id = ["),
    "compact-subtask": _v1_with("compact-subtask", _TEMPLATE_COMPACT_SUBTASK, "model_id = ["),
    # the compact template with a short thought first: the prefill opens a sentence about what
    # the question asks, which gives the worker ids a feature to condition on
    "compact-reason": _v1_with("compact-reason", _TEMPLATE_COMPACT, "The question asks to"),
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
    budget: str | None = None,
) -> list[dict[str, str]]:
    """The root-round messages: system, user (the filled template), assistant (the prefill).

    The few-shot examples are fitted to the pool's ids and to `max_steps` (`format_examples`).
    `budget` (e.g. ``Budget: $0.002``) is a line shown above the models (`run.show_budget`).

    The last message is an open assistant turn: render it with the chat template's
    "continue the final message" option so the model carries on from the prefill.
    """
    if max_steps < 1:
        raise ConfigError(f"max_steps must be at least 1, got {max_steps}")
    p = get_prompt(prompt)
    models = format_pool(pool, display)
    if budget:
        models = f"{budget}\n{models}"
    examples = format_examples(
        fewshots, shown_ids=[entry.id for entry in pool], max_steps=max_steps
    )
    user = p.template.format(
        max_steps=max_steps, examples=examples, question=question.strip(), models=models
    )
    return [
        {"role": "system", "content": p.system},
        {"role": "user", "content": user},
        {"role": "assistant", "content": p.prefill},
    ]


def with_tools(question: str, tools: Sequence[Tool]) -> str:
    """`question` with the tools its answer may call: a delimited block of their names and
    descriptions (one line each, whitespace flattened), never their schemas."""
    lines = [f"- {t.name}: {' '.join(t.description.split())}" if t.description.strip()
             else f"- {t.name}" for t in tools]
    return (f"{question.rstrip()}\n\n<tools>\nThe final step may call these tools instead of "
            "answering in text; the other steps cannot call them.\n" + "\n".join(lines)
            + "\n</tools>")


def estimate_tokens(text: str) -> int:
    """An estimate of the tokens in `text`: one per `CHARS_PER_TOKEN` (3) characters, rounded up.

    Tokenizers give English prose about 4 characters a token and code about 3 to 3.5, so the
    estimate errs on the long side for both; it can fall short for text with many non-Latin
    characters or emoji. No tokenizer is loaded, so it costs nothing and fits any worker.
    """
    return -(-len(text) // CHARS_PER_TOKEN)


def estimate_messages_tokens(messages: Sequence[dict[str, str]]) -> int:
    """`estimate_tokens` of every message's content plus `MESSAGE_OVERHEAD_TOKENS` each."""
    return sum(estimate_tokens(m["content"]) + MESSAGE_OVERHEAD_TOKENS for m in messages)


def crop_answer(answer: str, max_chars: int | None) -> str:
    """Keep at most `max_chars` characters of `answer`: its head and its tail (where a final
    ``<answer>`` tag usually sits), joined by a ``[... cropped]`` note."""
    if max_chars is not None and max_chars < 1:
        raise ConfigError(f"max_chars must be positive or None, got {max_chars}")
    if max_chars is None or len(answer) <= max_chars:
        return answer
    head = max_chars // 2
    tail = max_chars - head
    return f"{answer[:head]}\n{CROP_NOTE}\n{answer[len(answer) - tail :]}"


def _fit_answer(
    answer: str, user: Callable[[str], str], other_tokens: int, max_prompt_tokens: int | None
) -> str:
    """`answer`, cropped just enough that `other_tokens` + the estimate of `user(answer)` fits
    `max_prompt_tokens`, but to no fewer than `MIN_ANSWER_CHARS` characters."""
    if max_prompt_tokens is None:
        return answer
    if max_prompt_tokens < 1:
        raise ConfigError(f"max_prompt_tokens must be positive or None, got {max_prompt_tokens}")
    if other_tokens + estimate_tokens(user(answer)) <= max_prompt_tokens:
        return answer
    room = CHARS_PER_TOKEN * (max_prompt_tokens - other_tokens) - len(user(""))
    return crop_answer(answer, max(room - _CROP_JOIN_CHARS, MIN_ANSWER_CHARS))


def _close_turn(prefill: str, completion: str) -> dict[str, str]:
    """The previous assistant turn: its prefill continued by `completion`."""
    # The model continued the prefill token by token; keep the two apart if it did not.
    sep = "" if not completion or prefill[-1:].isspace() or completion[:1].isspace() else "\n"
    return {"role": "assistant", "content": prefill + sep + completion}


def recursion_messages(
    previous: list[dict[str, str]],
    completion: str,
    answer: str,
    *,
    prompt: str = DEFAULT_PROMPT,
    template: str = DEFAULT_RECURSION,
    workflow_text: str = "",
    shown_ids: Sequence[int] | None = None,
    max_steps: int | None = None,
    max_prompt_tokens: int | None = DEFAULT_MAX_PROMPT_TOKENS,
) -> list[dict[str, str]]:
    """The messages of a recursion round.

    `previous` is the previous round's messages, ending with its assistant prefill. That turn
    is closed as prefill + `completion` (one assistant message); a user turn follows with the
    recursion template (its examples fitted to `shown_ids`, None = as written, and to
    `max_steps`) filled with
    `answer` and, for ``v2``, `workflow_text`; a new assistant prefill opens the next plan.

    The answer is shown whole unless `estimate_messages_tokens` of all the messages would pass
    `max_prompt_tokens` (None: never crop). Then its middle is cropped, head and tail kept, just
    enough to fit; if even an empty answer would not fit, `MIN_ANSWER_CHARS` characters of it
    are kept and the prompt stays over the limit (the backend's context error then says so).
    """
    if not previous or previous[-1].get("role") != "assistant":
        raise ValueError("`previous` must end with the assistant prefill of the previous round")
    p = get_prompt(prompt)
    text = p.recursion_text(template, shown_ids, max_steps)
    if "{workflow}" in text and not workflow_text.strip():
        raise ConfigError(
            f"recursion template {template!r} shows the previous workflow; pass workflow_text"
        )

    def user(shown_answer: str) -> str:
        return text.format(answer=shown_answer, workflow=workflow_text.strip())

    messages = [
        *(dict(m) for m in previous[:-1]),
        _close_turn(previous[-1]["content"], completion),
        {"role": "user", "content": ""},
        {"role": "assistant", "content": p.recursion_prefill},
    ]
    shown = _fit_answer(answer.strip(), user, estimate_messages_tokens(messages), max_prompt_tokens)
    messages[-2]["content"] = user(shown)
    return messages


__all__ = [
    "CHARS_PER_TOKEN",
    "CROP_NOTE",
    "DEFAULT_FEWSHOTS",
    "DEFAULT_MAX_PROMPT_TOKENS",
    "DEFAULT_PROMPT",
    "DEFAULT_RECURSION",
    "FEWSHOT_SETS",
    "MESSAGE_OVERHEAD_TOKENS",
    "MIN_ANSWER_CHARS",
    "POOL_DISPLAYS",
    "PROMPTS",
    "ConductorPrompt",
    "FewShot",
    "PoolDisplay",
    "PoolEntry",
    "RecursionTemplate",
    "conductor_messages",
    "crop_answer",
    "estimate_messages_tokens",
    "estimate_tokens",
    "fit_example_ids",
    "format_examples",
    "format_pool",
    "get_prompt",
    "recursion_messages",
]
