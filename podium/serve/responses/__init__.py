"""The Responses API (`POST /v1/responses`): text in, text out, streamed events.

Enough of OpenAI's newer API for clients that speak only it.

    route.py     the handler: key, body, question, run, response or stream
    request.py   `ResponsesRequest`: its fields validated, `input` and `instructions` made
                 the conversation, the fields refused (`previous_response_id`,
                 `store: true`, non-text input)
    reply.py     the `response` object of a run and its output items
    stream.py    the `response.*` events of a streamed run

What it shares with Chat Completions lives in `podium.serve`: podium's options and the
common sampling fields (`options`), the conversation made one question (`conversation`), the
run in flight (`inflight`), the `podium` field and a run's events (`reply`).
"""
