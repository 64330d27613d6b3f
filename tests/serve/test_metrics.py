"""`GET /metrics`: a real server's counts, read back by prometheus-client's own parser."""

from __future__ import annotations

import httpx
import pytest
from serve_helpers import KEY, ThreadServer

parser = pytest.importorskip("prometheus_client.parser")


def scrape(base: str) -> dict[tuple[str, tuple], float]:
    """Every sample of the page: (name, sorted labels) -> value."""
    reply = httpx.get(f"{base}/metrics", headers={"Authorization": f"Bearer {KEY}"})
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in parser.text_string_to_metric_families(reply.text)
            for s in family.samples}


def test_metrics_count_requests_errors_tokens_and_calls(pool_file, tmp_path):
    auth = {"Authorization": f"Bearer {KEY}"}
    ask = {"model": "podium", "messages": [{"role": "user", "content": "What is 2 + 3?"}]}
    with ThreadServer(pool_file, tmp_path / "traces", keys=(KEY,)) as srv, \
            httpx.Client(base_url=srv.base, headers=auth, timeout=30) as client:
        answers = [client.post("/v1/chat/completions", json=ask) for _ in range(2)]
        assert [r.status_code for r in answers] == [200, 200]
        used = [r.json()["usage"] for r in answers]
        calls = sum(r.json()["podium"]["calls"] for r in answers)
        assert client.post("/v1/chat/completions", json={**ask, "model": "nope"}
                           ).status_code == 404
        assert client.get("/v1/traces/tr-" + "0" * 32).status_code == 404
        assert client.get("/no/such/route").status_code == 404
        assert httpx.get(f"{srv.base}/metrics").status_code == 401  # the key is asked for
        got = scrape(srv.base)

    def value(name: str, **labels: str) -> float:
        return got.get((name, tuple(sorted(labels.items()))), 0.0)

    chat = {"route": "/v1/chat/completions", "method": "POST"}
    assert value("podium_requests_total", **chat, status="200") == 2
    assert value("podium_requests_total", **chat, status="404") == 1
    assert value("podium_requests_total", route="/v1/traces/{id}", method="GET",
                 status="404") == 1  # the id is not a label
    assert value("podium_requests_total", route="other", method="GET", status="404") == 1
    assert value("podium_errors_total", code="model_not_found") == 1
    assert value("podium_errors_total", code="trace_not_found") == 1
    assert value("podium_errors_total", code="not_found") == 1
    assert value("podium_request_duration_seconds_count", route="/v1/chat/completions") == 3
    assert value("podium_tokens_total", kind="prompt") == sum(u["prompt_tokens"] for u in used)
    assert value("podium_tokens_total", kind="completion") == sum(
        u["completion_tokens"] for u in used)
    assert value("podium_model_calls_total") == calls > 0
    assert value("podium_runs_in_flight") == 0
