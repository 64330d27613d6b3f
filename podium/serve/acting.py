"""The team's tool calls as the server writes them, and the tool results it reads back.

A request with `tools` whose conversation ends in the user's message is a new turn: the team
plans it (`Pipeline.ask(tools=...)`). When its acting step calls tools, each call goes to the
client with an id that seals the acting state (its `trace_id` the request's trace) and the
worker's own id for the call (`podium.serve.session`):

    call_<sealed {"state": ActingState.to_json(), "call": "<the worker's call id>"}>

A conversation that ends in tool results is a continuation (`podium.serve.tools.Turn`): the
ids its results answer are opened (a 400 naming the one that does not open), the last
assistant message's calls and their results are rebuilt with the worker's own ids, and
`Pipeline.continue_acting` calls that worker once more. The results of one continuation answer
the calls of one acting state; results of different runs are a 400. A continuation needs the
same tools sent again (a 400 naming them otherwise).

The trace of a continuation names the trace it continues (`continues`) and the results it was
given (`tool_results`, by the worker's call ids).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from podium.acting import ActingState
from podium.llm.tools import ToolCall, ToolUse
from podium.serve.conversation import Message
from podium.serve.errors import bad_request
from podium.serve.session import SessionSeal, not_ours, opened_results
from podium.serve.tools import Namer, Turn


@dataclass(frozen=True)
class Continuation:
    """A continuation's acting state and the exchange it goes on with (the worker's ids)."""

    state: ActingState
    exchange: tuple[dict[str, Any], ...]

    def traced(self) -> dict[str, Any]:
        """What the trace records of it: the trace it continues and the results given."""
        results = [{"tool_call_id": m["tool_call_id"], "content": m["content"]}
                   for m in self.exchange if m["role"] == "tool"]
        return {"continues": self.state.trace_id, "tool_results": results}


def sealed_calls(result: Any, seal: SessionSeal, trace_id: str) -> list[ToolCall]:
    """The run's tool calls as the client gets them: each id sealing the acting state (its
    trace the request's `trace_id`, unless it continues an earlier one) and the worker's id.
    Empty when the run answered in text."""
    acting = result.acting
    if not result.tool_calls or acting is None:
        return []
    if acting.trace_id is None:
        acting = replace(acting, trace_id=trace_id)
    state = acting.to_json()
    return [ToolCall(seal.seal({"state": state, "call": call.id}), call.name, call.arguments)
            for call in result.tool_calls]


def continuation(messages: list[Message], turn: Turn, use: ToolUse | None, seal: SessionSeal,
                 name: Namer) -> Continuation:
    """The state and exchange a continuation goes on with (see the module docstring); a 400
    naming the field when an id does not open, results answer different runs, or the
    request has no tools."""
    opened = dict(zip(turn.results, opened_results(messages, turn, seal, name), strict=True))
    if use is None:
        raise bad_request("The conversation ends in tool results, so the team goes on with "
                          "them; send the same 'tools' as the request that made the calls.",
                          param="tools", code="missing_required_parameter")
    caller = max(i for i in range(turn.last_user + 1, len(messages))
                 if messages[i].tool_calls)
    worker_ids: dict[str, str] = {}
    states: dict[str, ActingState] = {}
    for i in range(caller + 1, len(messages)):
        sealed_id, data = messages[i].tool_call_id or "", opened[i]
        try:
            state = ActingState.from_json(data.get("state"))
            if not isinstance(data.get("call"), str):
                raise ValueError("no call id")
        except ValueError:
            raise not_ours(sealed_id, name(i, "tool_call_id")) from None
        worker_ids[sealed_id] = data["call"]
        states[json.dumps(data["state"], sort_keys=True)] = state
    if len(states) > 1:
        raise bad_request(f"The tool results after {name(caller, '')} answer calls of "
                          "different runs: send the results of one reply's calls together.",
                          param=name(caller, "tool_calls"))
    call = messages[caller]
    assistant = {"role": "assistant", "content": call.text(name(caller, "")) or None,
                 "tool_calls": [{"id": worker_ids[c.id], "type": "function",
                                 "function": {"name": c.function.name,
                                              "arguments": c.function.arguments}}
                                for c in call.tool_calls or []]}
    results = [{"role": "tool", "tool_call_id": worker_ids[messages[i].tool_call_id or ""],
                "content": messages[i].text(name(i, ""))}
               for i in range(caller + 1, len(messages))]
    return Continuation(next(iter(states.values())), (assistant, *results))


def read_turn(messages: list[Message], turn: Turn, use: ToolUse | None, seal: SessionSeal,
              name: Namer, question: Callable[[list[Message]], str]
              ) -> tuple[str, Continuation | None]:
    """The question the team is asked and, for a continuation, what it goes on with (its
    question the acting state's); `question` makes a new turn's question."""
    if turn.kind == "continuation":
        going = continuation(messages, turn, use, seal, name)
        return going.state.question, going
    return question(messages), None
