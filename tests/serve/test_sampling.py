"""OpenAI's sampling fields through `podium serve`: validated as OpenAI validates them (a 400
naming the field), refused where a team cannot honour them, and honoured by the step that
writes the answer. The team is a scripted Conductor and worker behind a real OpenAI-compatible
server, which records every request body it gets: the test reads what each step was sent."""

from __future__ import annotations

import httpx
import openai
import pytest
from serve_helpers import KEY, ThreadServer, auth

from podium.testing.scripted_server import ScriptedServer

# two steps on the same worker: only the second writes the answer
PLAN = 'model_id = [0, 0]\nsubtasks = ["Draft it.", "Answer."]\naccess_list = [[], "all"]'


@pytest.fixture(scope="module")
def team(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sampling")
    with ScriptedServer(latency=0.0, reply_by_model={"conductor": PLAN}) as scripted:
        pool = folder / "pool.toml"
        pool.write_text(f"""
[conductor]
backend = "openai"
model = "conductor"
base_url = "{scripted.base_url}"
constrained = false
temperature = 0.9

[[workers]]
name = "writer"
backend = "openai"
model = "writer"
base_url = "{scripted.base_url}"
temperature = 0.7
max_tokens = 100
stop = ["END"]
retries = 0

[run]
cache = false
fewshots = "none"
""")
        with ThreadServer(pool, folder / "traces", keys=(KEY,)) as srv:
            yield srv, scripted


def ask(srv, scripted, path: str = "/v1/chat/completions", **body
        ) -> tuple[httpx.Response, dict[str, list]]:
    """The server's reply, and the params of every call the team made for it, by model."""
    scripted.reset()
    if path.endswith("responses"):
        payload = {"model": "podium", "input": "What is 2 + 2?", **body}
    else:
        payload = {"model": "podium", "messages": [{"role": "user", "content": "What is 2 + 2?"}],
                   **body}
    reply = httpx.post(srv.base + path, json=payload, headers=auth(), timeout=30,
                       trust_env=False)
    calls: dict[str, list] = {}
    for entry in scripted.stats()["log"]:
        calls.setdefault(entry["model"], []).append(entry["params"])
    return reply, calls


def test_sampling_fields_reach_the_answer_step_only(team):
    srv, scripted = team
    reply, calls = ask(srv, scripted, temperature=0.1, top_p=0.5, seed=7, stop="###",
                       max_tokens=5, user="alice", return_trace_id=True)
    assert reply.status_code == 200, reply.text
    (conductor,) = calls["conductor"]
    draft, answer = calls["writer"]
    assert conductor["temperature"] == 0.9 and "seed" not in conductor  # the pool's own
    assert draft["temperature"] == 0.7 and draft["max_tokens"] == 100
    assert draft["stop"] == ["END"] and "seed" not in draft and "top_p" not in draft
    assert answer["temperature"] == 0.1 and answer["top_p"] == 0.5 and answer["seed"] == 7
    assert answer["stop"] == ["END", "###"]  # added to the worker's own
    assert answer["max_tokens"] == 5
    trace = httpx.get(f"{srv.base}/v1/traces/{reply.json()['podium_trace_id']}",
                      headers=auth(), trust_env=False).json()
    assert trace["sampling"] == {"temperature": 0.1, "top_p": 0.5, "seed": 7, "stop": "###",
                                 "max_tokens": 5}
    assert trace["user"] == "alice"


def test_max_tokens_never_raises_the_workers_own_limit(team):
    srv, scripted = team
    reply, calls = ask(srv, scripted, max_completion_tokens=5000)
    assert reply.status_code == 200, reply.text
    assert calls["writer"][-1]["max_tokens"] == 100


def test_the_responses_api_honours_its_fields(team):
    srv, scripted = team
    reply, calls = ask(srv, scripted, "/v1/responses", temperature=0, top_p=1,
                       max_output_tokens=3)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["temperature"] == 0 and body["top_p"] == 1 and body["max_output_tokens"] == 3
    answer = calls["writer"][-1]
    assert answer["temperature"] == 0 and answer["top_p"] == 1 and answer["max_tokens"] == 3


@pytest.mark.parametrize("field, value, code", [
    ("temperature", "hot", None), ("temperature", True, None), ("temperature", 2.5, None),
    ("temperature", -0.1, None), ("top_p", 1.5, None), ("top_p", "0.5", None),
    ("seed", 1.5, None), ("seed", "7", None), ("stop", 5, None), ("stop", ["a", 1], None),
    ("stop", ["a", "b", "c", "d", "e"], None), ("max_tokens", 0, None),
    ("presence_penalty", 3, None), ("frequency_penalty", "x", None),
    ("logprobs", "yes", None), ("top_logprobs", 21, None), ("user", 5, None),
    ("logit_bias", {"50256": "x"}, None),
    ("presence_penalty", 0.5, "unsupported_value"), ("frequency_penalty", -1, "unsupported_value"),
    ("logit_bias", {"50256": -100}, "unsupported_value"), ("logprobs", True, "unsupported_value"),
    ("top_logprobs", 2, "unsupported_value"),
])
def test_a_bad_or_unhonoured_sampling_field_is_a_400_naming_it(team, field, value, code):
    srv, scripted = team
    reply, calls = ask(srv, scripted, **{field: value})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == field and field in error["message"], error
    assert error["code"] == (code or error["code"])
    assert not calls  # refused before any model was asked


@pytest.mark.parametrize("field, value", [("temperature", "hot"), ("top_p", -1),
                                          ("max_output_tokens", 0), ("top_logprobs", 3)])
def test_the_responses_api_validates_its_sampling_fields(team, field, value):
    srv, scripted = team
    reply, calls = ask(srv, scripted, "/v1/responses", **{field: value})
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == field
    assert not calls


def test_the_defaults_openai_sends_are_accepted(team):
    """What the openai SDK and common clients send as "no preference" is no refusal."""
    srv, scripted = team
    client = openai.OpenAI(base_url=f"{srv.base}/v1", api_key=KEY, max_retries=0)
    reply = client.chat.completions.create(
        model="podium", messages=[{"role": "user", "content": "What is 2 + 2?"}],
        presence_penalty=0, frequency_penalty=0, logit_bias={}, logprobs=False, n=1,
        top_logprobs=0, stop=None, temperature=1, top_p=1)
    assert reply.choices[0].message.content
