"""Baseline systems run through the same executor: shapes, calls, votes, determinism."""

from __future__ import annotations

import asyncio

import pytest

from podium.baselines import build_system, majority_answer
from podium.config import pool_from_dict
from podium.errors import ConfigError
from podium.llm.base import ChatResponse
from podium.pipeline import Pipeline
from podium.testing import ScriptedServer

POOL = {
    "conductor": {"backend": "function", "function": "x:y"},
    "workers": [{"name": n, "backend": "function", "function": "x:y"} for n in ("a", "b", "c")],
}


class Recorder:
    """Function workers that answer from a script and log who was asked what."""

    def __init__(self, replies=None):
        self.calls: list[tuple[str, str]] = []
        self.replies = replies or {}

    def client(self, name):
        from podium.config import ModelSpec
        from podium.llm.function import FunctionClient

        async def fn(messages):
            self.calls.append((name, messages[0]["content"]))
            n = sum(c[0] == name for c in self.calls)
            text = self.replies.get(name, lambda k: f"{name}-{k} <answer>{name}</answer>")(n)
            return ChatResponse(text=text, prompt_tokens=5, completion_tokens=5)

        return FunctionClient(ModelSpec(name=name, backend="function", function="x:y"), fn=fn)


def run(spec: str, rec: Recorder, question: str = "Q?", sample_id: int = 0):
    pool = pool_from_dict(POOL)
    clients = (rec.client("conductor"), [rec.client(n) for n in ("a", "b", "c")])

    async def go():
        async with Pipeline(pool, clients=clients) as pipe:
            return await build_system(spec, pipe).run(question, sample_id=sample_id)

    return asyncio.run(go())


def test_single_worker():
    rec = Recorder()
    result = run("single:b", rec)
    assert [c[0] for c in rec.calls] == ["b"]
    assert result.answer.startswith("b-1") and result.outcome.used.calls == 1  # no Conductor call


def test_moa_proposers_then_aggregator_seeing_all():
    rec = Recorder()
    result = run("moa", rec)
    names = [c[0] for c in rec.calls]
    assert sorted(names[:3]) == ["a", "b", "c"] and len(names) == 4
    aggregator_prompt = rec.calls[3][1]
    for reply in ("a-1", "b-1", "c-1"):
        assert reply in aggregator_prompt
    assert result.outcome.used.calls == 4


def test_self_moa_and_reflect():
    rec = Recorder()
    run("self-moa:a:3", rec)
    assert [c[0] for c in rec.calls] == ["a"] * 4
    rec = Recorder()
    run("reflect:c:3", rec)
    assert [c[0] for c in rec.calls] == ["c"] * 3
    assert "c-1" in rec.calls[2][1] and "c-2" in rec.calls[2][1]  # sees every attempt


def test_vote_takes_the_majority_answer():
    answers = {1: "7", 2: "8", 3: "7", 4: "9", 5: "8 "}
    rec = Recorder({"a": lambda k: f"try {k} <answer>{answers[k]}</answer>"})
    result = run("vote:a:5", rec)
    assert len(rec.calls) == 5
    assert result.answer == "try 1 <answer>7</answer>"  # 7 and 8 tie; the first seen wins
    assert majority_answer(["no tag", None]) is None


def test_pipeline_and_random_are_deterministic():
    rec = Recorder()
    run("pipeline:a,b,c", rec)
    assert [c[0] for c in rec.calls] == ["a", "b", "c"]
    shapes = []
    for _ in range(2):
        rec = Recorder()
        result = run("random", rec, question="same question", sample_id=3)
        shapes.append(result.rounds[0].execution.workflow)
    assert shapes[0] == shapes[1]
    other = [run("random", Recorder(), question=f"q{i}").rounds[0].execution.workflow
             for i in range(8)]
    assert len(set(other)) > 1


@pytest.mark.parametrize("spec", ["single:zz", "vote:a:0", "pipeline:a,b", "nonsense", "single"])
def test_bad_specs(spec):
    with pytest.raises(ConfigError):
        run(spec, Recorder())


def test_repeated_identical_steps_are_not_collapsed_by_the_cache(tmp_path):
    """k samples of one worker are k real calls, even with the response cache on."""
    with ScriptedServer(latency=0.0) as server:
        pool = pool_from_dict({
            "conductor": {"backend": "embedded"},  # loaded lazily: never called here
            "workers": [{"name": "w", "backend": "openai", "model": "m",
                         "base_url": server.base_url}],
            "run": {"cache_path": str(tmp_path / "c.sqlite")},
        })

        async def go():
            async with Pipeline(pool) as pipe:
                first = await build_system("vote:w:4", pipe).run("Q", sample_id=0)
                again = await build_system("vote:w:4", pipe).run("Q", sample_id=0)
                return first, again

        first, again = asyncio.run(go())
        requests = server.stats()["overall"]["requests"]
    assert requests == 4  # four distinct samples; the rerun is served from the cache
    assert first.outcome.paid.calls == 4 and again.outcome.cache_hits == 4
    assert again.outcome.paid.calls == 0 and again.outcome.used == first.outcome.used
