"""Systems to evaluate, all run through the same executor as the Conductor.

A system answers a formatted question and returns a `RunResult`, so every system is measured
alike (accuracy, tokens, calls, cost, latency). Spec strings, as `podium eval --system` takes:

    conductor               the pool's Conductor (any Conductor endpoint or checkpoint)
    single:W                one step on worker W (a name or a pool index)
    moa[:W1,W2,...]         Mixture-of-Agents: every listed worker (default: all) proposes
                            independently, a seeded-random worker aggregates (PAPER.md App. A.3)
    self-moa:W[:k]          worker W sampled k times (default 4), W aggregates
    vote:W[:k]              majority vote over the <answer> of k samples of W (default 5); no
                            aggregator call
    reflect:W[:k]           W answers, then revises k-1 times seeing every earlier attempt
                            (default k = 5)
    pipeline[:P,E,V]        fixed planner -> executor -> verifier chain (default workers 0,1,2)
    random                  a random workflow per question (random length, workers, access)
    openai:URL[:MODEL]      any OpenAI-compatible model as a black box: one call per question,
                            the bare question as the only message (the paper's OOD protocol;
                            `podium serve` itself, or a single worker served alone). MODEL may
                            also follow a '#'; the key, if the server needs one, is read from
                            $PODIUM_SYSTEM_API_KEY. Build the pool with `blackbox_pool`.

Workers in a baseline see the same message layout as a Conductor's workers (preamble, overall
task, visible steps, subtask), so the comparison isolates what the Conductor decides.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from podium.config import Pool, RunSettings
from podium.errors import ConfigError
from podium.pipeline import Pipeline, RunResult
from podium.scoring.base import extract_answer
from podium.settings import resolve_settings
from podium.workflow.execute import StepRecord
from podium.workflow.types import Step, Workflow

SOLVE = "Solve the overall task and give the final answer in the format it asks for."
PROPOSE = "Solve the overall task independently and explain your answer."
AGGREGATE = ("Several team members answered the overall task. Critically compare their "
             "responses, fix any errors, and give the single best final answer in the format "
             "the task asks for.")
REVISE = ("Review every earlier attempt, find mistakes, and give an improved final answer in "
          "the format the task asks for.")
PLAN = "Write a short step-by-step plan for solving the overall task. Do not solve it."
EXECUTE = "Carry out the plan and solve the overall task, showing your work."
VERIFY = ("Check the solution for errors, correct it if needed, and give the final answer in "
          "the format the task asks for.")
RANDOM_SUBTASKS = (SOLVE, PROPOSE, VERIFY, REVISE, PLAN)


def _seed(question: str, sample_id: int) -> int:
    return int(hashlib.sha256(f"{sample_id}:{question}".encode()).hexdigest()[:12], 16)


def majority_answer(responses: Sequence[str | None]) -> str | None:
    """The first response whose <answer> (normalised) is the most common one; None if no
    response has an answer tag."""
    keyed = [(" ".join(a.lower().split()), r) for r in responses
             if r and (a := extract_answer(r)) is not None]
    if not keyed:
        return None
    winner, _ = Counter(k for k, _ in keyed).most_common(1)[0]
    return next(r for k, r in keyed if k == winner)


@dataclass
class System:
    """A named way to answer questions with a pool's team."""

    spec: str
    pipeline: Pipeline
    make: Callable[[str, int], Workflow] | None = None  # None: the Conductor
    vote: bool = False

    async def run(self, question: str, *, sample_id: int = 0, on_event=None,
                  budget: float | None = None) -> RunResult:
        """One answer; with `budget` (USD), the Conductor is shown it (`run.show_budget`) and
        every system's plan is priced against it (`outcome.budget`)."""
        if self.make is None:
            return await self.pipeline.ask(question, sample_id=sample_id, on_event=on_event,
                                           budget=budget)
        return await self.pipeline.run_workflow(
            question, self.make(question, sample_id), sample_id=sample_id, label=self.spec,
            answer=_vote if self.vote else None, on_event=on_event, budget=budget)


def _vote(steps: Sequence[StepRecord]) -> str | None:
    return majority_answer([s.response for s in steps if s.status == "ok"])


def _worker(pipeline: Pipeline, ref: str) -> int:
    names = [w.name for w in pipeline.pool.workers]
    if ref in names:
        return names.index(ref)
    if ref.isdigit() and int(ref) < len(names):
        return int(ref)
    raise ConfigError(f"Worker {ref!r} is not in the pool; its workers are: {', '.join(names)} "
                      f"(or their indices 0..{len(names) - 1}).")


def _count(parts: list[str], default: int, spec: str) -> int:
    if len(parts) < 3:
        return default
    if not parts[2].isdigit() or int(parts[2]) < 1:
        raise ConfigError(f"In --system {spec!r}, the sample count must be a positive integer.")
    return int(parts[2])


