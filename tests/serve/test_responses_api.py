"""`POST /v1/responses` over real HTTP: the official openai client (sync, async, streamed
events), raw httpx for the error cases, the function-worker pool for exact answers."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest
from serve_helpers import KEY, auth

Q = "What is 2 + 5?"


@pytest.fixture()
def client(server):
    return openai.OpenAI(base_url=f"{server.base}/v1", api_key=KEY, max_retries=0)


def test_text_in_text_out(client):
    reply = client.responses.create(model="podium", input=Q)
    assert reply.object == "response" and reply.status == "completed"
    assert reply.id.startswith("resp_") and reply.model == "podium"
    assert reply.output_text == "<answer>7</answer>"  # the pipeline's answer, as it is
    usage = reply.usage
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert reply.model_extra["podium"]["calls"] == 2


def test_messages_instructions_and_options(client):
    reply = client.responses.create(
        model="podium", instructions="Be terse.",
        input=[{"role": "user", "content": [{"type": "input_text", "text": Q}]}],
        extra_body={"workers": ["zero"], "return_trace_id": True})
    assert reply.output_text == "<answer>0</answer>"  # the sub-pool's only worker answered
    assert reply.model_extra["podium_trace_id"].startswith("tr-")


def test_async_client(server):
    async def main():
        aclient = openai.AsyncOpenAI(base_url=f"{server.base}/v1", api_key=KEY, max_retries=0)
        replies = await asyncio.gather(*(aclient.responses.create(model="podium", input=Q)
                                         for _ in range(3)))
        await aclient.close()
        return replies

    assert [r.output_text for r in asyncio.run(main())] == ["<answer>7</answer>"] * 3


def test_streamed_events(client):
    events = list(client.responses.create(model="podium", input=Q, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    reasoning = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    assert "Workflow: 1 step" in reasoning and "done:" in reasoning
    answer = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert answer == "<answer>7</answer>"
    final = events[-1].response
    assert final.output_text == answer and final.model_extra["podium"]["calls"] == 2
    assert final.usage.total_tokens == final.usage.input_tokens + final.usage.output_tokens
    assert kinds.index("response.output_text.delta") > kinds.index(
        "response.reasoning_text.done")


def test_the_stream_helper_gives_the_final_response(client):
    with client.responses.stream(model="podium", input=Q) as stream:
        text = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert text == final.output_text == "<answer>7</answer>"


def test_no_answer_is_an_error_json_and_streamed(client, http):
    resp = http.post("/v1/responses", headers=auth(),
                     json={"model": "podium", "input": Q, "workers": ["down"]})
    assert resp.status_code == 502 and resp.json()["error"]["code"] == "worker_failed"
    events = list(client.responses.create(model="podium", input=Q, stream=True,
                                          extra_body={"workers": ["down"]}))
    kinds = [e.type for e in events]
    assert "error" in kinds and kinds[-1] == "response.failed"
    assert "response.output_text.delta" not in kinds


@pytest.mark.parametrize(("payload", "param"), [
    ({"input": Q}, "model"),
    ({"model": "podium"}, "input"),
    ({"model": "podium", "input": []}, "input"),
    ({"model": "podium", "input": [{"type": "function_call_output", "output": "x"}]},
     "input.0.call_id"),
    ({"model": "podium", "input": [{"role": "user", "content": [{"type": "input_image"}]}]},
     "input.0.content.0.type"),
    ({"model": "podium", "input": [{"role": "assistant", "content": "hi"}]}, "input.0.role"),
    ({"model": "podium", "input": Q, "tools": [{"type": "web_search"}]}, "tools.0.type"),
    ({"model": "podium", "input": Q, "store": True}, "store"),  # no Response is kept
    ({"model": "podium", "input": Q, "max_output_tokens": 0}, "max_output_tokens"),
    ({"model": "podium", "input": Q, "workers": ["nobody"]}, "workers"),
])
def test_bad_requests_are_400(http, payload, param):
    resp = http.post("/v1/responses", headers=auth(), json=payload)
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["param"] == param


def test_store_false_is_answered(http):
    resp = http.post("/v1/responses", headers=auth(),
                     json={"model": "podium", "input": Q, "store": False})
    assert resp.status_code == 200, resp.text


def test_keys_and_models(server):
    with httpx.Client(base_url=server.base, trust_env=False) as raw:
        assert raw.post("/v1/responses", json={"model": "podium", "input": Q}).status_code \
            == 401
        other = raw.post("/v1/responses", headers=auth(),
                         json={"model": "gpt-x", "input": Q})
        assert other.status_code == 404 and other.json()["error"]["code"] == "model_not_found"
