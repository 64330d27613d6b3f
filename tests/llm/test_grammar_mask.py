"""The embedded backend holds a grammar with llguidance's token mask (`podium.llm.grammar_mask`):
every workflow grammar podium builds compiles for it, it admits what the GBNF admits (with the
bundled model's real vocabulary), and a grammar-held Conductor writes a workflow that parses."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from podium.conductor import Conductor
from podium.conductor.grammar import workflow_grammar
from podium.conductor.prompt import PoolEntry, conductor_messages
from podium.conductor.view import make_view
from podium.config import ModelSpec, RunSettings, load_pool
from podium.errors import WorkerError
from podium.llm import grammar_mask

pytest.importorskip("llama_cpp")
llguidance = pytest.importorskip("llguidance")

WORKFLOW = 'model_id = [0, 1]\nsubtasks = ["Add the two numbers.", "Check the sum twice."]\n' \
           'access_list = [[], "all"]'
GRAMMARS = {
    "three reasoning lines": workflow_grammar([0, 1], 3),
    "one reasoning line": workflow_grammar([0, 2], 2, max_reason_lines=1),
    "opened": workflow_grammar([0, 1, 2], 3, opened=True),
    "recursion round": workflow_grammar([0, 1], 3, allow_empty=True),
    "skeleton": workflow_grammar([0, 1, 2], 2, opened=True, skeleton=((2, 0), ("[]", "all"))),
    "skeleton and subtasks": workflow_grammar(
        [0, 1, 2], 2, opened=True, skeleton=((2, 0), ("[]", "all")),
        subtasks=["Count the 'a' {0,0}", "What is 3 + 4?"]),
    "budget": workflow_grammar([0, 1, 2], 2, prices={0: 0.004, 1: 0.001, 2: 0.002},
                               budget=0.003),
}


@pytest.mark.parametrize("name", list(GRAMMARS))
def test_every_workflow_grammar_compiles_to_one_exact_lexeme(name: str) -> None:
    """Each grammar becomes a single lexeme (matched exactly, see the module docstring);
    a literal subtask that reads like a repetition is left as it is."""
    lark = grammar_mask.lark_of(GRAMMARS[name])
    assert llguidance.LLMatcher.validate_grammar(lark) == ""
    assert [line for line in lark.splitlines() if line.startswith("start")] == \
        ["start: HELD_ROOT"]
    if name == "skeleton and subtasks":
        assert "Count the 'a' {0,0}" in lark


def test_a_grammar_without_a_root_is_refused() -> None:
    with pytest.raises(ValueError, match="no root rule"):
        grammar_mask.lark_of('start ::= "a"')


@pytest.fixture(scope="module")
def llm():
    from podium.llm.embedded import ModelStore, bundled_gguf

    try:
        path = bundled_gguf()
    except Exception:
        pytest.skip("the embedded model is not installed")
    return ModelStore().get(path, ModelSpec(name="m", backend="embedded").n_ctx).llm


def admits(masks: grammar_mask.GrammarMasks, llm, grammar: str, text: str) -> bool:
    """Whether the mask lets the model write `text` token by token, then end."""
    mask = masks.mask(grammar)
    ids = [llm.token_bos()]  # stands for the prompt
    for token in [*llm.tokenize(text.encode(), add_bos=False), llm.token_eos()]:
        scores = np.zeros(llm.n_vocab(), dtype=np.float32)
        mask(np.array(ids), scores)
        assert mask.error is None
        if scores[token] == -np.inf:
            return False
        ids.append(token)
    return True


def test_the_mask_admits_what_the_gbnf_admits_and_no_more(llm) -> None:
    masks = grammar_mask.GrammarMasks(llm)
    three, one = GRAMMARS["three reasoning lines"], GRAMMARS["one reasoning line"]
    # fewer reasoning lines than allowed (a greedy lexer would read the lists as a line)
    assert admits(masks, llm, three, "Two workers.\n" + WORKFLOW)
    assert admits(masks, llm, three, " First.\nSecond.\nThird.\n" + WORKFLOW)
    assert not admits(masks, llm, three, "1.\n2.\n3.\n4.\n" + WORKFLOW)
    assert admits(masks, llm, one, "Plan.\n" + WORKFLOW.replace("1", "2", 1))
    assert not admits(masks, llm, one, "Plan.\n" + WORKFLOW)  # id 1 is not shown
    assert not admits(masks, llm, three, "Plan.\n" + WORKFLOW.replace("Add", "Add:"))
    assert not admits(masks, llm, three, "Plan.\n" + WORKFLOW[:-1])  # no end before the last ]
    assert admits(masks, llm, GRAMMARS["recursion round"],
                  "Keep it.\nmodel_id = []\nsubtasks = []\naccess_list = []")


def test_a_refused_token_ends_generation_and_is_reported(llm) -> None:
    """llama.cpp's callback would swallow an exception: the mask keeps it and allows only the
    end token."""
    mask = grammar_mask.GrammarMasks(llm).mask(GRAMMARS["opened"])
    scores = np.zeros(llm.n_vocab(), dtype=np.float32)
    mask(np.array([llm.token_bos()]), scores)
    refused = llm.tokenize(b"x", add_bos=False)[0]
    assert scores[refused] == -np.inf
    mask(np.array([llm.token_bos(), refused]), scores)
    assert mask.error is not None
    assert np.isfinite(scores).sum() == 1 and scores[llm.token_eos()] == 0.0


def conductor(temperature: float):
    from podium.llm.embedded import EmbeddedClient, ModelStore

    spec = ModelSpec(name="conductor", backend="embedded", model="smollm2",
                     temperature=temperature, max_tokens=200, seed=3)
    # the compact prompt (142 tokens here) opens the lists itself: the grammar has no reasoning
    settings = RunSettings(prompt="compact", fewshots="none", max_steps=2, max_subtask_chars=50)
    view = make_view(load_pool(None).workers)  # the default pool's workers, not called
    return Conductor(EmbeddedClient(spec, ModelStore()), view, settings, constrained=True)


def test_a_grammar_held_conductor_writes_a_workflow_that_parses(llm, monkeypatch) -> None:
    """One short real generation, held by llguidance's mask (not llama.cpp's sampler)."""
    masked: list[str] = []
    make = grammar_mask.GrammarMasks.mask
    monkeypatch.setattr(grammar_mask.GrammarMasks, "mask",
                        lambda self, grammar: masked.append(grammar) or make(self, grammar))
    turn = asyncio.run(conductor(1.2).write("Plan a picnic for six people."))
    assert turn.error is None and turn.workflow is not None, turn.parse_detail
    assert 1 <= len(turn.workflow) <= 2 and masked


def test_a_grammar_that_does_not_compile_is_a_worker_error(llm) -> None:
    from podium.llm.embedded import EmbeddedClient, ModelStore

    client = EmbeddedClient(ModelSpec(name="c", backend="embedded", model="smollm2"), ModelStore())
    messages = conductor_messages("Hi?", [PoolEntry(0)], max_steps=1)
    with pytest.raises(WorkerError, match="grammar"):
        asyncio.run(client.chat(messages, grammar='root ::= "a" (('))