def parse_blackbox(spec: str) -> tuple[str, str] | None:
    """(base URL, model) of an `openai:URL[:MODEL]` / `openai:URL#MODEL` spec; None for any
    other system. A trailing `:NAME` is a model unless it is a port (digits) or a path."""
    if not spec.startswith("openai:"):
        return None
    rest = spec[len("openai:"):]
    url, _, model = rest.partition("#")
    if not model:
        head, sep, tail = url.rpartition(":")
        if sep and tail and not tail.isdigit() and "/" not in tail and "//" in head:
            url, model = head, tail
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"--system {spec!r}: give an http(s) URL of an OpenAI-compatible "
                          "server, e.g. openai:http://127.0.0.1:8000/v1:podium")
    return url.rstrip("/"), model or "podium"


BARE_QUESTION = {"worker_messages": "question", "worker_prefill": False}


def bare_question(settings: RunSettings) -> RunSettings:
    """`settings` for asking a worker the question alone, as any client would: no team
    prompt, no prefill (a black box, or `podium serve --pass-through`)."""
    return resolve_settings(settings, required=BARE_QUESTION)


def blackbox_pool(spec: str, pool: Pool) -> tuple[Pool, RunSettings]:
    """The pool for `openai:URL[:MODEL]`: its one worker is that endpoint, asked the bare
    question (run.worker_messages = "question"); the Conductor is never called."""
    import os

    from podium.config import ModelSpec

    parsed = parse_blackbox(spec)
    if parsed is None:
        raise ConfigError(f"{spec!r} is not an openai:URL[:MODEL] system")
    url, model = parsed
    key_env = "PODIUM_SYSTEM_API_KEY" if os.environ.get("PODIUM_SYSTEM_API_KEY") else None
    worker = ModelSpec(name=model, backend="openai", base_url=url, model=model,
                       api_key_env=key_env)
    pool = pool.model_copy(update={"workers": [worker]})
    settings = bare_question(pool.run)
    return pool.model_copy(update={"run": settings}), settings


def build_system(spec: str, pipeline: Pipeline) -> System:
    """A `System` from a spec string (see the module docstring)."""
    parts = spec.split(":")
    kind = parts[0]
    n = len(pipeline.pool.workers)
    if kind == "conductor" and len(parts) == 1:
        return System(spec, pipeline)
    if kind == "openai":
        parse_blackbox(spec)  # the pool is blackbox_pool's: worker 0 is the endpoint
        ask = Workflow.of([(0, SOLVE, ())])
        return System(spec, pipeline, lambda q, s: ask)
    if kind == "random" and len(parts) == 1:
        max_steps = pipeline.settings.max_steps

        def random_workflow(question: str, sample_id: int) -> Workflow:
            rng = random.Random(_seed(question, sample_id))
            steps = [Step(rng.randrange(n), rng.choice(RANDOM_SUBTASKS),
                          () if i == 0 else rng.choice([(), "all"]))
                     for i in range(rng.randint(1, max_steps))]
            return Workflow(tuple(steps))

        return System(spec, pipeline, random_workflow)
    if kind == "moa":
        workers = ([_worker(pipeline, w) for w in parts[1].split(",")] if len(parts) > 1
                   else list(range(n)))

        def moa(question: str, sample_id: int) -> Workflow:
            aggregator = random.Random(_seed(question, sample_id)).choice(workers)
            return Workflow(tuple([Step(w, PROPOSE, ()) for w in workers]
                                  + [Step(aggregator, AGGREGATE, "all")]))

        return System(spec, pipeline, moa)
    if kind == "pipeline":
        roles = ([_worker(pipeline, w) for w in parts[1].split(",")] if len(parts) > 1
                 else [0, 1 % n, 2 % n])
        if len(roles) != 3:
            raise ConfigError(f"--system {spec!r}: pipeline takes three workers, P,E,V.")
        wf = Workflow.of([(roles[0], PLAN, ()), (roles[1], EXECUTE, "all"),
                          (roles[2], VERIFY, "all")])
        return System(spec, pipeline, lambda q, s: wf)
    if kind in ("single", "self-moa", "vote", "reflect") and len(parts) >= 2:
        w = _worker(pipeline, parts[1])
        if kind == "single":
            wf = Workflow.of([(w, SOLVE, ())])
        elif kind == "self-moa":
            k = _count(parts, 4, spec)
            wf = Workflow(tuple([Step(w, PROPOSE, ())] * k + [Step(w, AGGREGATE, "all")]))
        elif kind == "vote":
            wf = Workflow(tuple([Step(w, SOLVE, ())] * _count(parts, 5, spec)))
        else:
            k = _count(parts, 5, spec)
            wf = Workflow(tuple([Step(w, SOLVE, ())] + [Step(w, REVISE, "all")] * (k - 1)))
        return System(spec, pipeline, lambda q, s: wf, vote=kind == "vote")
    raise ConfigError(
        f"Unknown --system {spec!r}. Use conductor, single:W, moa[:W1,W2], self-moa:W[:k], "
        "vote:W[:k], reflect:W[:k], pipeline[:P,E,V], random (W = a worker name or index) or "
        "openai:URL[:MODEL]."
    )
