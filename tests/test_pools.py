"""Real pools on localhost: profiles on the wire, sub-pools, budgets, pool commands, secrets."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

import pytest
import support
from support import podium

from podium.conductor.view import choose_workers, make_view, sample_subpool
from podium.config import RunSettings, load_pool, pool_from_dict
from podium.errors import ConfigError
from podium.llm.registry import build_client
from podium.pipeline import Pipeline
from podium.testing import ScriptedServer

ROOT = Path(__file__).resolve().parents[1]
SECRET = "sk-podium-test-SECRET-7f3a9c"
PLAN = 'model_id = [0, 1]\nsubtasks = ["Solve it.", "Check it."]\naccess_list = [[], "all"]'


def fp(key: str) -> str:
    return hashlib.sha256(f"Bearer {key}".encode()).hexdigest()[:16]


def test_paper_pools_list_the_papers_workers_in_order():
    names = ["gemini-2.5-pro", "claude-sonnet-4", "gpt-5", "qwen3-32b-direct",
             "gemma-3-27b-it", "qwen3-32b-reasoning", "r1-distill-qwen-32b"]
    con = load_pool(ROOT / "configs/pools/paper-constrained.toml")
    unc = load_pool(ROOT / "configs/pools/paper-unconstrained.toml")
    assert [w.name for w in con.workers] == names == [w.name for w in unc.workers]
    assert all(w.max_tokens == 4096 for w in con.workers)
    assert all(w.max_tokens > 4096 for w in unc.workers)
    assert all(w.price is not None for w in con.workers)
    gpt = con.workers[2]
    assert (gpt.reasoning_effort, gpt.max_tokens_param) == ("minimal", "max_completion_tokens")
    assert (con.workers[3].thinking, con.workers[5].thinking) == (False, True)
    assert [w.backend for w in con.workers[:3]] == ["gemini", "anthropic", "openai"]
    # the vLLM-served Conductor continues its prompt's assistant prefill
    assert con.conductor.prefill == unc.conductor.prefill == "continue"
    assert load_pool(ROOT / "configs/pools/local.toml").conductor.backend == "embedded"


def test_openai_profile_settings_reach_the_wire():
    with ScriptedServer(latency=0.0) as server:
        gpt = pool_from_dict({
            "conductor": {"backend": "embedded"},
            "workers": [
                {"name": "gpt", "backend": "openai", "model": "gpt-5",
                 "base_url": server.base_url, "max_tokens": 4096, "temperature": 1.0,
                 "max_tokens_param": "max_completion_tokens", "reasoning_effort": "minimal"},
                {"name": "qwen", "backend": "openai", "model": "qwen3",
                 "base_url": server.base_url, "max_tokens": 64, "thinking": False,
                 "extra_body": {"top_k": 20}},
            ],
        }).workers

        async def go():
            for spec in gpt:
                client = build_client(spec)
                await client.chat([{"role": "user", "content": "hi"}])
                await client.aclose()

        asyncio.run(go())
        log = {e["model"]: e["params"] for e in server.stats()["log"]}
    assert log["gpt-5"]["max_completion_tokens"] == 4096 and "max_tokens" not in log["gpt-5"]
    assert log["gpt-5"]["reasoning_effort"] == "minimal"
    assert log["qwen3"]["chat_template_kwargs"] == {"enable_thinking": False}
    assert log["qwen3"]["top_k"] == 20 and log["qwen3"]["max_tokens"] == 64


def test_subpool_views():
    workers = pool_from_dict({
        "conductor": {"backend": "embedded"},
        "workers": [{"name": n, "backend": "embedded"} for n in "abcd"],
    }).workers
    assert choose_workers(workers, ["c", "a"]) == [2, 0]
    with pytest.raises(ConfigError, match="does not have"):
        choose_workers(workers, ["zz"])
    original = make_view(workers, [2, 0])
    assert original.shown_ids == [2, 0] and original.id_space == 4
    reindexed = make_view(workers, [2, 0], "reindexed")
    assert reindexed.shown_ids == [0, 1] and reindexed.id_space == 2
    import random

    rng = random.Random(0)
    draws = [sample_subpool(7, rng) for _ in range(200)]
    assert {len(d) for d in draws} == set(range(1, 8))
    assert all(d == sorted(set(d)) for d in draws)
    grouped = sample_subpool(7, rng, groups={"closed": [0, 1, 2]}, group_prob=1.0)
    assert grouped == [0, 1, 2]


def _server_pool(server, conductor_model="conductor", **run) -> dict:
    def w(name, model):
        return {"name": name, "backend": "openai", "model": model, "base_url": server.base_url,
                "retries": 0, "price": {"input": 1.0, "output": 1.0}}

    return {"conductor": {**w("conductor", conductor_model), "constrained": False},
            "workers": [w("w0", "m0"), w("w1", "m1"), w("w2", "m2")],
            "run": {"cache": False, **run}}


@pytest.mark.parametrize("mode", ["original", "reindexed"])
def test_pipeline_runs_a_subpool(mode):
    # the Conductor (scripted) always names ids 0 and 1 of what it is shown
    with ScriptedServer(latency=0.0, reply_by_model={"conductor": PLAN}) as server:
        pool = pool_from_dict(_server_pool(server, subpool_ids=mode))

        async def go():
            async with Pipeline(pool) as pipe:
                return await pipe.ask("What is 2 + 2?", workers=[2, 1])

        result = asyncio.run(go())
        models = [e["model"] for e in server.stats()["log"]]
    shown = result.rounds[0].conductor.messages[1]["content"]
    if mode == "original":
        # shown as ids 2 and 1: the plan's id 0 is outside the sub-pool -> fallback on worker 2
        assert "Model id 2" in shown and "Model id 0" not in shown
        assert result.rounds[0].conductor.parse_reason == "bad_model_id"
        assert models == ["conductor", "m2"]
    else:
        # shown as 0 and 1, which map back to pool workers 2 and 1
        assert "Model id 0" in shown and "Model id 1" in shown and "Model id 2" not in shown
        assert [s.worker for s in result.rounds[0].execution.steps] == [2, 1]
        assert models == ["conductor", "m2", "m1"]


def test_budget_stops_a_workflow_before_it_spends_more():
    plan = ('model_id = [0, 1, 2]\nsubtasks = ["A.", "B.", "C."]\n'
            'access_list = [[], "all", "all"]')
    with ScriptedServer(latency=0.0, reply_by_model={"conductor": plan}) as server:
        pool = pool_from_dict(_server_pool(server))

        async def go(settings):
            async with Pipeline(pool, settings=settings) as pipe:
                return await pipe.ask("q")

        capped = asyncio.run(go(RunSettings(cache=False, max_calls=2)))
        n_capped = len(server.stats()["log"])
        server.reset()
        free = asyncio.run(go(RunSettings(cache=False)))
    steps = capped.rounds[0].execution.steps
    assert [s.status for s in steps] == ["ok", "skipped", "skipped"]
    assert "max_calls = 2" in steps[1].error and capped.stopped and capped.answer is None
    assert n_capped == 2 and capped.outcome.used.calls == 2  # the Conductor + one worker
    assert free.outcome.used.calls == 4 and free.stopped is None


def test_secrets_never_leave_their_endpoint(tmp_path):
    """A key goes only to its worker's endpoint and never into output, traces or the cache."""
    with ScriptedServer(latency=0.0, reply_by_model={"conductor": PLAN}) as keyed, \
            ScriptedServer(latency=0.0, faults_by_model={"bad": "401"}) as other:
        pool = tmp_path / "pool.toml"
        pool.write_text(
            f'[conductor]\nbackend = "openai"\nmodel = "conductor"\nbase_url = "{keyed.base_url}"\n'
            f'api_key_env = "PODIUM_TEST_SECRET"\n'
            f'[[workers]]\nname = "keyed"\nbackend = "openai"\nmodel = "m0"\n'
            f'base_url = "{keyed.base_url}"\napi_key_env = "PODIUM_TEST_SECRET"\n'
            f'[[workers]]\nname = "bad"\nbackend = "openai"\nmodel = "bad"\n'
            f'base_url = "{other.base_url}"\napi_key_env = "PODIUM_OTHER_SECRET"\nretries = 0\n'
        )
        cache_dir, trace = tmp_path / "cache", tmp_path / "trace.json"
        env = {"PODIUM_TEST_SECRET": SECRET, "PODIUM_OTHER_SECRET": "sk-other-key-42",
               "PODIUM_CACHE_DIR": str(cache_dir)}
        runs = [podium("ask", "hi", "--pool", str(pool), "--trace", str(trace), "--debug",
                       env=env) for _ in range(2)]  # the second run is served by the cache
        shown = [podium("pool", "show", "--pool", str(pool), env=env),
                 podium("pool", "check", "--pool", str(pool), env=env)]
        keyed_fps = {e["auth_fingerprint"] for e in keyed.stats()["log"]}
        other_fps = {e["auth_fingerprint"] for e in other.stats()["log"]}
    data = json.loads(trace.read_text())
    worker_bad = [s for s in data["steps"] if s["worker_name"] == "bad"][0]
    assert worker_bad["status"] == "error" and worker_bad["error_kind"] == "auth"
    assert data["cache_hits"] >= 2  # run 2: conductor and the keyed worker from cache
    assert keyed_fps == {fp(SECRET)}  # the key reached its own endpoint ...
    assert fp(SECRET) not in other_fps  # ... and nowhere else
    assert shown[0].returncode == 0 and "$PODIUM_TEST_SECRET" in shown[0].stdout
    assert shown[1].returncode == 1 and "auth" in shown[1].stdout
    blobs = [p.read_bytes() for p in cache_dir.rglob("*") if p.is_file()] + [trace.read_bytes()]
    texts = [r.stdout + r.stderr for r in runs + shown]
    for secret in (SECRET, "sk-other-key-42"):
        assert all(secret not in t for t in texts)
        assert all(secret.encode() not in b for b in blobs)


