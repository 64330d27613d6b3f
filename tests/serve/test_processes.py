"""`podium serve --processes N`: several server processes on one port, sharing the trace
folder, each with its share of the pool's limits, all stopped gracefully by one SIGTERM; a
port in use refused, never shared; a process that cannot start stops the server, one that
keeps dying is given up on."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import re
import signal
import socket
import subprocess
import threading
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from serve_helpers import (
    CliServer,
    ThreadServer,
    auth,
    podium_cli,
    sigterm_with_a_request_in_flight,
)

from podium.cli.serve import ARGS_ENV, ServeArgs, _banner
from podium.config import pool_from_dict, split_limits
from podium.serve import processes
from podium.serve.processes import listeners, supervise
from podium.serve.traces.files import new_id

KEY = "sk-serve-processes-test-6a0c93"


def test_each_process_gets_its_share_of_the_limits_of_remote_models_only():
    team = pool_from_dict({
        "conductor": {"backend": "openai", "base_url": "http://127.0.0.1:1/v1", "model": "c",
                      "max_concurrency": 8, "rpm": 100},
        "workers": [
            {"name": "remote", "backend": "openai", "base_url": "http://127.0.0.1:1/v1",
             "model": "r", "max_concurrency": 2, "tpm": 9000},
            {"name": "local", "backend": "function",
             "function": "podium.testing.workers:adder", "max_concurrency": 1},
        ]})
    split, notes = split_limits(team, 3, "--processes")
    assert (split.conductor.max_concurrency, split.conductor.rpm) == (2, 33)
    remote, local = split.workers
    assert (remote.max_concurrency, remote.tpm, remote.rpm) == (1, 3000, None)
    assert local == team.workers[1]  # loaded by every process: its limit is its own
    assert notes == ["remote's max_concurrency is 2, below --processes 3: each process "
                     "allows 1, 3 in all"]
    assert split_limits(team, 1) == (team, [])
    banner = _banner(ServeArgs(processes=3, max_concurrency=2, no_auth=True), (), team)
    assert "3 processes, each with its share of the limits (1 runs in flight)" in banner
    assert "podium: note: remote's max_concurrency is 2" in banner
    assert "podium: note: --max-concurrency 2 is below --processes 3" in banner


def ask(srv: CliServer, question: str, **options) -> httpx.Response:
    """One request on a connection of its own (so the kernel may hand it to any process)."""
    return httpx.post(f"{srv.base}/v1/chat/completions", timeout=30, trust_env=False,
                      headers={"Authorization": f"Bearer {KEY}"},
                      json={"model": "podium", "return_trace_id": True, **options,
                            "messages": [{"role": "user", "content": question}]})


def test_processes_share_the_port_and_the_traces_and_stop_gracefully(pool_file, tmp_path):
    srv = CliServer(["--pool", str(pool_file), "--api-key-env", "PODIUM_SERVE_KEY",
                     "--processes", "2", "--max-concurrency", "16", "--trace-dir",
                     str(tmp_path / "traces"), "--graceful-timeout", "20"],
                    tmp_path / "serve.log", env={"PODIUM_SERVE_KEY": KEY})
    try:
        srv.wait()
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            replies = list(pool.map(lambda i: ask(srv, f"What is {i} + 1?"), range(16)))
        assert all(r.status_code == 200 for r in replies), [r.text for r in replies]
        assert [r.json()["choices"][0]["message"]["content"] for r in replies] == \
            [f"<answer>{i + 1}</answer>" for i in range(16)]
        ids = [r.headers["x-podium-trace-id"] for r in replies]
        for tid, i in zip(ids, range(16), strict=True):  # from whichever process answers
            trace = httpx.get(f"{srv.base}/v1/traces/{tid}", trust_env=False,
                              headers={"Authorization": f"Bearer {KEY}"})
            assert trace.status_code == 200
            assert trace.json()["answer"] == f"<answer>{i + 1}</answer>"
        listed = httpx.get(f"{srv.base}/traces", trust_env=False, auth=("", KEY)).text
        assert all(tid in listed for tid in ids)  # every process's traces, on either's page
        for _ in range(3):  # whichever process answers the scrape counts both processes' runs
            page = httpx.get(f"{srv.base}/metrics", trust_env=False,
                             headers={"Authorization": f"Bearer {KEY}"}).text
            counted = {tuple(sorted(s.labels.items())): s.value
                       for f in text_string_to_metric_families(page) for s in f.samples
                       if s.name == "podium_requests_total"}
            assert counted[(("method", "POST"), ("route", "/v1/chat/completions"),
                            ("status", "200"))] == 16

        reply = sigterm_with_a_request_in_flight(srv, KEY)
        assert reply.status_code == 200, reply.text
        assert reply.json()["choices"][0]["message"]["content"] == "<answer>42</answer>"
        assert srv.proc.wait(30) == 0
    finally:
        srv.stop()
    log = srv.log.read_text()
    assert len(set(re.findall(r"Started server process \[(\d+)\]", log))) == 2
    assert "2 processes, each with its share of the limits (8 runs in flight)" in log
    assert "stopped 2 server processes" in log and KEY not in log


@pytest.mark.parametrize("shared", [True, False])
def test_a_shared_folder_has_the_trace_before_its_id_is_returned(pool_file, tmp_path, shared):
    """Another process can read only what is on disk: with a shared folder the answer that
    returns a trace id waits until the writer process has written the file (here: stopped,
    then let go); alone, it does not wait."""
    key = "sk-shared-test-1b2c3d4e"
    with ThreadServer(pool_file, tmp_path / "traces", keys=(key,),
                      shared_traces=shared) as srv:
        traces = srv.app.state.server.traces
        assert traces.put(new_id(), {"n": 0}).result(20)  # the writer is up
        writer = traces.writer._proc
        writer.send_signal(signal.SIGSTOP)
        got: dict = {}

        def ask_for_trace() -> None:
            got["r"] = httpx.post(f"{srv.base}/v1/chat/completions", trust_env=False,
                                  timeout=30, headers=auth(key),
                                  json={"model": "podium", "return_trace_id": True,
                                        "messages": [{"role": "user",
                                                      "content": "What is 2 + 2?"}]})

        asking = threading.Thread(target=ask_for_trace)
        asking.start()
        try:
            asking.join(1.0)
            assert asking.is_alive() == shared  # shared: waiting for the stopped writer
            if not shared:
                tid = got["r"].headers["x-podium-trace-id"]
                assert not (tmp_path / "traces" / f"{tid}.json").exists()
        finally:
            writer.send_signal(signal.SIGCONT)
        asking.join(30)
        tid = got["r"].headers["x-podium-trace-id"]
        if shared:  # answered only now, with the file there
            assert (tmp_path / "traces" / f"{tid}.json").is_file()


@pytest.mark.parametrize("reuse_port", [False, True])
def test_a_port_in_use_is_refused_not_shared(pool_file, tmp_path, reuse_port):
    """Another server on the port (with SO_REUSEPORT too, as another `--processes` server
    would be) is an error, never a port silently shared with it."""
    with socket.socket() as other:
        if reuse_port:
            other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        with pytest.raises(OSError):
            listeners("127.0.0.1", port, 2)
        done = subprocess.run(podium_cli("serve", "--pool", str(pool_file), "--no-auth",
                                         "--processes", "2", "--port", str(port), "--trace-dir",
                                         str(tmp_path / "traces")),
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert f"could not start on 127.0.0.1:{port}" in done.stderr and "--port" in done.stderr


def test_supervise_stops_when_a_process_cannot_build_its_app(tmp_path, monkeypatch):
    """A process that exits with STARTUP_FAILURE (here: its pool file is gone) stops the
    server at once; one that keeps dying otherwise is restarted, then given up on."""
    args = ServeArgs(pool=str(tmp_path / "gone.toml"), no_auth=True, processes=1,
                     trace_dir=str(tmp_path / "traces"))
    monkeypatch.setenv(ARGS_ENV, json.dumps(dataclasses.asdict(args)))
    t0 = time.monotonic()
    assert supervise("podium.cli.serve:process_app", listeners("127.0.0.1", 0, 1), {}) == 2
    assert time.monotonic() - t0 < 30
    assert supervise("podium.no_such_module:app", listeners("127.0.0.1", 0, 1), {}) == 2
    messages = []
    monkeypatch.setattr(processes.log, "warning", lambda msg, *a: messages.append(msg % a))
    monkeypatch.setattr(processes, "RESTARTS_PER_MINUTE", 1)  # fewer spawns, the same rule
    assert supervise("serve_helpers:crashing_app", listeners("127.0.0.1", 0, 1), {}) == 2
    assert sum("starting another" in m for m in messages) == processes.RESTARTS_PER_MINUTE
