"""`podium serve`: the Conductor and its team behind an OpenAI-compatible API, as one model.

Any OpenAI client can then use the team:

    client = openai.OpenAI(base_url="http://127.0.0.1:8000/v1", api_key=KEY)
    reply = client.chat.completions.create(model="podium", messages=[...])

One package per API, each in the order a request meets it (route, request, reply, stream):

    chat/         Chat Completions, POST /v1/chat/completions
    responses/    the Responses API, POST /v1/responses

and what both share:

    app.py        `create_app`: the FastAPI app, routes only
    access.py     the access log: one line per request, with the run's trace id and outcome
    pipeline_routes.py  the two routes that run the team, answered past Starlette's router
    auth.py       API keys (env var, key file), the loopback-only rule for --no-auth, and the
                  constant-time check of `Authorization: Bearer KEY`
    body.py       a request's body: its size limit (413), strict JSON, validation errors (400)
    options.py    podium's per-request options, and the sampling fields both APIs take
    conversation.py  the conversation made the one question the team answers
    team_server.py  `TeamServer`: the pipeline, run slots (429), traces, key check; `begin`
                  starts a request's run (pass-through models too)
    inflight.py   one request's run in flight (`ServedRequest` in, `InFlight` out): its task,
                  slot, trace, and the error of a run without an answer
    reply.py      the `podium` field, and the events of a streamed run
    progress.py   the progress lines a streamed run sends
    metrics.py    GET /metrics in Prometheus' format, counted by the access log
    traces/       every request's trace: the files, the writer process, the store
    shutdown.py   a graceful shutdown that answers the runs it cuts short (503)
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
    (`podium.serve.traces.writer.writer_main`) imports this package without FastAPI."""
    if name in __all__:
        from podium.serve import app

        return getattr(app, name)
    raise AttributeError(f"module 'podium.serve' has no attribute {name!r}")
