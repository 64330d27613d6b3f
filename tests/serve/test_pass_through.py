"""`podium serve --pass-through`: each worker is also a model of its own, asked directly, so a
single worker can be evaluated served the same way as the team (the paper's OOD protocol)."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from serve_helpers import KEY, POOL, ThreadServer, auth, eval_blackbox

from podium.errors import ConfigError

Q = "What is 2 + 5?"


@pytest.fixture(scope="module")
def through(pool_file, tmp_path_factory, logs):
    traces = tmp_path_factory.mktemp("through") / "traces"
    with ThreadServer(pool_file, traces, keys=(KEY,), max_concurrency=8,
                      pass_through=True) as srv:
        yield srv


@pytest.fixture()
def client(through):
    return openai.OpenAI(base_url=f"{through.base}/v1", api_key=KEY, max_retries=0)


def ask(client, model: str, **extra):
    return client.chat.completions.create(model=model, messages=[{"role": "user",
                                                                  "content": Q}], **extra)


def test_every_worker_is_listed_after_the_team(client):
    assert [m.id for m in client.models.list()] == ["podium", "adder", "zero", "slow", "down"]
    assert client.models.retrieve("zero").id == "zero"


def test_a_worker_model_answers_alone_with_one_call_and_its_own_trace(client, through):
    team = ask(client, "podium")  # the Conductor sends it to the adder
    alone = ask(client, "zero", extra_body={"return_trace_id": True})
    assert team.choices[0].message.content == "<answer>7</answer>"
    assert alone.choices[0].message.content == "<answer>0</answer>" and alone.model == "zero"
    tid = alone.model_extra["podium_trace_id"]
    with httpx.Client(base_url=through.base, trust_env=False) as http:
        trace = http.get(f"/v1/traces/{tid}", headers=auth()).json()
    assert trace["model"] == "zero" and trace["used"]["calls"] == 1
    [step] = trace["steps"]
    assert step["worker_name"] == "zero" and trace["workflow"][0]["worker"] == "zero"
    assert step["messages"] == [{"role": "user", "content": Q}]  # the bare question


def test_a_worker_model_gets_a_conversations_earlier_turns_as_turns(client, through):
    turns = [{"role": "developer", "content": "Answer in tags."},
             {"role": "user", "content": "What is 1 + 1?"},
             {"role": "assistant", "content": "<answer>2</answer>"},
             {"role": "user", "content": Q}]
    reply = client.chat.completions.create(model="adder", messages=turns,
                                           extra_body={"return_trace_id": True})
    assert reply.choices[0].message.content == "<answer>7</answer>"  # the last question's
    with httpx.Client(base_url=through.base, trust_env=False) as http:
        trace = http.get(f"/v1/traces/{reply.model_extra['podium_trace_id']}",
                         headers=auth()).json()
    [step] = trace["steps"]
    assert step["messages"] == [{"role": "system", "content": "Answer in tags."}, *turns[1:]]


def test_a_worker_model_streams_and_speaks_the_responses_api(client):
    pieces = [c.choices[0].delta.content for c in ask(client, "adder", stream=True)
              if c.choices and c.choices[0].delta.content]
    assert "".join(pieces) == "<answer>7</answer>"
    reply = client.responses.create(model="adder", input=Q)
    assert reply.output_text == "<answer>7</answer>" and reply.model == "adder"


def test_team_options_are_refused_for_a_worker_model(client):
    with pytest.raises(openai.BadRequestError) as err:
        ask(client, "zero", extra_body={"workers": ["adder"]})
    assert "options of the 'podium' model" in err.value.message
    with pytest.raises(openai.NotFoundError) as err:
        ask(client, "nobody")
    assert "'adder'" in err.value.message and "asked directly" in err.value.message


def test_a_failing_worker_model_is_a_gateway_error(client):
    with pytest.raises(openai.APIStatusError) as err:
        ask(client, "down")
    assert err.value.status_code == 502


def test_without_the_flag_workers_are_not_models(client, server):
    plain = openai.OpenAI(base_url=f"{server.base}/v1", api_key=KEY, max_retries=0)
    assert [m.id for m in plain.models.list()] == ["podium"]
    with pytest.raises(openai.NotFoundError) as err:
        ask(plain, "zero")
    assert "serves one model, 'podium'" in err.value.message


def test_a_worker_named_podium_cannot_be_passed_through(tmp_path):
    pool = tmp_path / "pool.toml"
    pool.write_text(POOL.replace('name = "zero"', 'name = "podium"'))
    with pytest.raises(ConfigError, match="rename it"):
        ThreadServer(pool, tmp_path / "t", keys=(KEY,), pass_through=True)


def test_eval_the_team_next_to_one_worker_served_the_same_way(through, tmp_path):
    data = tmp_path / "sums.jsonl"
    data.write_text("".join(json.dumps({"question": f"What is {i} + {i + 1}?",
                                        "answer": str(2 * i + 1)}) + "\n" for i in range(3)))
    scores = {}
    for model in ("podium", "zero"):
        proc = eval_blackbox(f"openai:{through.base}/v1:{model}", data, tmp_path / model,
                             env={"PODIUM_SYSTEM_API_KEY": KEY})
        assert proc.returncode == 0, proc.stdout + proc.stderr
        scores[model] = json.loads((tmp_path / model / "summary.json").read_text())["accuracy"]
    assert scores == {"podium": 1.0, "zero": 0.0}  # "What is 0 + 1?" is 1, never 0
