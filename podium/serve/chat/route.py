"""`POST /v1/chat/completions`: one request, top to bottom.

The key, the body (`podium.serve.chat.request`), the question from the messages
(`podium.serve.conversation`), the run (`TeamServer.begin`), then the `chat.completion` body
(`podium.serve.chat.reply`) or its stream (`podium.serve.chat.stream`).
"""

from __future__ import annotations

import time
import uuid

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from podium.serve.chat.reply import completion_json
from podium.serve.chat.request import parse_body
from podium.serve.chat.stream import stream
from podium.serve.conversation import question_of
from podium.serve.inflight import ServedRequest, answered
from podium.serve.reply import event_stream
from podium.serve.team_server import TeamServer
from podium.serve.traces.files import new_id


async def chat_completions(server: TeamServer, request: Request) -> Response:
    """POST /v1/chat/completions."""
    owner = await server.auth(request)
    req, opts = parse_body(await server.body(request))
    cid, tid, created = f"chatcmpl-{uuid.uuid4().hex}", new_id(), int(time.time())
    question = question_of(req.messages)
    served = ServedRequest(tid, req.model, question, opts, sampling=req.sampling(),
                           stream=req.stream, owner=owner, traced=req.traced())
    flight, headers, shown_tid = server.begin(served, request.scope)
    if req.stream:
        include = bool(req.stream_options and req.stream_options.include_usage)
        return event_stream(stream(flight, cid, created, req.model, shown_tid, include),
                            headers)
    result = await answered(flight, headers, request)
    return JSONResponse(completion_json(cid, created, req.model, result, shown_tid),
                        headers=headers)
