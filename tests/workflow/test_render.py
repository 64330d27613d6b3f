"""Tests for podium.workflow.render: what exactly each worker is shown."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from podium.workflow.render import (
    FINAL_NOTE,
    PREFILL,
    PREVIOUS_ROUND,
    MessageOptions,
    PriorStep,
    sees_previous_round,
    worker_messages,
)
from podium.workflow.types import Step, Workflow

QUESTION = "QUESTION-" + uuid.uuid4().hex


def user_text(messages: list[dict[str, str]]) -> str:
    assert messages[0]["role"] == "user"
    return messages[0]["content"]


# --------------------------------------------------------------------------------------------
# exact visibility, as a property over random valid workflows


@st.composite
def workflows_with_responses(draw: st.DrawFn) -> tuple[Workflow, list[str | None]]:
    n = draw(st.integers(1, 6))
    steps = []
    for i in range(n):
        worker = draw(st.integers(0, 3))
        access = draw(
            st.one_of(
                st.just("all"),
                st.just(()),
                # a random subset of the earlier steps, in a random order
                st.lists(st.integers(0, i - 1), unique=True).map(tuple)
                if i > 0
                else st.just(()),
            )
        )
        subtask = "SUBTASK-" + draw(st.uuids()).hex
        steps.append(Step(worker, subtask, access))
    responses: list[str | None] = [
        draw(st.one_of(st.uuids().map(lambda u: "RESP-" + u.hex), st.just(""), st.none()))
        for _ in range(n)
    ]
    workflow = Workflow.of(steps)
    return workflow, responses


@settings(max_examples=300, deadline=None)
@given(workflows_with_responses())
def test_visibility_is_exact(case: tuple[Workflow, list[str | None]]) -> None:
    workflow, responses = case
    for i, step in enumerate(workflow.steps):
        text = user_text(worker_messages(QUESTION, workflow, i, responses))
        visible = set(step.visible(i))
        assert QUESTION in text
        assert f"Your subtask:\n{step.subtask}" in text
        for j, other in enumerate(workflow.steps):
            response = responses[j]
            shown = j in visible and bool(response)
            if response:
                assert (response in text) == shown, (i, j, step.access)
            if j != i:
                # a subtask is shown only with its (non-empty, visible) response
                assert (other.subtask in text) == shown, (i, j, step.access)


# --------------------------------------------------------------------------------------------
# block format and order


def test_blocks_are_labelled_by_model_id_not_step_index() -> None:
    wf = Workflow.of([(3, "solve it", ()), (1, "check it", "all")])
    text = user_text(worker_messages(QUESTION, wf, 1, ["RESP-A", None]))
    assert '<subtask model_id="3">\nsolve it\n</subtask>' in text
    assert '<response model_id="3">\nRESP-A\n</response>' in text
    assert 'model_id="0"' not in text
    assert 'model_id="1"' not in text  # the step's own worker gets no block


def test_empty_and_missing_responses_are_skipped() -> None:
    wf = Workflow.of([(0, "a-task", ()), (1, "b-task", ()), (2, "c-task", ()), (3, "d", "all")])
    text = user_text(worker_messages(QUESTION, wf, 3, ["", None, "RESP-C", None]))
    assert "a-task" not in text and "b-task" not in text
    assert text.count("<response ") == 1
    assert '<response model_id="2">\nRESP-C\n</response>' in text


def test_no_history_section_when_nothing_is_visible() -> None:
    wf = Workflow.of([(0, "a", ()), (1, "b", ())])
    text = user_text(worker_messages(QUESTION, wf, 1, ["RESP-A", None]))
    assert "RESP-A" not in text
    assert "<subtask" not in text and "<response" not in text
    assert f"<overall_task>\n{QUESTION}\n</overall_task>" in text


def test_visible_blocks_follow_step_order() -> None:
    wf = Workflow.of([(0, "s0", ()), (1, "s1", ()), (2, "s2", ()), (3, "s3", "all")])
    responses = ["RESP-0", "RESP-1", "RESP-2", None]
    text = user_text(worker_messages(QUESTION, wf, 3, responses))
    positions = [text.index(r) for r in responses[:3]]
    assert positions == sorted(positions)


def test_index_access_blocks_follow_step_order_whatever_the_tuple_order() -> None:
    for access in [(2, 0), (0, 2, 0)]:
        wf = Workflow.of([(0, "s0", ()), (1, "s1", ()), (2, "s2", ()), (3, "s3", access)])
        text = user_text(worker_messages(QUESTION, wf, 3, ["RESP-0", "RESP-1", "RESP-2", None]))
        assert "RESP-1" not in text
        assert text.index("RESP-0") < text.index("RESP-2")
        assert text.count("RESP-0") == 1 and text.count("RESP-2") == 1
        assert wf.dependencies()[3] == (0, 2)


def test_order_of_sections() -> None:
    wf = Workflow.of([(0, "s0", ()), (1, "OWN-SUBTASK", "all")])
    prior = [PriorStep(2, "old-task", "OLD-RESP")]
    text = user_text(worker_messages(QUESTION, wf, 1, ["RESP-0", None], previous_round=prior))
    order = [QUESTION, PREVIOUS_ROUND, "OLD-RESP", "RESP-0", "Your subtask:\nOWN-SUBTASK"]
    positions = [text.index(part) for part in order]
    assert positions == sorted(positions)


# --------------------------------------------------------------------------------------------
# the previous recursion round

PRIOR = [
    PriorStep(2, "OLD-TASK-0", "OLD-RESP-0"),
    PriorStep(0, "OLD-TASK-1", ""),
    PriorStep(1, "OLD-TASK-2", "OLD-RESP-2"),
]
WITH_ALL = Workflow.of([(0, "n0", ()), (1, "n1", (0,)), (2, "n2", "all"), (3, "n3", ())])
WITHOUT_ALL = Workflow.of([(0, "n0", ()), (1, "n1", (0,)), (2, "n2", (0, 1))])


def prior_shown(workflow: Workflow, i: int, options: MessageOptions) -> bool:
    responses = [f"NEW-RESP-{j}" for j in range(len(workflow))]
    text = user_text(
        worker_messages(QUESTION, workflow, i, responses, previous_round=PRIOR, options=options)
    )
    shown = PREVIOUS_ROUND in text
    assert ("OLD-RESP-0" in text) == shown and ("OLD-RESP-2" in text) == shown
    assert ('<subtask model_id="2">\nOLD-TASK-0' in text) == shown
    assert "OLD-TASK-1" not in text  # its response was empty
    return shown


def test_any_all_every_step_sees_the_previous_round_when_any_entry_is_all() -> None:
    options = MessageOptions(previous_round_visibility="any_all")
    assert [prior_shown(WITH_ALL, i, options) for i in range(4)] == [True] * 4
    assert [prior_shown(WITHOUT_ALL, i, options) for i in range(3)] == [False] * 3


def test_per_step_only_the_all_steps_see_the_previous_round() -> None:
    options = MessageOptions(previous_round_visibility="per_step")
    assert [prior_shown(WITH_ALL, i, options) for i in range(4)] == [False, False, True, False]
    assert [prior_shown(WITHOUT_ALL, i, options) for i in range(3)] == [False] * 3


def test_sees_previous_round_matches_the_rendering() -> None:
    for visibility in ("any_all", "per_step"):
        options = MessageOptions(previous_round_visibility=visibility)
        for wf in (WITH_ALL, WITHOUT_ALL):
            for i in range(len(wf)):
                assert sees_previous_round(wf, i, options) == prior_shown(wf, i, options)


def test_previous_round_with_only_empty_responses_adds_nothing() -> None:
    prior = [PriorStep(0, "OLD-TASK", ""), PriorStep(1, "OLD-TASK-B", None)]
    text = user_text(worker_messages(QUESTION, WITH_ALL, 2, ["a", "b", None, None],
                                     previous_round=prior))
    assert PREVIOUS_ROUND not in text and "OLD-TASK" not in text


def test_no_previous_round_section_in_round_zero() -> None:
    text = user_text(worker_messages(QUESTION, WITH_ALL, 2, ["a", "b", None, None]))
    assert PREVIOUS_ROUND not in text and "<previous_round>" not in text


# --------------------------------------------------------------------------------------------
# options

THREE = Workflow.of([(0, "PLAN-A", ()), (1, "PLAN-B", ()), (2, "PLAN-C", (0,))])


def test_prefill_on_ends_with_an_assistant_message() -> None:
    messages = worker_messages(QUESTION, THREE, 0, [None] * 3, options=MessageOptions())
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[-1]["content"] == PREFILL


def test_prefill_off_is_one_user_message() -> None:
    messages = worker_messages(QUESTION, THREE, 0, [None] * 3,
                               options=MessageOptions(prefill=False))
    assert [m["role"] for m in messages] == ["user"]


def test_share_agent_subtasks_lists_every_subtask_to_every_step() -> None:
    options = MessageOptions(share_agent_subtasks=True)
    for i in range(3):
        text = user_text(worker_messages(QUESTION, THREE, i, [None] * 3, options=options))
        assert "The team's whole plan:" in text
        for k, step in enumerate(THREE.steps):
            assert f"{k + 1}. Model id {step.worker}: {step.subtask}" in text
    plain = user_text(worker_messages(QUESTION, THREE, 0, [None] * 3))
    assert "PLAN-B" not in plain and "PLAN-C" not in plain


def test_final_agent_knowledge_notes_only_the_last_step() -> None:
    options = MessageOptions(final_agent_knowledge=True)
    notes = [
        FINAL_NOTE in user_text(worker_messages(QUESTION, THREE, i, [None] * 3, options=options))
        for i in range(3)
    ]
    assert notes == [False, False, True]
    last = user_text(worker_messages(QUESTION, THREE, 2, [None] * 3))
    assert FINAL_NOTE not in last
