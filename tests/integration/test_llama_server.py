"""Real workflows on a real OpenAI-compatible server (llama.cpp serving SmolLM2 on localhost)."""

from __future__ import annotations

import asyncio

import pytest

from podium.conductor.parse import parse_workflow
from podium.config import RunSettings, pool_from_dict
from podium.llm.openai_compat import OpenAICompatClient
from podium.pipeline import Pipeline
from podium.workflow.execute import ExecOptions, Team, execute_workflow
from podium.workflow.types import Workflow


def server_pool(base_url: str, *, constrained: bool = True, recursion: int = 0) -> dict:
    common = {"backend": "openai", "model": "smollm2", "base_url": base_url}
    return {
        "conductor": {**common, "temperature": 0.3, "max_tokens": 320,
                      "grammar_style": "llama_cpp", "constrained": constrained,
                      "price": {"input": 1.0, "output": 2.0}},
        "workers": [
            {**common, "name": "precise", "temperature": 0.1, "max_tokens": 48,
             "price": {"input": 0.5, "output": 1.5}},
            {**common, "name": "creative", "temperature": 0.9, "max_tokens": 48,
             "price": {"input": 0.5, "output": 1.5}},
        ],
        "run": {"recursion": recursion, "max_steps": 2, "fewshots": "short",
                "max_reason_lines": 1, "max_reason_chars": 80},  # a short plan
    }


def test_workflow_runs_on_server_workers(llama_server):
    pool = pool_from_dict(server_pool(llama_server))
    clients = [OpenAICompatClient(w) for w in pool.workers]
    wf = Workflow.of([(0, "Give one fact about the number 7.", ()),
                      (1, "Give one fact about the number 9.", ()),
                      (0, "Combine both facts into one sentence.", "all")])

    async def go():
        run = await execute_workflow(wf, "Tell me about 7 and 9.", Team(clients, 2),
                                     options=ExecOptions())
        for c in clients:
            await c.aclose()
        return run

    run = asyncio.run(go())
    assert [s.status for s in run.steps] == ["ok", "ok", "ok"]
    assert all(s.completion_tokens > 0 and s.prompt_tokens > 0 for s in run.steps)
    assert all(s.prefill == "as_message" for s in run.steps)
    assert run.answer == run.steps[2].response
    # step 2 saw both earlier responses (non-empty ones), steps 0 and 1 saw none
    last = run.steps[2].messages[0]["content"]
    for earlier in run.steps[:2]:
        if earlier.response.strip():
            assert earlier.response.strip() in last
    assert run.steps[1].response.strip() not in run.steps[0].messages[0]["content"]


def test_constrained_conductor_over_http_writes_valid_workflows(llama_server):
    pool = pool_from_dict(server_pool(llama_server))

    async def go():
        async with Pipeline(pool) as pipe:
            return [await pipe.ask("What is 6 times 7?")]

    for result in asyncio.run(go()):
        turn = result.rounds[0].conductor
        assert turn.constrained and turn.error is None
        assert turn.parse_reason is None and not turn.fallback
        # the completion itself reads back to the executed workflow
        assert parse_workflow(turn.completion, num_workers=2) == turn.workflow
        assert all(s.status == "ok" for s in result.rounds[0].execution.steps)
        assert isinstance(result.answer, str)
        usage = result.outcome.used
        assert usage.calls == 1 + len(turn.workflow)
        assert usage.cost is not None and usage.cost > 0  # every model in the pool is priced
        data = result.to_json()
        assert {"answer", "workflow", "steps", "used", "paid"} <= data.keys()


@pytest.mark.slow  # two Conductor rounds on a real server; `make test-all`
def test_recursion_round_over_http(llama_server):
    pool = pool_from_dict(server_pool(llama_server, recursion=1))
    settings = RunSettings(recursion=1)

    async def go():
        async with Pipeline(pool, settings=settings) as pipe:
            return await pipe.ask("What is 2 + 2?")

    result = asyncio.run(go())
    assert len(result.rounds) == 2
    second = result.rounds[1]
    assert second.conductor.round == 1
    # the round-1 prompt shows the Conductor the round-0 answer
    shown = second.conductor.messages[3]["content"]
    assert result.rounds[0].answer.strip()[:40] in shown
    if second.conductor.kept:
        assert second.execution is None and result.answer == result.rounds[0].answer
        assert result.outcome.answer_round == 0
    else:  # a new workflow ran; its answer replaces round 0's unless it produced none
        assert second.execution is not None
        assert result.answer == (second.answer if second.answer is not None
                                 else result.rounds[0].answer)
