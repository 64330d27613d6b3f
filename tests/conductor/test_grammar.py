"""The workflow grammar compiles in llama.cpp and holds a real model to valid workflows."""

from __future__ import annotations

import asyncio

import pytest

from podium.conductor.grammar import fixed_workflow, workflow_grammar
from podium.conductor.parse import parse_workflow
from podium.conductor.prompt import PoolEntry, conductor_messages
from podium.config import ModelSpec
from podium.llm.embedded import EmbeddedClient, ModelStore


@pytest.mark.parametrize("ids", [[0], [0, 1], [0, 2, 5], list(range(7))])
@pytest.mark.parametrize("max_steps", [1, 3, 5])
@pytest.mark.parametrize("allow_empty", [False, True])
def test_grammar_compiles(ids, max_steps, allow_empty):
    from llama_cpp import LlamaGrammar

    text = workflow_grammar(ids, max_steps, allow_empty=allow_empty)
    LlamaGrammar.from_string(text, verbose=False)  # raises on a malformed grammar
    assert text.count("::=") == 8 + max_steps
    for i in ids:
        assert f'"{i}"' in text


def test_grammar_rejects_bad_arguments():
    with pytest.raises(ValueError):
        workflow_grammar([], 3)
    with pytest.raises(ValueError):
        workflow_grammar([0], 0)


@pytest.mark.parametrize("seed", [1])
def test_hot_sampling_under_the_grammar_still_parses(seed):
    """Even at temperature 1.5 the completion is a valid workflow within a sub-pool. The
    grammar's limits bound its length (one reasoning line of 80 characters, subtasks of 60:
    under 300 characters, a token at least each) below max_tokens, so every sample ends."""
    spec = ModelSpec(name="conductor", backend="embedded", model="smollm2", temperature=1.5,
                     top_p=1.0, max_tokens=400, seed=seed)
    client = EmbeddedClient(spec, ModelStore())
    pool = [PoolEntry(0), PoolEntry(2)]
    messages = conductor_messages("Plan a picnic for six people.", pool, max_steps=2,
                                  fewshots="short")
    grammar = workflow_grammar([0, 2], 2, max_reason_chars=80, max_reason_lines=1,
                               max_subtask_chars=60)
    resp = asyncio.run(client.chat(messages, grammar=grammar))
    assert resp.prefill == "continued" and resp.finish_reason == "stop"
    wf = parse_workflow(resp.text, num_workers=3, max_steps=2, allowed_workers=[0, 2])
    assert 1 <= len(wf) <= 2
    assert {s.worker for s in wf.steps} <= {0, 2}
    assert wf.steps[0].access == ()


def accepts(grammar: str, text: str) -> bool:
    """Whether the grammar admits `text` in full (xgrammar, byte-level, no model needed)."""
    xgr = pytest.importorskip("xgrammar")
    info = xgr.TokenizerInfo([chr(c) for c in range(32, 127)] + ["\n"])
    matcher = xgr.GrammarMatcher(xgr.GrammarCompiler(info).compile_grammar(grammar))
    return matcher.accept_string(text) and matcher.is_completed()


def test_a_subtask_cannot_hold_a_list_label():
    """A subtask like "Access: all" would read as the access_list's label (the parser takes a
    label's first match), so the grammar keeps ':' and '=' out of subtasks."""
    grammar = workflow_grammar([0, 1], 2, opened=True)
    good = '0]\nsubtasks = ["Reverse the word abc."]\naccess_list = [[]]'
    assert accepts(grammar, good)
    for subtask in ("Access: all of it", "Model id = 1 please"):
        assert not accepts(grammar, f'0]\nsubtasks = ["{subtask}"]\naccess_list = [[]]')
    reasoned = workflow_grammar([0, 1], 2, max_reason_chars=20, max_reason_lines=1)
    assert accepts(reasoned, " reverse a word\n" + "model_id = [" + good)
    assert not accepts(reasoned, " reverse a word\nand more\n" + "model_id = [" + good)


def test_every_subtask_the_grammar_admits_reads_back_unchanged():
    """The parser turns curly quotes into straight ones and drops backticks, so a subtask
    holding “ or ” would split its list (a grammar-held rollout scored as a format error):
    the grammar keeps them out."""
    grammar = workflow_grammar([0, 1], 2, opened=True)
    for subtask in ("Say “hi” to it", "Say ‘hi’ to it", "Run `ls` here"):
        text = f'0, 1]\nsubtasks = ["{subtask}", "Then the rest"]\naccess_list = [[], []]'
        assert not accepts(grammar, text)
    admitted = "Mixed [1], 'x' # ok"
    text = f'0, 1]\nsubtasks = ["{admitted}", "Then the rest"]\naccess_list = [[], []]'
    assert accepts(grammar, text)
    wf = parse_workflow("model_id = [" + text, num_workers=2, max_steps=2)
    assert [s.subtask for s in wf.steps] == [admitted, "Then the rest"]


