"""What `podium serve` reads of a request with tools: both APIs' tool fields and tool messages
checked (each fault a 400 naming its field as OpenAI does), a request that passes refused as
not served yet, nothing spent either way; the kind of turn a conversation is; the session
seal of tool-call ids (round trip, forged / damaged / other key / expired refused, its key in
no error or log line), and `--processes` children sharing one key."""

from __future__ import annotations

import base64
import contextlib
import copy
import dataclasses
import json
import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest
from serve_helpers import KEY, ThreadServer, auth
from typer.testing import CliRunner

from podium.cli.main import app as cli_app
from podium.cli.serve import ARGS_ENV, ServeArgs, process_app
from podium.errors import ConfigError
from podium.redact import scrub
from podium.serve.conversation import Message
from podium.serve.errors import ApiError
from podium.serve.processes import listeners, supervise
from podium.serve.responses.request import parse_body as responses_body
from podium.serve.session import (
    SESSION_KEY_VAR,
    NotOurCall,
    SessionSeal,
    fernet_key,
    load_secret,
    opened_results,
)
from podium.serve.tools import Named, chat_tool_use, read_conversation
from podium.testing.workers import adder, one_step

SECRET = "podium-session-secret-for-tests-5d1f0a7c9b"
CALLS: list[str] = []  # every model call the test server's pool gets


def counted_conductor(messages: list[dict]) -> str:
    CALLS.append("conductor")
    return one_step(messages)


def counted_adder(messages: list[dict]) -> str:
    CALLS.append("adder")
    return adder(messages)


