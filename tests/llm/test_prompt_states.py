"""The embedded model keeps the prompts it has read (`podium.llm.prompt_states`): a later prompt
that starts like a kept one, after other prompts have taken the context, reads only its own
end, and continues exactly as if it had been read from scratch. Real llama.cpp, the bundled
model."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

pytest.importorskip("llama_cpp")

from podium.config import ModelSpec  # noqa: E402
from podium.llm import embedded  # noqa: E402
from podium.llm.prompt_states import PromptStates  # noqa: E402

N_CTX = 1280  # a size no other test loads: the model is this module's own
TEAM = ("You coordinate a team. " + " ".join(
    f"Worker {i} is good at {topic}." for i, topic in enumerate(
        ["sums", "words", "code", "facts", "letters", "logic"] * 2)) + "\n\n")
SHORT = TEAM[:120]


@pytest.fixture(scope="module")
def model():
    try:
        path = embedded.bundled_gguf()
    except Exception:
        pytest.skip("the embedded model is not installed")
    loaded = embedded.ModelStore().get(path, N_CTX, 1)
    loaded.states = PromptStates(min_tokens=32)  # prompts short enough to read quickly
    return loaded


def read(model, messages) -> int:
    """Tokens llama.cpp evaluates for one greedy 4-token call of the embedded client."""
    spec = ModelSpec(name="smol", backend="embedded", model="smollm2", n_ctx=N_CTX,
                     n_threads=1, max_tokens=4, temperature=0.0)
    client = embedded.EmbeddedClient(spec, embedded.ModelStore())
    evaluated = []
    llm_eval = model.llm.eval
    model.llm.eval = lambda tokens: evaluated.append(len(tokens)) or llm_eval(tokens)
    try:
        asyncio.run(client.chat(messages))
    finally:
        del model.llm.eval
    return sum(evaluated)


def question(text: str) -> list[dict]:
    return [{"role": "user", "content": TEAM + text}]


def test_a_prompt_that_starts_like_a_kept_one_reads_only_its_end(model):
    first = read(model, question("What is 2 + 5?"))
    assert first > 100 and len(model.states) >= 1
    read(model, [{"role": "user", "content": "Reverse the word 'banana'. " * 8}])
    restored = model.states.restored
    again = read(model, question("Spell the word 'cat' backwards, please."))
    assert model.states.restored == restored + 1
    assert again < 30  # the question's end, not the team's ~100 tokens


def test_a_restored_prompt_continues_as_one_read_from_scratch(model):
    llm = model.llm
    text = model.format(messages=question("Which worker should add 17 and 25?")).prompt
    tokens = ([llm.token_bos()] if llm._model.add_bos_token() else []) + llm.tokenize(
        text.encode(), add_bos=False, special=True)
    read(model, question("What is 2 + 5?"))  # the team's start, kept
    read(model, [{"role": "user", "content": "Something else entirely. " * 12}])
    restored = model.states.restored
    embedded._prefill(model, text, embedded.threading.Event())
    assert model.states.restored == restored + 1  # this prompt's start came from a kept state
    llm.eval(tokens[-1:])
    kept = np.array(llm.scores[llm.n_tokens - 1])
    states, model.states = model.states, PromptStates(budget_bytes=0)
    try:
        llm.reset()
        embedded._prefill(model, text, embedded.threading.Event())
        assert llm.n_tokens == len(tokens) - 1
        llm.eval(tokens[-1:])
        fresh = np.array(llm.scores[llm.n_tokens - 1])
    finally:
        model.states = states
    assert np.abs(kept - fresh).max() < 1e-2  # logits span about +-30
    assert kept.argmax() == fresh.argmax()


def test_kept_states_stay_within_their_budget_least_recently_used_out(model):
    llm = model.llm

    def prompt(text: str | list[int]) -> list[int]:
        llm.reset()
        tokens = (text if isinstance(text, list)
                  else llm.tokenize(text.encode(), add_bos=False, special=True))
        llm.eval(tokens)
        return tokens

    probe = PromptStates(min_tokens=8)
    prompt(SHORT)
    probe.save(llm)
    one = probe.bytes
    states = PromptStates(budget_bytes=int(2.5 * one), min_tokens=8)
    a = prompt(SHORT)
    states.save(llm)
    prompt(SHORT.replace("You", "We"))
    states.save(llm)
    assert len(states) == 2
    assert states.restore(llm, a + [13], held=0) == len(a)  # a, used: now the most recent
    prompt(SHORT.replace("You", "They"))
    states.save(llm)
    assert len(states) == 2 and states.bytes <= states.budget_bytes
    assert states.restore(llm, a, held=0) == len(a)  # a stayed; "We" went
    longer = prompt(a + llm.tokenize(b"And one more sentence.", add_bos=False))
    states.save(llm)  # extends a: a is dropped, the longer one kept
    assert len(states) == 2
    assert states.restore(llm, longer, held=0) == len(longer)
    assert states.restore(llm, [1, 2, 3], held=0) == 0  # nothing shared: nothing restored