def test_a_skeleton_holds_the_ids_and_access_and_leaves_the_subtasks_free():
    """Training's exploration rollouts: the grammar admits the one plan, any subtasks."""
    grammar = workflow_grammar([0, 1, 2], 2, opened=True, skeleton=((2, 0), ("[]", "all")))
    plan = '2, 0]\nsubtasks = ["{}", "{}"]\naccess_list = [[], {}]'
    assert accepts(grammar, plan.format("Count the a", "Add five to it", '"all"'))
    assert accepts(grammar, plan.format("Anything else", "Whatever it is", '"all"'))
    assert not accepts(grammar, plan.format("Count the a", "Add five to it", "[]"))
    assert not accepts(grammar, plan.replace("2, 0", "0, 2").format("Count the a", "Add it",
                                                                      '"all"'))
    assert not accepts(grammar, '2]\nsubtasks = ["Count the a"]\naccess_list = [[]]')
    wf = parse_workflow("model_id = [" + plan.format("Count the a", "Add five", '"all"'),
                        num_workers=3, max_steps=2)
    assert [s.worker for s in wf.steps] == [2, 0] and wf.steps[1].access == "all"
    reasoned = workflow_grammar([0, 1], 2, skeleton=((1,), ("[]",)))
    assert accepts(reasoned, ' one step\nmodel_id = [1]\nsubtasks = ["Do it all now"]\n'
                             'access_list = [[]]')
    for bad in (((3,), ("[]",)), ((0,), ("all",)), ((0, 1, 0), ("[]", "[]", "[]")),
                ((0, 1), ("[]",))):
        with pytest.raises(ValueError, match="skeleton"):
            workflow_grammar([0, 1, 2], 2, skeleton=bad)


def test_a_skeleton_with_subtasks_holds_them_too():
    """`explore_subtasks = "question"`: the drawn plan's subtasks are literals as well."""
    held = workflow_grammar([0, 1, 2], 2, opened=True, skeleton=((2, 0), ("[]", "all")),
                            subtasks=["Count the 'a'", "What is 3 + 4?"])
    plan = '2, 0]\nsubtasks = ["{}", "{}"]\naccess_list = [[], "all"]'
    assert accepts(held, plan.format("Count the 'a'", "What is 3 + 4?"))
    assert fixed_workflow(((2, 0), ("[]", "all")), ["Count the 'a'", "What is 3 + 4?"]) == (
        plan.format("Count the 'a'", "What is 3 + 4?"))  # the one text it admits, written
    assert not accepts(held, plan.format("Count the 'b'", "What is 3 + 4?"))
    assert not accepts(held, plan.format("What is 3 + 4?", "Count the 'a'"))
    with pytest.raises(ValueError, match="need a skeleton"):
        workflow_grammar([0, 1], 2, subtasks=["Do it all now"])
    for bad in (["Only one"], ["Say \"hi\"", "Fine it is"], ["Two\nlines", "Fine it is"]):
        with pytest.raises(ValueError, match="literal subtasks"):
            workflow_grammar([0, 1, 2], 2, skeleton=((2, 0), ("[]", "all")), subtasks=bad)


def test_the_question_as_a_subtask_fits_the_grammar():
    """`explore_subtasks = "question"`: the question's lines while they fit, nothing the
    subtask string excludes, a capital first, at least the grammar's 10 characters."""
    from podium.train.rollout.explore import question_subtask

    gym = "Reverse the word 'eauog'.\nGive the final answer inside <answer></answer>."
    assert question_subtask(gym, 72) == "Reverse the word 'eauog'."
    assert question_subtask(gym, 80) == gym.replace("\n", " ")
    assert question_subtask("What is 3 + 4?", 12) == "What is 3 +"  # cut at a word
    assert question_subtask("Abcdefghijklmnop", 12) == "Abcdefghijkl"  # no word to cut at
    assert question_subtask('ratio: "a=b"\n', 72) == "Ratio ab.."
    assert question_subtask("\n 3 apples?", 72) == "Q 3 apples?"
    texts = [question_subtask(q, 24) for q in (gym, 'x: "y" = `z`\\ “w”', "", "é voilà")]
    grammar = workflow_grammar([0, 1], 2, max_subtask_chars=24, opened=True,
                               skeleton=((0, 1), ("[]", "all")), subtasks=texts[:2])
    assert accepts(grammar, f'0, 1]\nsubtasks = ["{texts[0]}", "{texts[1]}"]\n'
                            'access_list = [[], "all"]')
    assert accepts(grammar, fixed_workflow(((0, 1), ("[]", "all")), texts[:2]))  # as written
    free = workflow_grammar([0], 1, max_subtask_chars=24, opened=True)
    for text in texts:  # every one also reads as a subtask the policy could have written
        assert accepts(free, f'0]\nsubtasks = ["{text}"]\naccess_list = [[]]'), text


