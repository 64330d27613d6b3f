"""Workflow types: validation of references, dependencies, the three-list text form."""

from __future__ import annotations

import pytest

from podium.conductor.parse import parse_workflow
from podium.workflow.types import Step, Workflow


@pytest.mark.parametrize("access", [(1,), (2,), (0, 1), (-1,)])
def test_forward_self_and_negative_references_are_rejected(access):
    with pytest.raises(ValueError, match="earlier step"):
        Workflow.of([(0, "a", ()), (1, "b", access)])


def test_worker_range_is_checked_when_the_pool_size_is_known():
    wf = Workflow.of([(3, "a", ())])
    wf.validate()
    with pytest.raises(ValueError, match="not in 0..1"):
        wf.validate(num_workers=2)


def test_dependencies_follow_access():
    wf = Workflow.of([(0, "a", "all"), (0, "b", ()), (1, "c", (0,)), (1, "d", "all")])
    assert wf.dependencies() == [(), (), (0,), (0, 1, 2)]
    assert Step(0, "x", (2, 0, 0)).visible(3) == (0, 2)


def test_text_form_round_trips_through_the_parser():
    wf = Workflow.of([(2, 'Say "hi" [twice]', ()), (0, "Check it.", "all"), (1, "Sum.", (0, 1))])
    assert parse_workflow(wf.to_text(), num_workers=3, access_mode="indices") == wf
    assert wf.to_json()[2] == {"worker": 1, "subtask": "Sum.", "access": [0, 1]}
