"""`POST /v1/chat/completions`: one request, top to bottom.

The key, the body (`podium.serve.chat.request`), the question from the messages
(`podium.serve.conversation`) or the tool results a continuation goes on with
(`podium.serve.acting`), the run (`TeamServer.begin`), then the `chat.completion` body
(`podium.serve.chat.reply`) or its stream (`podium.serve.chat.stream`), tool calls with
their ids sealed.
"""

from __future__ import annotations

import time
import uuid

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from podium.llm.tools import ToolCall
from podium.serve.acting import read_turn, sealed_calls
from podium.serve.chat.reply import completion_json
from podium.serve.chat.request import parse_body
from podium.serve.chat.stream import stream
from podium.serve.conversation import conversation_of, question_of
from podium.serve.inflight import ServedRequest, answered
from podium.serve.reply import event_stream
from podium.serve.team_server import TeamServer
from podium.serve.tools import chat_namer
from podium.serve.traces.files import new_id


async def chat_completions(server: TeamServer, request: Request) -> Response:
    """POST /v1/chat/completions."""
    owner = await server.auth(request)
    req, opts, tools, turn = parse_body(await server.body(request))
    cid, tid, created = f"chatcmpl-{uuid.uuid4().hex}", new_id(), int(time.time())
    question, going = read_turn(req.messages, turn, tools, server.sessions, chat_namer,
                                question_of)
    served = ServedRequest(tid, req.model, question, opts, sampling=req.sampling(),
                           stream=req.stream, owner=owner, traced=req.traced(), tools=tools,
                           continuing=going,
                           conversation=None if going else conversation_of(
                               req.messages, tools is not None and bool(tools.tools)))
    flight, headers, shown_tid = server.begin(served, request.scope)

    def seal(result) -> list[ToolCall]:
        return sealed_calls(result, server.sessions, tid)

    if req.stream:
        include = bool(req.stream_options and req.stream_options.include_usage)
        return event_stream(stream(flight, cid, created, req.model, shown_tid, include, seal),
                            headers)
    result = await answered(flight, headers, request)
    return JSONResponse(completion_json(cid, created, req.model, result, shown_tid,
                                        seal(result)), headers=headers)