@pytest.mark.parametrize("password", ["s3cret-password-77", "pw12"])
def test_credentials_in_a_base_url_are_never_shown(password, tmp_path):
    """`pool show`, `pool check` (its failure names the URL it could not reach) and `ask`'s
    JSON and trace show the URL with its userinfo masked; a password long enough to register
    is masked wherever it comes back."""
    from typer.testing import CliRunner

    from podium.cli.main import app

    free_port = support.free_port()  # nothing listens there
    pool = tmp_path / "pool.toml"
    pool.write_text(
        '[conductor]\nbackend = "function"\nfunction = "podium.testing.workers:one_step"\n'
        f'[[workers]]\nname = "w"\nbackend = "openai"\nmodel = "m"\nretries = 0\n'
        f'base_url = "http://alice:{password}@127.0.0.1:{free_port}/v1"\n'
        '[run]\ncache = false\n')
    runner, trace = CliRunner(), tmp_path / "trace.json"
    shown = runner.invoke(app, ["pool", "show", "--pool", str(pool)], env={"COLUMNS": "300"})
    checked = runner.invoke(app, ["pool", "check", "--pool", str(pool)], env={"COLUMNS": "300"})
    asked = runner.invoke(app, ["ask", "hi", "--pool", str(pool), "--json", "--no-cache",
                                "--trace", str(trace)])
    assert shown.exit_code == 0 and "http://***@127.0.0.1" in shown.output, shown.output
    assert checked.exit_code == 1 and "could not reach http://***@127.0.0.1" in checked.output
    assert trace.exists()
    for text in (shown.output, checked.output, asked.output, trace.read_text()):
        assert password not in text and "alice:" not in text


def test_credentials_in_a_base_url_and_a_key_are_refused_together(monkeypatch):
    """Two Authorization headers cannot be sent: a ConfigError naming the fix, not the HTTP
    library's ValueError at the first call."""
    monkeypatch.setenv("PODIUM_CRED_KEY", "sk-cred-test-key-0001")
    pool = pool_from_dict({"conductor": {"backend": "embedded"}, "workers": [
        {"name": "w", "backend": "openai", "model": "m", "api_key_env": "PODIUM_CRED_KEY",
         "base_url": "http://alice:pw@127.0.0.1:9/v1"}]})
    with pytest.raises(ConfigError, match="carries credentials") as err:
        build_client(pool.workers[0])
    assert "http://***@127.0.0.1:9/v1" in str(err.value) and "pw@" not in str(err.value)
