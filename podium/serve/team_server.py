"""`TeamServer`: what serves the team, whichever API a request comes through.

It holds the pipeline (and its one-worker variant for pass-through models), the run slots
(429 when `max_concurrency` runs are in flight: the server never queues work it cannot start),
the trace store, the key check and the shutdown drain. Each API's route
(`podium.serve.chat.route`, `podium.serve.responses.route`) checks the key, reads the body
(`body`) and parses it into a `ServedRequest`; `begin` names the model and its sub-pool,
takes a run slot and starts the run (`podium.serve.inflight`); the route then answers with
the whole reply or its stream.

One `Pipeline` serves every request, so each worker's concurrency limit holds across all of
them (with `podium serve --processes N`, across the requests of one process: the command gives
each process its share of the limits). A request that changes run settings (recursion,
budgets) gets a shallow copy of it with those settings: the same clients, cache, Team (its
semaphores) and Conductor.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from starlette.requests import Request
from starlette.types import Scope

from podium.baselines import SOLVE, bare_question
from podium.errors import ConfigError
from podium.llm.base import Sampling
from podium.pipeline import Pipeline
from podium.serve.auth import KeyCheck
from podium.serve.body import read_body
from podium.serve.errors import ApiError, bad_request
from podium.serve.inflight import Answerer, Flights, InFlight, ServedRequest, Slots
from podium.serve.metrics import ServeMetrics
from podium.serve.options import Options
from podium.serve.session import SessionSeal
from podium.serve.shutdown import Drain
from podium.serve.traces.store import TraceStore
from podium.settings import resolve_settings
from podium.workflow import Workflow

MODEL = "podium"


@dataclass(frozen=True)
class ServeConfig:
    """What `podium serve`'s flags set: the API keys (none: the server takes no key), the
    runs in flight at once (past them a 429), the body's size limit, the trace folder and
    how many traces it keeps, the pass-through models, and the secret tool-call ids are
    sealed with (`podium.serve.session`; None: a random key per start)."""

    keys: tuple[str, ...] = ()
    max_concurrency: int = 4
    max_request_bytes: int = 1_000_000
    trace_dir: str | Path = "runs/serve-traces"
    trace_keep: int = 1000
    retry_after_s: int = 1
    pass_through: bool = False  # each worker also served as a model of its own
    shared_traces: bool = False  # other processes write the trace folder too (--processes)
    graceful_timeout_s: float | None = None  # the runs a shutdown may wait for (shutdown.py)
    session_key: str | None = field(default=None, repr=False)  # --session-key-env's secret


class TeamServer:
    """What serves the team: the pipeline (and its one-worker variant for pass-through models),
    the run slots, the trace store, the key check and the shutdown drain; `begin` starts a
    request's run. `create_app` routes requests to it, through each API's route."""

    def __init__(self, config: ServeConfig, pipeline: Pipeline) -> None:
        self.config, self.pipeline = config, pipeline
        self.check = KeyCheck(config.keys)
        self.sessions = SessionSeal(config.session_key)
        self.traces = TraceStore(config.trace_dir, config.trace_keep,
                                 shared=config.shared_traces)
        self.metrics = ServeMetrics()
        self.slots = Slots(config.max_concurrency, self.metrics.in_flight)
        self.drain = Drain(config.graceful_timeout_s)
        self.names = [w.name for w in pipeline.pool.workers]
        self.flights = Flights(self.slots, self.traces, self.drain, self.names)
        self.started = int(time.time())
        self.served = [MODEL, *(self.names if config.pass_through else ())]
        if config.pass_through and MODEL in self.names:
            raise ConfigError(f"A worker is named {MODEL!r}, the team's own model name: rename "
                              "it in the pool to serve workers as models (--pass-through).")
        # a pass-through model's runs: the bare question (after a conversation's earlier turns)
        self.single = pipeline.variant(bare_question(pipeline.settings))

    async def auth(self, request: Request) -> str | None:  # async: FastAPI runs a sync one
        return self.check(request.headers.get("authorization"))  # in a thread

    async def page_auth(self, request: Request) -> str | None:
        return self.check(request.headers.get("authorization"), basic=True)

    def model_card(self, model: str) -> dict:
        return {"id": model, "object": "model", "created": self.started, "owned_by": "podium"}

    async def body(self, request: Request) -> bytes:
        """The request's body, refused with 413 past `max_request_bytes` while it is read."""
        return await read_body(request, self.config.max_request_bytes)

    def answerer(self, request: ServedRequest) -> Answerer:
        """How the model asked for answers: the team (the Conductor, on the sub-pool named),
        or, for a pass-through model, one call to that worker."""
        opts, question, answer = request.options, request.question, request.sampling
        tools, going = request.tools, request.continuing
        if request.model == MODEL:
            workers = _workers(self.pipeline, opts)
            pipe = _variant(self.pipeline, opts, answer)
            if tools is not None:
                _actor(self.pipeline, workers)
            if going is not None and tools is not None:
                return lambda on_event: pipe.continue_acting(going.state, going.exchange,
                                                             tools, on_event=on_event,
                                                             budget=opts.budget)
            return lambda on_event: pipe.ask(question, workers=workers, on_event=on_event,
                                             stream_answer=on_event is not None,
                                             budget=opts.budget, tools=tools,
                                             conversation=request.conversation)
        if request.model not in self.served:
            raise no_model(request.model, self.served)
        if tools is not None or going is not None:
            raise bad_request(f"Tool calling is served by the {MODEL!r} model; "
                              f"{request.model!r} is one worker, asked directly, with text "
                              f"only. Ask model={MODEL!r}, or leave 'tools' out.",
                              param="tools", code="unsupported_parameter")
        if opts.workers or opts.recursion is not None:
            raise bad_request(f"workers and recursion are options of the {MODEL!r} model; "
                              f"{request.model!r} is one worker, asked directly.",
                              param="workers" if opts.workers else "recursion")
        pipe = _variant(self.single, opts, answer)
        flow = Workflow.of([(self.names.index(request.model), SOLVE, ())])
        return lambda on_event: pipe.run_workflow(question, flow,
                                                  label=f"worker:{request.model}",
                                                  on_event=on_event,
                                                  stream_answer=on_event is not None,
                                                  budget=opts.budget,
                                                  conversation=request.conversation)

    def begin(self, request: ServedRequest,
              scope: Scope) -> tuple[InFlight, dict, str | None]:
        """Check the model and its options, take a run slot (429 when none is free), start
        the run; the trace-id headers and the id shown in the body (only when asked)."""
        answer = self.answerer(request)
        if not self.slots.take():
            raise ApiError(429, f"The server is running {self.slots.limit} requests, its limit "
                           "(--max-concurrency). Retry after the Retry-After seconds.",
                           code="too_many_requests",
                           headers={"Retry-After": str(self.config.retry_after_s)})
        flight = self.flights.start(request, answer, scope)
        tid = request.trace_id
        if request.options.return_trace_id:
            return flight, {"X-Podium-Trace-Id": tid}, tid
        return flight, {}, None


