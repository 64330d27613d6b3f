"""The Conductor: everything that turns a question into a workflow.

    prompt      the prompt registry: system, routing template, pool display, recursion
    fewshots    few-shot sets fitted to the shown ids and the step limit
    view        which workers one call is shown (PoolView, sub-pools)
    budget      a request's budget: call prices, affordable calls, a plan priced against it
    grammar     the GBNF grammar admitting only valid workflows (constrained decoding)
    parse       the reference parser + validation: text -> Workflow | WorkflowParseError
    turn        the Conductor itself: prompt -> generate -> parse; recursion turns

Training builds the same prompts and grammars from here (`workflow_messages`, `grammar_for`,
`fixed_completion`, `revise_messages`), so a rollout is what inference would have asked.
"""

from podium.conductor.turn import (
    Conductor,
    ConductorTurn,
    fixed_completion,
    grammar_for,
    revise_messages,
    workflow_messages,
)

__all__ = ["Conductor", "ConductorTurn", "fixed_completion", "grammar_for", "revise_messages",
           "workflow_messages"]
