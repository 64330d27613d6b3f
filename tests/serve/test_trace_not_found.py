"""A trace id that is not there: the 404 speaks of the API key only on a server that has
keys; on one without (`--no-auth`) it speaks of no key."""

from __future__ import annotations

import httpx
from serve_helpers import KEY, ThreadServer, auth

from podium.serve.traces.files import new_id


def test_a_missing_trace_on_a_server_without_keys_names_no_key(pool_file, tmp_path):
    with ThreadServer(pool_file, tmp_path / "traces") as srv, \
            httpx.Client(base_url=srv.base, timeout=30, trust_env=False) as http:
        for path in (f"/v1/traces/{new_id()}", f"/traces/{new_id()}"):
            resp = http.get(path)
            assert resp.status_code == 404, path
            error = resp.json()["error"]
            assert error["code"] == "trace_not_found"
            assert error["message"].startswith("No trace has that id"), error
            assert "key" not in error["message"].lower(), error


def test_a_missing_trace_on_a_server_with_keys_names_the_key(http):
    resp = http.get(f"/v1/traces/{new_id()}", headers=auth(KEY))
    error = resp.json()["error"]
    assert resp.status_code == 404 and error["code"] == "trace_not_found"
    assert error["message"].startswith("No trace of this API key has that id"), error
    assert "tr- and 32 hex digits" in error["message"]
    assert KEY not in error["message"]