POOL = f"""\
[conductor]
backend = "function"
function = "{__name__}:counted_conductor"

[[workers]]
name = "adder"
backend = "function"
function = "{__name__}:counted_adder"

[run]
cache = false
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory, logs):
    folder = tmp_path_factory.mktemp("tool-requests")
    (folder / "pool.toml").write_text(POOL)
    with ThreadServer(folder / "pool.toml", folder / "traces", keys=(KEY,),
                      session_key=SECRET) as srv, \
            httpx.Client(base_url=srv.base, timeout=30, trust_env=False) as http:
        yield srv, http


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}, "strict": True}}
ASKED = {"role": "user", "content": "What is the weather in Paris?"}
CALLED = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_1", "type": "function",
     "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}
ANSWERED = {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 21 C"}
CONTINUED = [ASKED, CALLED, ANSWERED]


def chat(**fields) -> dict:
    return {"model": "podium", "messages": [ASKED], **fields}


def edited(messages: list[dict], path: str, value) -> list[dict]:
    """`messages` with the field at dotted `path` (e.g. "1.tool_calls.0.id") set."""
    out = copy.deepcopy(messages)
    *keys, last = [int(k) if k.isdigit() else k for k in path.split(".")]
    target = out
    for key in keys:
        target = target[key]
    target[last] = value
    return out


NO_ACTOR = "can act with tools"  # this pool has no worker with tools = true
NOT_MADE = "not a call this server made"

CHAT_400 = [
    (chat(tools=[WEATHER]), "tools", NO_ACTOR),
    (chat(tools=[WEATHER], messages=CONTINUED, tool_choice="required",
          parallel_tool_calls=False), "messages.2.tool_call_id", NOT_MADE),
    (chat(messages=CONTINUED), "messages.2.tool_call_id", NOT_MADE),
    (chat(tools=[edited([WEATHER], "0.function.name", "get weather")[0]]),
     "tools.0.function.name", "^[a-zA-Z0-9_-]{1,64}$"),
    (chat(tools=[edited([WEATHER], "0.function.name", "x" * 65)[0]]),
     "tools.0.function.name", "1 to 64"),
    (chat(tools=[WEATHER, WEATHER]), "tools.1.function.name", "also the name of tools.0"),
    (chat(tools=[edited([WEATHER], "0.function.parameters.properties.city.type", "text")[0]]),
     "tools.0.function.parameters", "not a valid JSON Schema"),
    (chat(tools=[edited([WEATHER], "0.function.parameters", {"type": "string"})[0]]),
     "tools.0.function.parameters", '"type": "object"'),
    (chat(tools=[edited([WEATHER], "0.function.strict", "yes")[0]]),
     "tools.0.function.strict", "valid boolean"),
    (chat(tools=[{"type": "code_interpreter"}]), "tools.0.type", "function tools only"),
    (chat(tools=[{"type": "function"}]), "tools.0.function", "Missing required"),
    (chat(tools={"type": "function"}), "tools", "a list"),
    (chat(tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "web"}}),
     "tool_choice.function.name", "'web' is not a declared tool (declared: get_weather)"),
    (chat(tools=[WEATHER], tool_choice="sometimes"), "tool_choice", '"required"'),
    (chat(tool_choice="required"), "tool_choice", "needs tools"),
    (chat(tools=[WEATHER], parallel_tool_calls="yes"), "parallel_tool_calls", "true or false"),
    (chat(tools=[WEATHER], messages=edited(CONTINUED, "1.tool_calls.0.function.arguments",
                                           "{city: Paris}")),
     "messages.1.tool_calls.0.function.arguments", "JSON text of an object"),
    (chat(tools=[WEATHER], messages=edited(CONTINUED, "1.tool_calls.0.function.arguments",
                                           '"Paris"')),
     "messages.1.tool_calls.0.function.arguments", "JSON text of an object"),
    (chat(tools=[WEATHER], messages=edited(CONTINUED, "1.tool_calls.0.function.name", "web")),
     "messages.1.tool_calls.0.function.name", "'web' is not a declared tool"),
    (chat(tools=[WEATHER], messages=edited(CONTINUED, "2.tool_call_id", "call_9")),
     "messages.2.tool_call_id", "matches no earlier tool call"),
    (chat(tools=[WEATHER], messages=[ASKED, ANSWERED]), "messages.1.tool_call_id",
     "matches no earlier tool call"),
    (chat(tools=[WEATHER], messages=[*CONTINUED, ANSWERED]), "messages.3.tool_call_id",
     "already answered by messages.2"),
    (chat(tools=[WEATHER], messages=[ASKED, CALLED, ANSWERED, CALLED, ANSWERED]),
     "messages.3.tool_calls.0.id", "also the id of a call in messages.1"),
    (chat(tools=[WEATHER], messages=[ASKED, {"role": "tool", "content": "Sunny"}]),
     "messages.1.tool_call_id", "Missing required"),
    (chat(tools=[WEATHER], messages=edited(CONTINUED, "1.tool_calls.0.type", "code")),
     "messages.1.tool_calls.0.type", "'function'"),
    (chat(tools=[WEATHER], messages=[{**ASKED, "tool_calls": CALLED["tool_calls"]}]),
     "messages.0.tool_calls", "only assistant messages"),
    # the kind of turn: neither a new question nor a continuation
    (chat(tools=[WEATHER], messages=CONTINUED[:2]), "messages.1.tool_calls",
     "makes tool calls without results: 'call_1'"),
    (chat(tools=[WEATHER], messages=[*CONTINUED, {"role": "assistant", "content": "Sunny."}]),
     "messages.3.role", "an assistant message with text"),
    (chat(tools=[WEATHER], messages=[ASKED, {"role": "system", "content": "Be brief."},
                                     CALLED, ANSWERED]),
     "messages.1.role", "after the last user message (messages.0)"),
    (chat(tools=[WEATHER], messages=CONTINUED[1:]), "messages.0.role", "no user message"),
]


def _refused(http: httpx.Client, path: str, body: dict, param: str, words: str) -> dict:
    before = len(CALLS)
    resp = http.post(path, headers=auth(), json=body)
    assert resp.status_code == 400, resp.text
    err = resp.json()["error"]
    assert (err["param"], err["type"]) == (param, "invalid_request_error"), err
    assert words in err["message"], err["message"]
    assert len(CALLS) == before  # nothing spent: no model call
    return err


@pytest.mark.parametrize(("body", "param", "words"), CHAT_400)
def test_chat_tool_faults_are_400s_naming_the_field(served, body, param, words):
    err = _refused(served[1], "/v1/chat/completions", body, param, words)
    if words == NO_ACTOR:
        assert err["code"] == "unsupported_parameter"


RT_WEATHER = {"type": "function", **WEATHER["function"]}
R_CALL = {"type": "function_call", "call_id": "call_1", "name": "get_weather",
          "arguments": '{"city": "Paris"}'}
R_OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "Sunny, 21 C"}
R_CONTINUED = [{"role": "user", "content": "What is the weather in Paris?"}, R_CALL, R_OUTPUT]


def responses(**fields) -> dict:
    return {"model": "podium", "input": "What is the weather in Paris?", **fields}


RESPONSES_400 = [
    (responses(tools=[RT_WEATHER]), "tools", NO_ACTOR),
    (responses(tools=[RT_WEATHER], input=R_CONTINUED, instructions="Be brief."),
     "input.2.call_id", NOT_MADE),
    (responses(input=R_CONTINUED), "input.2.call_id", NOT_MADE),
    (responses(tools=[{**RT_WEATHER, "name": "get weather"}]), "tools.0.name", "1 to 64"),
    (responses(tools=[RT_WEATHER, RT_WEATHER]), "tools.1.name", "also the name of tools.0"),
    (responses(tools=[{**RT_WEATHER, "parameters": {"type": "object", "required": "city"}}]),
     "tools.0.parameters", "not a valid JSON Schema"),
    (responses(tools=[{"type": "web_search"}]), "tools.0.type", "function tools only"),
    (responses(tools=[RT_WEATHER], tool_choice={"type": "function", "name": "web"}),
     "tool_choice.name", "'web' is not a declared tool"),
    (responses(tools=[RT_WEATHER], tool_choice="any"), "tool_choice", '"auto"'),
    (responses(tools=[RT_WEATHER], parallel_tool_calls=1), "parallel_tool_calls",
     "true or false"),
    (responses(tools=[RT_WEATHER], input=edited(R_CONTINUED, "1.arguments", "{")),
     "input.1.arguments", "JSON text of an object"),
    (responses(tools=[RT_WEATHER], input=edited(R_CONTINUED, "1.name", "web")),
     "input.1.name", "'web' is not a declared tool"),
    (responses(tools=[RT_WEATHER], input=edited(R_CONTINUED, "2.call_id", "call_9"),
               instructions="Be brief."), "input.2.call_id", "matches no earlier tool call"),
    (responses(tools=[RT_WEATHER], input=[*R_CONTINUED[:2], {"type": "function_call_output",
                                                              "output": "x"}]),
     "input.2.call_id", "Missing required"),
    (responses(tools=[RT_WEATHER], input=R_CONTINUED[:2]), "input.1",
     "makes tool calls without results"),
    (responses(tools=[RT_WEATHER], input=[*R_CONTINUED,
                                          {"role": "assistant", "content": "Sunny."}]),
     "input.3.role", "an assistant message with text"),
    (responses(tools=[RT_WEATHER], input=[R_CONTINUED[0], {"role": "developer",
                                                           "content": "x"}, R_CALL, R_OUTPUT]),
     "input.1.role", "after the last user message (input.0)"),
]


@pytest.mark.parametrize(("body", "param", "words"), RESPONSES_400)
def test_responses_tool_faults_are_400s_naming_the_field(served, body, param, words):
    _refused(served[1], "/v1/responses", body, param, words)


def test_a_request_without_tools_is_still_answered_and_counted(served):
    before = len(CALLS)
    resp = served[1].post("/v1/chat/completions", headers=auth(), json=chat(
        tool_choice="none", tools=[], messages=[
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Hi.", "tool_calls": [], "tool_call_id": None},
            {"role": "user", "content": "What is 2 + 3?"}]))
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["message"]["content"] == "<answer>5</answer>"
    assert CALLS[before:] == ["conductor", "adder"]  # the count that stays still above


def test_tools_are_read_into_one_shape():
    use = chat_tool_use(chat(tools=[WEATHER], parallel_tool_calls=False,
                             tool_choice={"type": "function",
                                          "function": {"name": "get_weather"}}))
    assert use is not None and use.choice == Named("get_weather")
    assert use.parallel_calls is False
    (tool,) = use.tools
    assert (tool.name, tool.strict, tool.parameters) == (
        "get_weather", True, WEATHER["function"]["parameters"])
    assert chat_tool_use(chat(tools=[])) is None and chat_tool_use(chat()) is None
    # the Responses API's function items become the chat shape: one assistant message
    # carrying the assistant's text and both calls, then the results as tool messages
    second = {**R_CALL, "call_id": "call_2", "arguments": '{"city": "Rome"}'}
    items = [R_CONTINUED[0], {"role": "assistant", "content": "Let me look."}, R_CALL, second,
             R_OUTPUT, {**R_OUTPUT, "call_id": "call_2",
                        "output": [{"type": "input_text", "text": "Rain"}]}]
    parsed = responses_body(json.dumps(responses(input=items, instructions="Be brief."))
                            .encode())
    # read as one continuation (else input.1, an assistant's text after the user's, would be
    # refused): the text and both calls one assistant message, the results tool messages
    assert parsed.turn.kind == "continuation"
    assert [m.role for m in parsed.messages] == ["system", "user", "assistant", "tool", "tool"]
    messages = [Message.model_validate(m) for m in (
        {"role": "system", "content": "Be brief."}, ASKED,
        {"role": "assistant", "content": "Let me look.", "tool_calls": [
            CALLED["tool_calls"][0], {"id": "call_2", "type": "function", "function": {
                "name": "get_weather", "arguments": '{"city": "Rome"}'}}]},
        ANSWERED, {"role": "tool", "tool_call_id": "call_2",
                   "content": [{"type": "text", "text": "Rain"}]})]
    turn = read_conversation(messages, None)
    assert (turn.kind, turn.last_user, turn.results) == ("continuation", 1, (3, 4))


def test_turns_are_new_or_continuations():
    def turn(*messages):
        return read_conversation([Message.model_validate(m) for m in messages], None)

    assert turn(ASKED).kind == "new_turn"
    earlier = turn(*CONTINUED, {"role": "assistant", "content": "Sunny."},
                   {"role": "user", "content": "And tomorrow?"})
    assert (earlier.kind, earlier.last_user, earlier.results) == ("new_turn", 4, ())
    again = {**CALLED, "tool_calls": [{**CALLED["tool_calls"][0], "id": "call_2"}]}
    two_rounds = turn(*CONTINUED, again, {**ANSWERED, "tool_call_id": "call_2"})
    assert (two_rounds.kind, two_rounds.last_user, two_rounds.results) == \
        ("continuation", 0, (2, 4))


def test_a_sealed_id_opens_to_its_state_and_nothing_else_does():
    seal = SessionSeal(SECRET)
    state = {"worker": "adder", "trace": "t-1", "messages": [ASKED, CALLED]}
    call_id = seal.seal(state)
    assert call_id.startswith("call_") and call_id[5:].replace("-", "").replace("_", "") \
        .isalnum()
    assert seal.open_(call_id) == state
    assert SessionSeal(SECRET).open_(call_id) == state  # the same secret, another process
    assert seal.seal(state) != call_id  # every id its own
    refused = {
        "another key": (SessionSeal("another-secret-of-enough-length-0123456789"), call_id),
        "a random key": (SessionSeal(), call_id),
        "damaged": (seal, call_id[:40] + ("A" if call_id[40] != "A" else "B") + call_id[41:]),
        "cut short": (seal, call_id[:-4]),
        "forged": (seal, "call_" + base64.urlsafe_b64encode(b"\x80" + b"0" * 80).decode()),
        "not podium's": (seal, "call_abc123"),
        "no prefix": (seal, call_id[5:]),
    }
    for why, (opener, bad) in refused.items():
        with pytest.raises(NotOurCall):
            opener.open_(bad)
            pytest.fail(why)
    old = seal.seal(state, now=time.time() - seal.ttl_s - 5)
    with pytest.raises(NotOurCall):
        seal.open_(old)  # expired
    assert seal.open_(old, now=time.time() - 10) == state
    assert SessionSeal(SECRET, ttl_s=60).open_(seal.seal(state, now=time.time() - 30)) == state


def test_a_continuation_opens_its_results_ids_or_names_the_forged_one():
    seal = SessionSeal(SECRET)
    ours = seal.seal({"step": 1})
    messages = edited(edited(CONTINUED, "1.tool_calls.0.id", ours), "2.tool_call_id", ours)
    parsed = [Message.model_validate(m) for m in messages]
    turn = read_conversation(parsed, None)
    assert opened_results(parsed, turn, seal) == [{"step": 1}]
    with pytest.raises(ApiError) as refused:
        opened_results(parsed, turn, SessionSeal())
    assert refused.value.param == "messages.2.tool_call_id"
    assert refused.value.message == (
        f"tool_call_id {ours[:48]}...: not a call this server made (or its session key "
        "differs: --session-key-env)")
    forged = [Message.model_validate(m) for m in CONTINUED]
    with pytest.raises(ApiError) as refused:
        opened_results(forged, read_conversation(forged, None), seal)
    assert refused.value.status == 400 and refused.value.message.startswith(
        "tool_call_id call_1: not a call this server made")


def test_the_session_key_is_in_no_error_or_log_line(served, logs, monkeypatch):
    srv, http = served
    derived = fernet_key(SECRET).decode()
    assert scrub(f"a {SECRET} b {derived}") == "a *** b ***"
    assert SECRET not in repr(srv.config) and SECRET not in repr(srv.app.state.server.config)
    for body, param, _ in CHAT_400[:6]:
        resp = http.post("/v1/chat/completions", headers=auth(), json=body)
        assert resp.json()["error"]["param"] == param
        assert SECRET not in resp.text and derived not in resp.text
    assert SECRET not in logs.text and derived not in logs.text
    monkeypatch.setenv("PODIUM_TEST_SESSION_KEY", "too-short-a-secret")
    with pytest.raises(ConfigError) as short:
        load_secret("PODIUM_TEST_SESSION_KEY")
    assert "at least 32" in str(short.value) and "too-short-a-secret" not in str(short.value)
    monkeypatch.setenv("PODIUM_TEST_SESSION_KEY", f"  {SECRET}\n")
    assert load_secret("PODIUM_TEST_SESSION_KEY") == SECRET and load_secret(None) is None


def test_serve_refuses_an_unset_session_key_variable_before_starting(tmp_path):
    out = CliRunner().invoke(cli_app, ["serve", "--no-auth", "--session-key-env",
                                       "PODIUM_NO_SUCH_VARIABLE", "--trace-dir",
                                       str(tmp_path / "traces")])
    assert out.exit_code == 2, out.output
    assert "--session-key-env PODIUM_NO_SUCH_VARIABLE" in out.output
    assert "openssl rand" in out.output


def test_a_process_app_takes_the_key_its_supervisor_hands_it(tmp_path, monkeypatch):
    (tmp_path / "pool.toml").write_text(POOL)
    args = ServeArgs(pool=str(tmp_path / "pool.toml"), no_auth=True,
                     trace_dir=str(tmp_path / "traces"))
    monkeypatch.setenv(ARGS_ENV, json.dumps(dataclasses.asdict(args)))
    monkeypatch.setenv(SESSION_KEY_VAR, SECRET)
    built = process_app()
    assert SESSION_KEY_VAR not in os.environ  # taken: no subprocess of the server inherits it
    opened = built.state.server.sessions.open_(SessionSeal(SECRET).seal({"n": 1}))
    assert opened == {"n": 1}
    built.state.server.traces.close()


def sealing_app():
    """The app factory of the processes test, in each child: the real process app; then a
    token sealed with its key, written for the others, and every child's token opened."""
    folder = Path(os.environ["PODIUM_TEST_TOKENS"])
    built = process_app()
    seal = built.state.server.sessions
    (folder / f"{os.getpid()}.token").write_text(seal.seal({"pid": os.getpid()}))
    deadline = time.monotonic() + 60
    while len(tokens := sorted(folder.glob("*.token"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    opened = []
    for token in tokens:
        with contextlib.suppress(NotOurCall):
            opened.append(seal.open_(token.read_text())["pid"])
    (folder / f"{os.getpid()}.opened").write_text(json.dumps(sorted(opened)))
    return built


def test_processes_share_one_session_key(tmp_path, monkeypatch):
    """`supervise` draws one key and hands it to every process: each opens the other's ids."""
    (tmp_path / "pool.toml").write_text(POOL)
    tokens = tmp_path / "tokens"
    tokens.mkdir()
    args = ServeArgs(pool=str(tmp_path / "pool.toml"), no_auth=True, processes=2,
                     trace_dir=str(tmp_path / "traces"))
    monkeypatch.setenv(ARGS_ENV, json.dumps(dataclasses.asdict(args)))
    monkeypatch.setenv("PODIUM_TEST_TOKENS", str(tokens))
    supervising = threading.Event()

    def stop_when_done() -> None:
        deadline = time.monotonic() + 90
        while len(list(tokens.glob("*.opened"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        if supervising.is_set():
            os.kill(os.getpid(), signal.SIGTERM)  # supervise's own handler: stop them all

    watcher = threading.Thread(target=stop_when_done)
    watcher.start()
    supervising.set()
    try:
        code = supervise(f"{__name__}:sealing_app", listeners("127.0.0.1", 0, 2), {})
    finally:
        supervising.clear()
        watcher.join()
    assert code == 0
    pids = sorted(int(p.stem) for p in tokens.glob("*.token"))
    assert len(pids) == 2
    assert [json.loads(p.read_text()) for p in sorted(tokens.glob("*.opened"))] == [pids, pids]
    assert SESSION_KEY_VAR not in os.environ  # the key went to the children only
