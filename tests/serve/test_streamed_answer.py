"""`podium serve` streams the answer as the worker writing it produces it: a scripted Conductor
and worker behind a real OpenAI-compatible server that streams its replies in 4-character
pieces, a real podium server, and the openai SDK reading both streaming APIs."""

from __future__ import annotations

import openai
import pytest
from serve_helpers import KEY, ThreadServer

from podium.testing.scripted_server import ScriptedServer

PLAN = 'model_id = [0, 0]\nsubtasks = ["Draft it.", "Answer."]\naccess_list = [[], "all"]'
ANSWER = "The answer is four: two and two make four."


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    folder = tmp_path_factory.mktemp("streamed")
    with ScriptedServer(latency=0.0, reply_by_model={"conductor": PLAN, "writer": ANSWER}
                        ) as scripted:
        pool = folder / "pool.toml"
        pool.write_text(f"""
[conductor]
backend = "openai"
model = "conductor"
base_url = "{scripted.base_url}"
constrained = false

[[workers]]
name = "writer"
backend = "openai"
model = "writer"
base_url = "{scripted.base_url}"

[run]
cache = false
fewshots = "none"
""")
        with ThreadServer(pool, folder / "traces", keys=(KEY,)) as srv:
            yield openai.OpenAI(base_url=srv.base + "/v1", api_key=KEY, max_retries=0)


def test_chat_completions_stream_the_answer_in_the_workers_pieces(served):
    kinds, content = [], []
    for chunk in served.chat.completions.create(
            model="podium", messages=[{"role": "user", "content": "What is 2 + 2?"}],
            stream=True):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        if getattr(delta, "reasoning_content", None):
            kinds.append("progress")
        if delta.content:
            kinds.append("answer")
            content.append(delta.content)
    assert "".join(content) == ANSWER
    assert len(content) >= len(ANSWER) // 4  # the worker's pieces, not the answer at the end
    assert kinds[0] == "progress" and "progress" not in kinds[kinds.index("answer"):]


def test_the_responses_api_streams_the_answer_in_the_workers_pieces(served):
    types, deltas, done = [], [], None
    for event in served.responses.create(model="podium", input="What is 2 + 2?", stream=True):
        types.append(event.type)
        if event.type == "response.output_text.delta":
            deltas.append(event.delta)
        if event.type == "response.completed":
            done = event.response
    assert "".join(deltas) == ANSWER == done.output_text
    assert len(deltas) >= len(ANSWER) // 4
    # the reasoning item closes before the message item opens
    assert types.index("response.output_item.done") < types.index("response.content_part.added")
    assert [e for e in types if e == "response.reasoning_text.delta"]
    assert types[-1] == "response.completed"


def test_without_streaming_the_answer_is_whole(served):
    reply = served.chat.completions.create(
        model="podium", messages=[{"role": "user", "content": "What is 2 + 2?"}])
    assert reply.choices[0].message.content == ANSWER