def no_model(model: str, served: list[str]) -> ApiError:
    if len(served) == 1:
        known = f"this server serves one model, {MODEL!r}. Pass model=\"{MODEL}\"."
    else:
        known = (f"this server serves {', '.join(map(repr, served))} ({MODEL!r} is the team; "
                 "the others are its workers, asked directly).")
    return ApiError(404, f"The model {model!r} does not exist: {known}", code="model_not_found",
                    param="model")


def _workers(pipeline: Pipeline, opts: Options) -> list[int] | None:
    if not opts.workers:
        return None
    index = {w.name: i for i, w in enumerate(pipeline.pool.workers)}
    unknown = [n for n in opts.workers if n not in index]
    if unknown:
        raise bad_request(f"workers names {unknown}, which this server's pool does not have; "
                          f"its workers are: {', '.join(index)}.", param="workers",
                          code="unknown_worker")
    return [index[n] for n in opts.workers]


def _actor(pipeline: Pipeline, workers: list[int] | None) -> None:
    """A 400 naming `tools` before anything is spent when no worker asked can act with them
    (`tools = true` in its pool entry and a backend that takes tools)."""
    indices = range(len(pipeline.pool.workers)) if workers is None else workers
    if not any(pipeline.pool.workers[i].tools
               and getattr(pipeline.team.clients[i], "supports_tools", False) for i in indices):
        raise bad_request("No worker this request may use can act with tools: the podium "
                          "model answers a request with tools through a worker whose pool "
                          "entry sets tools = true, with a backend that takes tools (openai, "
                          "anthropic, gemini). Leave 'tools' out, or ask the server's operator "
                          "for such a worker.", param="tools", code="unsupported_parameter")


def _variant(pipeline: Pipeline, opts: Options, answer: Sampling | None) -> Pipeline:
    """`pipeline` with this request's run settings (`podium.settings`: a request may lower a
    cap, never raise it) and its answer step's sampling (`Pipeline.variant`)."""
    asked = {"recursion": opts.recursion, "max_calls": opts.max_calls,
             "max_tokens": opts.max_total_tokens, "max_cost": opts.max_cost}
    request = {k: v for k, v in asked.items() if v is not None}
    settings = resolve_settings(pipeline.settings, request=request) if request else None
    return pipeline.variant(settings, answer)
