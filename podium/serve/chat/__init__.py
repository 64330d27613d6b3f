"""Chat Completions (`POST /v1/chat/completions`): the request, the reply, the stream.

    route.py     the handler: key, body, question, run, reply or stream
    request.py   `ChatRequest`: its fields validated, the sampling the answer step honours,
                 the fields refused (`n > 1`, `functions`...)
    reply.py     the `chat.completion` body of a finished run (usage, finish reason)
    stream.py    the `chat.completion.chunk` events of a streamed run

What the Responses API shares with it lives in `podium.serve`: podium's options and the
common sampling fields (`options`), the conversation made one question (`conversation`), the
run in flight (`inflight`), the `podium` field and a run's events (`reply`).
"""
