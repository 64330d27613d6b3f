"""A served conversation with earlier turns: the step that writes the answer gets them as chat
turns, then its own message whose task is the last question alone; the Conductor and the other
steps get the conversation flattened into one question (`podium.serve.conversation`). A
one-message conversation is asked exactly as `Pipeline.ask` asks it.

The server is `create_app` under uvicorn in a thread; its workers are models of a real scripted
OpenAI-compatible server, its Conductor a Python function writing a fixed 2-step plan."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest
from support import planned, serving

from podium.config import pool_from_dict
from podium.pipeline import Pipeline, RunResult
from podium.serve.conversation import Message, question_of
from podium.testing import ScriptedServer

KEY = "sk-podium-multiturn-test-7c21"
TURNS = [{"role": "developer", "content": "You are terse."},
         {"role": "user", "content": "What is 2 + 2?"},
         {"role": "assistant", "content": "4"},
         {"role": "user", "content": "And times 3?"}]


class Planner:
    """A Conductor writing a fixed 2-step plan, keeping the prompts it was given."""

    def __init__(self) -> None:
        self.prompts: list[list[dict]] = []

    def __call__(self, messages: list[dict]) -> str:
        self.prompts.append(messages)
        return ('model_id = [0, 1]\nsubtasks = ["Solve it.", "Check and answer."]\n'
                'access_list = [[], "all"]')


def _pipeline(scripted: ScriptedServer, planner: Planner) -> Pipeline:
    return planned(pool_from_dict({
        "conductor": {"backend": "function", "function": "podium.testing.workers:one_step"},
        "workers": [{"name": name, "backend": "openai", "model": name,
                     "base_url": scripted.base_url, "backoff_s": 0.01}
                    for name in ("solver", "checker")],
        "run": {"cache": False}}, "multiturn.toml"), planner)


class Served:
    def __init__(self, scripted: ScriptedServer, planner: Planner, base: str) -> None:
        self.scripted, self.planner = scripted, planner
        self.http = httpx.Client(base_url=base, timeout=30, trust_env=False,
                                 headers={"Authorization": f"Bearer {KEY}"})

    def chat(self, messages: list[dict]) -> dict:
        resp = self.http.post("/v1/chat/completions", json={
            "model": "podium", "messages": messages, "return_trace_id": True})
        assert resp.status_code == 200, resp.text
        return resp.json()

    def steps(self, reply: dict) -> list[dict]:
        resp = self.http.get(f"/v1/traces/{reply['podium_trace_id']}")
        assert resp.status_code == 200, resp.text
        return resp.json()["steps"]

    def ask(self, question: str) -> tuple[list[list[dict]], list[dict]]:
        """`Pipeline.ask(question)` on a pipeline like the server's: what each step was sent,
        and the Conductor's prompt."""
        planner = Planner()

        async def go() -> RunResult:
            async with _pipeline(self.scripted, planner) as pipe:
                return await pipe.ask(question)

        result = asyncio.run(go())
        execution = result.rounds[-1].execution
        assert execution is not None and len(execution.steps) == 2
        return [[dict(m) for m in s.messages] for s in execution.steps], planner.prompts[0]


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[Served]:
    planner = Planner()
    with ScriptedServer(latency=0.0) as scripted, serving(
            _pipeline(scripted, planner), tmp_path_factory.mktemp("multiturn"), KEY,
            "podium multiturn server") as base:
        yield Served(scripted, planner, base)


@pytest.fixture(autouse=True)
def _fresh(served: Served) -> None:
    served.scripted.reset()
    served.planner.prompts.clear()


def _log(served: Served) -> dict[str, dict]:
    return {entry["model"]: entry for entry in served.scripted.stats()["log"]}


def test_the_answer_step_gets_the_earlier_turns_as_chat_turns(served: Served) -> None:
    flat = question_of([Message.model_validate(m) for m in TURNS])
    assert flat.startswith("The conversation so far, for context:\n<conversation>")
    first, last = served.steps(served.chat(TURNS))

    # the first step reads the flattened conversation as its task, in one user message
    assert first["messages"][0]["role"] == "user"
    assert f"<overall_task>\n{flat}\n</overall_task>" in first["messages"][0]["content"]
    assert [m["role"] for m in first["messages"]] == ["user", "assistant"]  # (the prefill)

    # the answer step: the earlier turns, then its own message with the last question only
    sent = last["messages"]
    assert sent[:3] == [{"role": "system", "content": "You are terse."},
                        {"role": "user", "content": "What is 2 + 2?"},
                        {"role": "assistant", "content": "4"}]
    own = sent[3]
    assert own["role"] == "user"
    assert "<overall_task>\nAnd times 3?\n</overall_task>" in own["content"]
    assert "<conversation>" not in own["content"] and "What is 2 + 2?" not in own["content"]
    assert "Check and answer." in own["content"]
    assert [m["role"] for m in sent[4:]] == ["assistant"]  # (the prefill)

    # what the workers received: the scripted server saw those user messages last
    log = _log(served)
    assert "<conversation>" in log["solver"]["last_user_message"]
    assert log["checker"]["last_user_message"] == own["content"]

    # the Conductor and the first step got what asking the flattened question gets
    [served_prompt] = served.planner.prompts
    direct, direct_prompt = served.ask(flat)
    assert first["messages"] == direct[0]
    assert direct[1][0]["content"] != own["content"]  # (that one holds the whole block)
    assert served_prompt == direct_prompt
    assert any(flat in str(m["content"]) for m in served_prompt)


def test_a_one_message_conversation_is_asked_as_podium_ask_asks_it(served: Served) -> None:
    question = "What is 6 * 7?"
    served_steps = served.steps(served.chat([{"role": "user", "content": question}]))
    [served_prompt] = served.planner.prompts
    direct, direct_prompt = served.ask(question)
    assert [s["messages"] for s in served_steps] == direct
    assert served_prompt == direct_prompt
    assert all(m["role"] != "system" for s in served_steps for m in s["messages"])


def test_the_responses_api_gives_the_answer_step_the_earlier_turns(served: Served) -> None:
    resp = served.http.post("/v1/responses", json={
        "model": "podium", "instructions": "You are terse.", "return_trace_id": True,
        "input": [{"role": "user", "content": "What is 2 + 2?"},
                  {"role": "assistant", "content": "4"},
                  {"role": "user", "content": "And times 3?"}]})
    assert resp.status_code == 200, resp.text
    first, last = served.steps(resp.json())
    assert "<conversation>" in first["messages"][0]["content"]
    assert [m["role"] for m in last["messages"]] == [
        "system", "user", "assistant", "user", "assistant"]
    assert "<overall_task>\nAnd times 3?\n</overall_task>" in last["messages"][3]["content"]
