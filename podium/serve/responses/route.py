"""`POST /v1/responses`: one request, top to bottom.

The key, the body and its conversation (`podium.serve.responses.request`), the question, the
run (`TeamServer.begin`), then the `response` object (`podium.serve.responses.reply`) or its
stream of events (`podium.serve.responses.stream`).
"""

from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from podium.serve.inflight import ServedRequest, answered
from podium.serve.reply import event_stream
from podium.serve.responses.reply import message_item, new_ids, response_json
from podium.serve.responses.request import parse_body, question
from podium.serve.responses.stream import stream
from podium.serve.team_server import TeamServer
from podium.serve.traces.files import new_id


async def responses(server: TeamServer, request: Request) -> Response:
    """POST /v1/responses."""
    owner = await server.auth(request)
    req, opts, messages = parse_body(await server.body(request))
    ids, tid, created = new_ids(), new_id(), int(time.time())
    asked = question(messages)
    served = ServedRequest(tid, req.model, asked, opts, sampling=req.sampling(),
                           stream=req.stream, owner=owner, traced=req.traced())
    flight, headers, shown_tid = server.begin(served, request.scope)
    if req.stream:
        return event_stream(stream(flight, req, ids, created, shown_tid), headers)
    result = await answered(flight, headers, request)
    return JSONResponse(response_json(
        ids[0], created, req.model, req, output=[message_item(ids[2], result.answer)],
        result=result, trace_id=shown_tid), headers=headers)
