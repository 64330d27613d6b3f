"""`POST /v1/responses`: one request, top to bottom.

The key, the body and its conversation (`podium.serve.responses.request`), the question or
the tool results a continuation goes on with (`podium.serve.acting`), the run
(`TeamServer.begin`), then the `response` object (`podium.serve.responses.reply`) or its
stream of events (`podium.serve.responses.stream`), tool calls as `function_call` items.
"""

from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from podium.llm.tools import ToolCall
from podium.serve.acting import read_turn, sealed_calls
from podium.serve.conversation import conversation_of
from podium.serve.inflight import ServedRequest, answered
from podium.serve.reply import event_stream
from podium.serve.responses.reply import call_item, message_item, new_ids, response_json
from podium.serve.responses.request import parse_body, question
from podium.serve.responses.stream import stream
from podium.serve.team_server import TeamServer
from podium.serve.traces.files import new_id


async def responses(server: TeamServer, request: Request) -> Response:
    """POST /v1/responses."""
    owner = await server.auth(request)
    got = parse_body(await server.body(request))
    req = got.req
    ids, tid, created = new_ids(), new_id(), int(time.time())
    asked, going = read_turn(got.messages, got.turn, got.tools, server.sessions, got.naming,
                             question)
    served = ServedRequest(tid, req.model, asked, got.options, sampling=req.sampling(),
                           stream=req.stream, owner=owner, traced=req.traced(),
                           tools=got.tools, continuing=going,
                           conversation=None if going else conversation_of(
                               got.messages, got.tools is not None and bool(got.tools.tools)))
    flight, headers, shown_tid = server.begin(served, request.scope)

    def seal(result) -> list[ToolCall]:
        return sealed_calls(result, server.sessions, tid)

    if req.stream:
        return event_stream(stream(flight, req, ids, created, shown_tid, seal), headers)
    result = await answered(flight, headers, request)
    calls = seal(result)
    text = [] if calls and not result.answer else [message_item(ids[2], result.answer)]
    return JSONResponse(response_json(
        ids[0], created, req.model, req, output=[*text, *map(call_item, calls)],
        result=result, trace_id=shown_tid), headers=headers)
