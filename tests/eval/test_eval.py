"""`podium eval` and `podium report` as a user runs them, against real servers: a real subprocess
where the process is the point (killed with SIGKILL and resumed; the embedded model end to end),
the same CLI in this process elsewhere (`podium_in_process`)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import needs_data, podium_in_process

from podium.eval.runner import read_results
from podium.eval.summary import summarize
from podium.testing import ScriptedServer

N_ITEMS = 30


def podium_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "podium.cli.main", *args]


def env() -> dict:
    return {**os.environ, "COLUMNS": "160"}


@pytest.fixture()
def dataset(tmp_path) -> Path:
    path = tmp_path / "sums.jsonl"
    with path.open("w") as fh:
        for i in range(N_ITEMS):
            fh.write(json.dumps({"question": f"What is {i} + {i}?", "answer": str(2 * i)}) + "\n")
    return path


def server_pool(tmp_path: Path, server: ScriptedServer) -> Path:
    pool = tmp_path / "pool.toml"
    pool.write_text(
        '[conductor]\nbackend = "embedded"\n'
        f'[[workers]]\nname = "w0"\nbackend = "openai"\nmodel = "m0"\n'
        f'base_url = "{server.base_url}"\nprice = {{ input = 1.0, output = 2.0 }}\n'
        '[run]\ncache = false\n'
    )
    return pool


def wait_for_lines(path: Path, n: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().count("\n") >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"{path} never reached {n} lines")


def test_resume_after_kill_9_runs_every_item_exactly_once(tmp_path, dataset):
    with ScriptedServer(latency=0.25) as server:
        pool = server_pool(tmp_path, server)
        out = tmp_path / "run"
        args = podium_cmd("eval", "--task", f"jsonl:{dataset}", "--system", "single:w0",
                          "--repeats", "1", "--concurrency", "3", "--out", str(out),
                          "--pool", str(pool))
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                env=env())
        wait_for_lines(out / "results.jsonl", 6)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        killed_at = (out / "results.jsonl").read_text().count("\n")
        assert killed_at < N_ITEMS
        # a torn last line, as a kill in the middle of a write would leave
        with (out / "results.jsonl").open("a") as fh:
            fh.write('{"item": "torn')
        done = subprocess.run(args, capture_output=True, text=True, timeout=120, env=env())
        requests = server.stats()["overall"]["requests"]
    assert done.returncode == 0, done.stderr
    lines = (out / "results.jsonl").read_text().splitlines()
    keys = [(json.loads(line)["item"], json.loads(line)["repeat"]) for line in lines]
    assert len(keys) == len(set(keys)) == N_ITEMS  # every item exactly once
    assert requests <= N_ITEMS + 3  # at most the calls in flight at the kill ran twice
    assert "accuracy" in done.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["items"] == N_ITEMS and summary["calls_per_item"] == 1


def test_eval_and_report_side_by_side(tmp_path, dataset):
    with ScriptedServer(latency=0.0, reply_by_model={"m0": "<answer>4</answer>"}) as server:
        pool = server_pool(tmp_path, server)
        folders = []
        for system in ("single:w0", "vote:w0:3"):
            out = tmp_path / system.replace(":", "_")
            proc = podium_in_process("eval", "--task", f"jsonl:{dataset}", "--system", system,
                                     "--repeats", "2", "--out", str(out), "--pool", str(pool))
            assert proc.returncode == 0, proc.stderr
            folders.append(str(out))
    records = list(read_results(Path(folders[1]) / "results.jsonl").values())
    assert len(records) == 2 * N_ITEMS and all(r["used"]["calls"] == 3 for r in records)
    s = summarize(records)
    assert s.repeats == 2 and s.stderr is not None
    # every answer is "4": only "What is 2 + 2?" is right, in both repeats
    assert sum(r["correct"] for r in records) == 2
    assert s.accuracy == pytest.approx(1 / N_ITEMS)
    rep = tmp_path / "report"
    proc = podium_in_process("report", *folders, "--out", str(rep))
    assert proc.returncode == 0, proc.stderr
    table = (rep / "report.md").read_text()
    assert "single:w0" in table and "vote:w0:3" in table and "cost/item" in table
    # accuracy against cost, or against tokens where the pool has no prices: named so
    (trade,) = [p.name for p in rep.glob("accuracy_vs_*.png")]
    for png in (trade, "step_counts.png", "worker_usage.png"):
        data = (rep / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5_000
    record = next(iter(read_results(Path(folders[0]) / "results.jsonl").values()))
    assert record["question"].startswith("What is") and record["target"] is not None
    # two runs with the same system name: two rows, labelled by folder, not merged
    copy = tmp_path / "again"
    shutil.copytree(folders[0], copy)
    proc = podium_in_process("report", folders[0], str(copy), "--out", str(tmp_path / "twice"))
    assert proc.returncode == 0, proc.stderr
    assert "labelled by folder" in proc.stderr
    rows = [line for line in (tmp_path / "twice" / "report.md").read_text().splitlines()
            if line.startswith("| single:w0")]
    assert len(rows) == 2 and folders[0] in rows[0] and str(copy) in rows[1]


def test_report_rejects_a_folder_that_is_not_an_eval(tmp_path):
    proc = podium_in_process("report", str(tmp_path))
    assert proc.returncode == 2 and "not an evaluation folder" in proc.stderr


SMALL_EMBEDDED_TEAM = """
[conductor]
backend = "embedded"
temperature = 0.3
max_tokens = 240
[[workers]]
name = "precise"
backend = "embedded"
temperature = 0.1
max_tokens = 32
[[workers]]
name = "creative"
backend = "embedded"
temperature = 0.9
max_tokens = 32
[run]
max_steps = 2
fewshots = "short"
max_reason_lines = 1
max_reason_chars = 80
cache = false
"""


@needs_data
def test_gsm8k_end_to_end_on_the_embedded_model(tmp_path):
    """Two GSM8K items, run at once, through the embedded Conductor and workers (short
    outputs and the short few-shot set, so fast)."""
    pool = tmp_path / "embedded.toml"
    pool.write_text(SMALL_EMBEDDED_TEAM)
    out = tmp_path / "gsm8k"
    proc = subprocess.run(podium_cmd("eval", "--task", "gsm8k", "--n", "2", "--repeats", "1",
                                     "--out", str(out), "--concurrency", "2", "--pool", str(pool)),
                          capture_output=True, text=True, timeout=900, env=env())
    assert proc.returncode == 0, proc.stderr
    records = list(read_results(out / "results.jsonl").values())
    assert len(records) == 2 and {r["status"] for r in records} == {"ok"}
    for r in records:
        assert r["used"]["calls"] == 1 + len(r["workflow"]) and 1 <= len(r["workflow"]) <= 2
        assert isinstance(r["correct"], bool) and r["cause"] is None and r["failures"] == []
        assert r["rounds"] == [{"round": 0, "decision": "planned", "parse_reason": None,
                                "answered": True}]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["items"] == 2 and summary["parse_failure_rate"] == 0
    assert sum(summary["steps"].values()) == 2
    assert "accuracy" in proc.stdout
