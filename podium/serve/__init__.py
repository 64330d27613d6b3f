"""`podium serve`: the Conductor and its team behind an OpenAI-compatible API, as one model.

Any OpenAI client can then use the team:

    client = openai.OpenAI(base_url="http://127.0.0.1:8000/v1", api_key=KEY)
    reply = client.chat.completions.create(model="podium", messages=[...])

Modules, in the order a request meets them:

    access.py     the access log: one line per request, with the run's trace id and outcome
    auth.py       API keys (env var, key file), the loopback-only rule for --no-auth, and the
                  constant-time check of `Authorization: Bearer KEY`
    protocol.py   the request body: validation, podium's per-request options, the question
                  built from the conversation
    app.py        `create_app`: the FastAPI app, routes only
    team_server.py  `TeamServer`: the pipeline, run slots (429), traces, key check, and the
                  two handlers that run the team
    runs.py       one request's run: its task, slot, trace, progress, and the error of a
                  run without an answer
    chat_completions.py  the Chat Completions replies: the body and the stream
    responses_api.py  the Responses API: its request, response object and stream events
    progress.py   the progress lines a streamed run sends
    metrics.py    GET /metrics in Prometheus' format, counted by the access log
    traces.py     every request's trace, owner-only, newest N kept, served by id
    trace_writer.py  the process that writes the traces, and the pipe to it
    processes.py  `--processes N`: server processes on one port, one socket each
    http_limits.py  the bound on a request's headers, for uvicorn's parsers
    errors.py     OpenAI-style error bodies

This package needs the `serve` extra (fastapi, uvicorn); nothing outside it imports fastapi.
It depends on the pipeline, never on eval or train. docs/serving.md is the user's guide.
"""

from __future__ import annotations

__all__ = ["MODEL", "ServeConfig", "create_app"]


def __getattr__(name: str):
    """The app's names, imported on first use: the trace writer process
    (`podium.serve.trace_writer.writer_main`) imports this package without FastAPI."""
    if name in __all__:
        from podium.serve import app

        return getattr(app, name)
    raise AttributeError(f"module 'podium.serve' has no attribute {name!r}")
