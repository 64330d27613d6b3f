"""Pool files: the embedded default loads, bad files give errors that name the fix."""

from __future__ import annotations

import pytest

from podium.config import load_pool, pool_from_dict
from podium.errors import ConfigError


def minimal(**worker):
    return {"conductor": {"backend": "embedded"},
            "workers": [{"name": "w", "backend": "embedded", **worker}]}


def test_default_pool_is_the_embedded_team():
    pool = load_pool()
    assert pool.conductor.backend == "embedded" and pool.conductor.constrained is True
    assert len(pool.workers) >= 2
    assert len({(w.temperature, w.top_p) for w in pool.workers}) == len(pool.workers)
    assert pool.run.final_answer == "last_nonempty"


def test_prices_and_cost():
    pool = pool_from_dict(minimal(price={"input": 2.0, "output": 10.0}))
    assert pool.workers[0].cost(1_000_000, 100_000) == pytest.approx(3.0)
    assert pool_from_dict(minimal()).workers[0].cost(10, 10) is None


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (minimal(backend="telepathy"), "is not a backend"),
        (minimal(temprature=0.1), "unknown key 'workers.0.temprature'"),
        (minimal(max_concurrency=0), "max_concurrency"),
        ({"conductor": {"backend": "embedded"}, "workers": []}, "lists no workers"),
        ({"workers": [{"name": "w", "backend": "embedded"}]}, "no [conductor] table"),
        ({"conductor": {"backend": "embedded"},
          "workers": [{"name": "w", "backend": "embedded"}] * 2}, "more than once"),
        (minimal(backend="openai", model="m"), "has no base_url"),
        (minimal(backend="openai", base_url="http://x/v1"), "has no model"),
        (minimal(backend="function"), "has no function"),
        ({**minimal(), "run": {"fallback_worker": 3}}, "fallback_worker"),
        ({**minimal(), "run": {"final_answer": "first"}}, "run.final_answer"),
        (minimal(backend="openai", model="m", base_url="http://x/v1", prefill="vllm"),
         "'workers.0.prefill' = 'vllm' is not a prefill mode; use one of message, continue"),
    ],
)
def test_bad_pools(data, needle):
    with pytest.raises(ConfigError) as err:
        pool_from_dict(data, source="pool.toml")
    assert needle in str(err.value)


def test_missing_key_variable_names_it(monkeypatch):
    monkeypatch.delenv("PODIUM_NO_SUCH_KEY", raising=False)
    pool = pool_from_dict(minimal(backend="openai", model="m", base_url="http://x/v1",
                                  api_key_env="PODIUM_NO_SUCH_KEY"))
    with pytest.raises(ConfigError, match="PODIUM_NO_SUCH_KEY"):
        pool.workers[0].api_key()
    monkeypatch.setenv("PODIUM_NO_SUCH_KEY", "sk-1")
    assert pool.workers[0].api_key() == "sk-1"


def test_malformed_toml(tmp_path):
    bad = tmp_path / "p.toml"
    bad.write_text("[conductor\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_pool(bad)


@pytest.mark.parametrize(("line", "key", "needle"), [
    ("temperature = nan", "workers.0.temperature", "finite"),
    ("top_p = inf", "workers.0.top_p", "finite"),
    ("max_tokens = 1180591620717411303424", "workers.0.max_tokens", "less than or equal"),
    ("timeout_s = inf", "workers.0.timeout_s", "finite"),
    ("price = { input = inf, output = 1.0 }", "workers.0.price.input", "finite"),
    ('base_url = "http://[::1"', "workers.0.base_url", "is not a URL"),
    ('base_url = "http://host:port/v1"', "workers.0.base_url", "is not a URL"),
])
def test_non_finite_absurd_or_unparseable_settings_are_refused_at_load(line, key, needle,
                                                                       tmp_path):
    """Read from a real TOML file: a ConfigError naming the key, never an accepted NaN, an
    `Infinity` in --json, or "Unexpected error (ValueError)" at the first call."""
    path = tmp_path / "pool.toml"
    path.write_text('[conductor]\nbackend = "embedded"\n[[workers]]\nname = "w"\n'
                    f'backend = "openai"\nmodel = "m"\nbase_url = "http://x/v1"\n{line}\n'
                    .replace('base_url = "http://x/v1"\nbase_url', 'base_url'))
    with pytest.raises(ConfigError) as err:
        load_pool(path)
    assert f"'{key}'" in str(err.value) and needle in str(err.value)
    assert "docs/pools.md" in str(err.value)


def test_run_caps_must_be_finite():
    with pytest.raises(ConfigError, match="run.max_cost"):
        pool_from_dict({**minimal(), "run": {"max_cost": float("inf")}})


def test_credentials_in_a_base_url_are_registered_as_secrets():
    from podium.redact import scrub

    pool_from_dict(minimal(backend="openai", model="m",
                           base_url="https://bob:hunter2-long-password@gpu.example/v1"))
    assert scrub("auth hunter2-long-password") == "auth ***"
    assert scrub("bob:hunter2-long-password@") == "***@"
