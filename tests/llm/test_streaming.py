"""A streamed reply (`on_text`) through the real client stack against the scripted
OpenAI-compatible server over HTTP: the text arrives in pieces and the pieces are the reply;
errors keep their kinds; a call is retried only while none of its text has been passed on;
a cached reply is whole; secrets are masked even when a key is split across two pieces."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from support import registered_alone

from podium.config import ModelSpec
from podium.errors import WorkerError
from podium.llm.base import Message
from podium.llm.openai_compat import OpenAICompatClient
from podium.llm.reliable import ReliableClient
from podium.redact import ScrubbedStream, scrub
from podium.testing import ScriptedServer
from podium.workflow.execute import AnswerText, Team, execute_workflow
from podium.workflow.types import Workflow

HELLO: list[Message] = [{"role": "user", "content": "say hello to the whole wide world"}]
SECRET = "sk-podium-stream-SECRET-0123"


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer(latency=0.0, faults_by_model={"trunc1": "truncatedx1",
                                                      "r500": "500x1"},
                        reply_by_model={"leaky": f"the key is {SECRET} ok"}) as srv:
        yield srv


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


def client(server: ScriptedServer, model: str, **kwargs: Any) -> ReliableClient:
    spec = ModelSpec(name=model, backend="openai", model=model, base_url=server.base_url,
                     backoff_s=0.01, backoff_max_s=0.02, **kwargs)
    return ReliableClient(OpenAICompatClient(spec), spec)


def streamed(server: ScriptedServer, model: str, **kwargs: Any):
    pieces: list[str] = []

    async def main():
        c = client(server, model, **kwargs)
        try:
            return await c.chat(HELLO, on_text=pieces.append)
        finally:
            await c.aclose()

    server.reset()
    return asyncio.run(main()), pieces


@pytest.mark.parametrize("transport", ["aiohttp", "openai-sdk"])
def test_the_pieces_are_the_reply_and_usage_comes_with_it(server, transport):
    resp, pieces = streamed(server, "echo", transport=transport)
    assert len(pieces) > 3 and "".join(pieces) == resp.text
    assert resp.text.startswith("[echo] ") and resp.finish_reason == "stop"
    assert resp.completion_tokens == len(resp.text.split()) and resp.prompt_tokens > 0


def test_a_failure_before_any_text_is_retried(server):
    resp, pieces = streamed(server, "r500")
    assert [r["kind"] for r in resp.retries] == ["server"] and "".join(pieces) == resp.text


def test_a_stream_cut_after_some_text_is_an_error_and_not_retried(server):
    with pytest.raises(WorkerError) as caught:
        streamed(server, "trunc1")
    assert caught.value.kind == "server" and "stream ended" in str(caught.value)
    assert server.stats()["overall"]["requests"] == 1  # no second attempt: text was sent


def test_a_key_split_across_pieces_is_masked(server, monkeypatch):
    registered_alone(monkeypatch, SECRET)
    resp, pieces = streamed(server, "leaky")
    out: list[str] = []
    scrubbed = ScrubbedStream(out.append)
    for piece in pieces:  # 4-character pieces: the key spans several
        scrubbed.add(piece)
    scrubbed.close()
    assert SECRET not in "".join(out) and "".join(out) == scrub("".join(pieces))
    assert "".join(out) == "the key is *** ok" == resp.text


def test_the_executor_streams_only_the_answer_step(server):
    spec = ModelSpec(name="echo", backend="openai", model="echo", base_url=server.base_url)
    events: list[tuple[str, Any]] = []

    async def main():
        team = Team([OpenAICompatClient(spec)])
        try:
            flow = Workflow.of([(0, "Draft.", ()), (0, "Answer.", "all")])
            return await execute_workflow(flow, "What is 2 + 2?", team, stream_answer=True,
                                          on_event=lambda k, o: events.append((k, o)))
        finally:
            await team.clients[0].aclose()

    run = asyncio.run(main())
    texts = [o for k, o in events if k == "text"]
    assert texts and all(isinstance(t, AnswerText) and t.step.index == 1 for t in texts)
    assert "".join(t.text for t in texts) == run.answer
    # every piece came before the answer step finished
    finished = next(i for i, (k, o) in enumerate(events) if k == "finished" and o.index == 1)
    assert max(i for i, (k, _) in enumerate(events) if k == "text") < finished


def test_ordinary_text_passes_at_once_and_only_a_possible_key_start_waits(monkeypatch):
    registered_alone(monkeypatch, SECRET)
    out: list[str] = []
    scrubbed = ScrubbedStream(out.append)
    for piece in ("The ", "answer ", "is four. "):
        scrubbed.add(piece)
    assert out == ["The ", "answer ", "is four. "]  # no lag behind a long registered key
    scrubbed.add("Key: " + SECRET[:6])  # could be a key's start: held
    assert out[-1] == "Key: "
    scrubbed.add(SECRET[6:] + " end")
    scrubbed.close()
    assert "".join(out) == "The answer is four. Key: *** end"