def _plan(ids: list[int]) -> str:
    """A workflow's text after ``model_id = [``: one subtask per id, later steps see all."""
    subtasks = ", ".join(f'"Step number {k}."' for k in range(len(ids)))
    access = ", ".join(["[]"] + ['"all"'] * (len(ids) - 1))
    return f"{', '.join(map(str, ids))}]\nsubtasks = [{subtasks}]\naccess_list = [{access}]"


@pytest.mark.parametrize("access_mode", ["binary", "indices"])
@pytest.mark.parametrize("opened", [False, True])
def test_last_ids_hold_the_last_step_to_workers_that_can_act(access_mode, opened):
    """A request with tools where only workers 1 and 3 can act: at every step count the last
    id is one of them, earlier steps any worker; what it admits reads back with that last
    worker."""
    max_steps = 3
    grammar = workflow_grammar([0, 1, 2, 3], max_steps, opened=opened, last_ids=[3, 1])
    head = "" if opened else " plan it\nmodel_id = ["
    for n in range(1, max_steps + 1):
        for last in range(4):
            ids = [0, 3, 2][:n - 1] + [last]
            admitted = accepts(grammar, head + _plan(ids))
            assert admitted == (last in (1, 3)), ids
            if admitted:
                wf = parse_workflow("model_id = [" + _plan(ids), num_workers=4,
                                    max_steps=max_steps, access_mode=access_mode)
                assert [s.worker for s in wf.steps] == ids
    assert not accepts(grammar, head + _plan([1, 3, 0, 1]))  # still at most max_steps


def test_last_ids_of_every_worker_or_none_leave_the_grammar_as_it_was():
    for kw in ({}, {"opened": True}, {"allow_empty": True},
               {"prices": {0: 0.001, 1: 0.002}, "budget": 0.003}):
        plain = workflow_grammar([0, 1], 3, **kw)
        assert workflow_grammar([0, 1], 3, last_ids=None, **kw) == plain
        assert workflow_grammar([0, 1], 3, last_ids=[1, 0, 1], **kw) == plain
    for bad in ([], [2], [0, 2]):
        with pytest.raises(ValueError, match="last step's ids"):
            workflow_grammar([0, 1], 3, last_ids=bad)


def test_last_ids_with_a_budget_and_a_skeleton():
    """Held to a budget as well: the plan fits it and ends on a worker that can act; when no
    such worker fits, the cheapest of them alone. A skeleton must end on one of them."""
    prices = {0: 0.001, 1: 0.004, 2: 0.002}
    held = workflow_grammar([0, 1, 2], 3, opened=True, prices=prices, budget=0.005,
                            last_ids=[1, 2])
    for ids, fits in (([0, 1], True), ([1], True), ([0, 0, 2], True), ([2, 1], False),
                      ([1, 0], False), ([0], False), ([0, 0, 1], False)):
        assert accepts(held, _plan(ids)) == fits, ids
    broke = workflow_grammar([0, 1, 2], 3, opened=True, prices=prices, budget=0.0015,
                             last_ids=[1, 2])
    assert accepts(broke, _plan([2])) and not accepts(broke, _plan([0]))
    assert not accepts(broke, _plan([1]))
    skeleton = ((0, 2), ("[]", "all"))
    assert accepts(workflow_grammar([0, 1, 2], 2, opened=True, skeleton=skeleton,
                                    last_ids=[2]), _plan([0, 2]))
    with pytest.raises(ValueError, match="skeleton's last id"):
        workflow_grammar([0, 1, 2], 2, skeleton=skeleton, last_ids=[1])


@pytest.mark.parametrize("opened", [False, True])
def test_a_grammar_with_last_ids_compiles_for_llama_cpp_and_llguidance(opened):
    from llama_cpp import LlamaGrammar

    from podium.llm import grammar_mask

    llguidance = pytest.importorskip("llguidance")
    for kw in ({}, {"prices": {0: 0.001, 1: 0.004, 2: 0.002}, "budget": 0.005}):
        text = workflow_grammar([0, 1, 2], 3, opened=opened, last_ids=[2], **kw)
        LlamaGrammar.from_string(text, verbose=False)
        assert llguidance.LLMatcher.validate_grammar(grammar_mask.lark_of(text)) == ""
