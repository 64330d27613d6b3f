"""The trace viewer: the page for a real run's trace, drawn by a real headless Chromium (the
Debian `chromium` package; the browser tests skip, saying so, where it is not installed), the
pages `podium serve` serves, and `podium trace view`."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from serve_helpers import KEY
from support import podium

from podium.config import pool_from_dict
from podium.pipeline import Pipeline
from podium.viewer import trace_page
from podium.workflow.types import Workflow

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="the Debian `chromium` package "
                                    "is not installed (apt-get install chromium)")
ARTIFACTS = Path(os.environ.get("PODIUM_TEST_ARTIFACTS", "runs/test-artifacts"))
HOSTILE = "</script><script>document.title='owned'</script>"


def real_trace() -> dict:
    """A real run of a fan-out workflow (two proposers, an aggregator seeing both) on exact
    function workers; the second proposer's response carries markup that must stay text."""
    pool = pool_from_dict({
        "conductor": {"backend": "function", "function": "podium.testing.workers:one_step"},
        "workers": [{"name": "adder", "backend": "function",
                     "function": "podium.testing.workers:adder"},
                    {"name": "zero", "backend": "function",
                     "function": "podium.testing.workers:zero"}],
        "run": {"cache": False}})
    workflow = Workflow.of([(0, "Add the numbers.", ()), (1, HOSTILE, ()),
                            (0, "Compare both answers and give the final one.", "all")])

    async def run():
        async with Pipeline(pool) as pipe:
            return await pipe.run_workflow("What is 2 + 5?", workflow)

    return asyncio.run(run()).to_json()


def test_the_page_embeds_the_trace_as_data_not_markup():
    page = trace_page(real_trace())
    assert HOSTILE not in page  # no way out of the data <script>
    data = re.search(r"<script type='application/json' id='trace'>(.*?)</script>", page, re.S)
    assert json.loads(data.group(1))["steps"][1]["subtask"] == HOSTILE


def chromium(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                           "--disable-background-networking", *args],
                          capture_output=True, text=True, timeout=120)


@needs_chromium
def test_chromium_draws_every_step_and_edge(tmp_path):
    page = tmp_path / "trace.html"
    page.write_text(trace_page(real_trace()), "utf-8")
    dom = chromium("--dump-dom", page.as_uri()).stdout
    assert 'data-drawn="3"' in dom  # the script ran to the end
    assert len(re.findall(r'<g class="node ok', dom)) == 3
    assert len(re.findall(r'class="edge"', dom)) == 2  # the aggregator sees both proposers
    assert 'node ok final' in dom  # the answering step is marked
    # the run's usage and its split, as `podium ask` prints them (no Conductor call here)
    assert re.search(r"Conductor 0 calls · 0 tokens; workers 3 calls · \d+ tokens", dom)
    assert "<title>owned</title>" not in dom and "document.title=" in dom  # shown as text
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "trace-viewer.png"
    chromium("--window-size=1400,1100", f"--screenshot={shot}", page.as_uri())
    assert shot.stat().st_size > 10_000


def basic(key: str) -> dict:
    return {"Authorization": "Basic " + base64.b64encode(f"me:{key}".encode()).decode()}


def test_served_pages_need_a_key_and_a_browser_can_give_it(server, http):
    reply = http.post("/v1/chat/completions", headers={"Authorization": f"Bearer {KEY}"},
                      json={"model": "podium", "return_trace_id": True,
                            "messages": [{"role": "user", "content": "What is 4 + 4?"}]})
    tid = reply.json()["podium_trace_id"]
    denied = http.get(f"/traces/{tid}")
    assert denied.status_code == 401
    assert denied.headers["www-authenticate"].startswith("Basic")  # the browser asks for it
    assert http.get(f"/traces/{tid}", headers=basic("wrong")).status_code == 401
    page = http.get(f"/traces/{tid}", headers=basic(KEY))
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "What is 4 + 4?" in page.text and tid in page.text
    listing = http.get("/traces", headers={"Authorization": f"Bearer {KEY}"})
    assert listing.status_code == 200 and f"/traces/{tid}" in listing.text
    assert http.get("/traces/tr-" + "0" * 32, headers=basic(KEY)).status_code == 404
    assert http.get("/traces/../../etc/passwd", headers=basic(KEY)).status_code == 404


def test_trace_view_writes_an_owner_only_page(tmp_path):
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps(real_trace()))
    proc = podium("trace", "view", str(trace), "--no-open")
    assert proc.returncode == 0, proc.stderr
    page = tmp_path / "t.html"
    assert page.is_file() and (page.stat().st_mode & 0o777) == 0o600
    assert "What is 2 + 5?" in page.read_text()


@pytest.mark.parametrize("content", [b"not json", b'{"a": 1}', b"\xff\xfe"])
def test_trace_view_refuses_what_is_not_a_trace(tmp_path, content):
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    proc = podium("trace", "view", str(bad), "--no-open")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "not a" in proc.stdout + proc.stderr
