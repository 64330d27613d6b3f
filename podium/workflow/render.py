"""The messages a worker receives for one step of a workflow.

Each worker gets ONE user message and, by default, a short assistant prefill:

1. a preamble: it is solving one subtask of a larger task and may build on other workers' work;
2. the full formatted question inside `<overall_task>` (always, even for a step that sees nothing);
3. in a recursion round, the previous round's steps (when `any_all`: if any step of the new
   workflow has access "all", as the reference code does; when `per_step`: only for steps
   whose own access is "all");
4. the visible steps of this workflow, in order, as subtask/response blocks labelled by the
   worker's model id (not the step index); steps with an empty, blank or missing response are
   left out;
5. optionally the whole plan (`share_agent_subtasks`);
6. the step's own subtask, and optionally a note that its output is the final answer
   (`final_agent_knowledge`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from podium.llm.base import Message
from podium.workflow.types import Workflow

PREAMBLE = (
    "You are one member of a team of AI models working together on a larger task. You have "
    "been given one subtask of it: for example, to solve the task with a particular approach, "
    "to check another member's work, or to make sure an answer meets the task's requirements. "
    "Focus on your subtask, and use the overall task for context. You may be shown the "
    "subtasks other members were given and their responses; build on them where they help, "
    "reuse their good ideas and fix their mistakes."
)
PREVIOUS_ROUND = (
    "The team already worked on this task in an earlier round. Here is what each member was "
    "asked and answered then; the last response was the team's answer:"
)
FINAL_NOTE = (
    "Your response is the team's final answer and goes back to the user exactly as you write "
    "it, so follow the answer format the overall task asks for."
)
PREFILL = "Let me work through this step by step."


@dataclass(frozen=True)
class MessageOptions:
    prefill: bool = True
    share_agent_subtasks: bool = False
    final_agent_knowledge: bool = False
    previous_round_visibility: Literal["any_all", "per_step"] = "any_all"
    question_only: bool = False  # the worker is a black box: it gets the bare question


@dataclass(frozen=True)
class PriorStep:
    """A step of the previous recursion round, as later workers may see it."""

    worker: int
    subtask: str
    response: str | None


def _block(worker: int, subtask: str, response: str) -> str:
    return (
        f'<subtask model_id="{worker}">\n{subtask}\n</subtask>\n'
        f'<response model_id="{worker}">\n{response}\n</response>'
    )


def _blocks(steps: Sequence[PriorStep]) -> list[str]:
    return [_block(s.worker, s.subtask, s.response) for s in steps
            if s.response and s.response.strip()]


def sees_previous_round(workflow: Workflow, index: int, options: MessageOptions) -> bool:
    if options.previous_round_visibility == "per_step":
        return workflow.steps[index].access == "all"
    return any(step.access == "all" for step in workflow.steps)


def worker_messages(
    question: str,
    workflow: Workflow,
    index: int,
    responses: Sequence[str | None],
    *,
    previous_round: Sequence[PriorStep] = (),
    options: MessageOptions = MessageOptions(),
) -> list[Message]:
    """Messages for step `index`. `responses[j]` is step j's response (only visible j are read)."""
    if options.question_only:
        return [{"role": "user", "content": question}]
    step = workflow.steps[index]
    parts = [PREAMBLE, f"<overall_task>\n{question}\n</overall_task>"]
    if previous_round and sees_previous_round(workflow, index, options):
        prior = _blocks(previous_round)
        if prior:
            parts.append(PREVIOUS_ROUND + "\n<previous_round>\n" + "\n".join(prior)
                         + "\n</previous_round>")
    visible = [
        PriorStep(workflow.steps[j].worker, workflow.steps[j].subtask, responses[j])
        for j in step.visible(index)
    ]
    history = _blocks(visible)
    if history:
        parts.append("Work of other team members so far:\n" + "\n".join(history))
    if options.share_agent_subtasks:
        plan = "\n".join(f"{i + 1}. Model id {s.worker}: {s.subtask}"
                         for i, s in enumerate(workflow.steps))
        parts.append(f"The team's whole plan:\n{plan}")
    own = f"Your subtask:\n{step.subtask}"
    if options.final_agent_knowledge and index == len(workflow.steps) - 1:
        own += "\n\n" + FINAL_NOTE
    parts.append(own)
    messages: list[Message] = [{"role": "user", "content": "\n\n".join(parts)}]
    if options.prefill:
        messages.append({"role": "assistant", "content": PREFILL})
    return messages
