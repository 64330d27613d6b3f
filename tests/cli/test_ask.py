"""`podium ask` end to end: once as a user runs it (a real subprocess, the embedded model, JSON
and a trace), then the table output and the real errors through the same CLI in this process
(`podium_in_process`: the exit codes, stdout and stderr a process gives, without its imports)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support import free_port, podium, podium_in_process


@pytest.fixture(scope="module")
def embedded_run(tmp_path_factory):
    trace = tmp_path_factory.mktemp("ask") / "trace.json"
    proc = podium("ask", "What is 3 + 4?", "--json", "--trace", str(trace))
    return proc, trace


def test_ask_json_on_embedded_model(embedded_run):
    proc, _ = embedded_run
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)  # exactly one JSON object on stdout
    assert {"answer", "workflow", "steps", "used", "paid", "fallback", "notes"} <= data.keys()
    assert isinstance(data["answer"], str)
    assert 1 <= len(data["workflow"]) <= 5
    names = {"smol-precise", "smol-creative"}
    for step in data["workflow"]:
        assert step["worker"] in names and step["subtask"]
        assert step["access"] == "all" or isinstance(step["access"], list)
    assert len(data["steps"]) >= len(data["workflow"])
    for step in data["steps"]:
        assert step["status"] == "ok"
        assert step["messages"][0]["role"] == "user"
        assert "What is 3 + 4?" in step["messages"][0]["content"]
    usage = data["used"]
    assert usage["calls"] == 1 + len(data["steps"])
    assert data["paid"]["calls"] + data["cache_hits"] == usage["calls"]
    assert data["fallback"] is False and data["status"] == "ok" and data["answer_round"] == 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0
    assert usage["cost_usd"] == 0.0  # the embedded pool is priced at zero
    # one source for "where the tokens went": the Conductor's turn and the workers' steps
    by = data["used_by"]
    turn = data["conductor"][0]
    assert by["conductor"]["calls"] == 1
    assert by["conductor"]["total_tokens"] == turn["prompt_tokens"] + turn["completion_tokens"]
    assert by["workers"]["total_tokens"] == sum(s["prompt_tokens"] + s["completion_tokens"]
                                                for s in data["steps"])
    assert by["conductor"]["total_tokens"] + by["workers"]["total_tokens"] == \
        usage["total_tokens"]


def test_ask_trace_file_holds_the_conductor_prompt(embedded_run):
    proc, trace = embedded_run
    assert proc.returncode == 0, proc.stderr
    data = json.loads(Path(trace).read_text())
    conductor = data["conductor"][0]
    assert [m["role"] for m in conductor["messages"]] == ["system", "user", "assistant"]
    assert "Model id 0" in conductor["messages"][1]["content"]
    assert "smol-precise" not in conductor["messages"][1]["content"]  # ids are masked
    assert conductor["constrained"] is True
    assert conductor["parse_error"] is None  # the grammar keeps the output valid


def test_ask_table_output(embedded_run):
    # the question the JSON run asked: its calls come from the response cache
    proc = podium_in_process("ask", "What is 3 + 4?")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for part in ("Workflow (round 0)", "step", "worker", "subtask", "Answer", "Totals", "calls"):
        assert part in out
    assert "from the cache" in out and "(paid 0 calls" in out
    # where the tokens and the cost went (the embedded pool is priced at zero)
    assert re.search(r"Conductor 1 call · \d+ tokens · \$0; workers \d+ calls? · \d+ tokens · "
                     r"\$0\b", out)


BAD_POOLS = {
    "unknown_backend": ('[conductor]\nbackend = "embedded"\n[[workers]]\nname = "a"\n'
                        'backend = "telepathy"\n', "telepathy"),
    "unknown_key": ('[conductor]\nbackend = "embedded"\n[[workers]]\nname = "a"\n'
                    'backend = "embedded"\ntemprature = 0.2\n', "temprature"),
    "malformed_toml": ('[conductor\nbackend = "embedded"\n', "not valid TOML"),
    "no_workers": ('[conductor]\nbackend = "embedded"\n', "no workers"),
}


@pytest.mark.parametrize("case", sorted(BAD_POOLS))
def test_bad_pool_files_give_a_clear_error(tmp_path, case):
    text, expected = BAD_POOLS[case]
    pool = tmp_path / "pool.toml"
    pool.write_text(text)
    proc = podium_in_process("ask", "hi", "--pool", str(pool))
    assert proc.returncode == 2
    assert expected in proc.stderr
    assert "Traceback" not in proc.stderr


def test_empty_question():
    proc = podium_in_process("ask", "   ")
    assert proc.returncode == 2
    assert "question is empty" in proc.stderr and "Traceback" not in proc.stderr


def test_missing_pool_file(tmp_path):
    proc = podium_in_process("ask", "hi", "--pool", str(tmp_path / "nope.toml"))
    assert proc.returncode == 2 and "does not exist" in proc.stderr


def _http_pool(tmp_path, base_url: str, key_env: str | None, settings: str = "") -> Path:
    key = f'api_key_env = "{key_env}"\n' if key_env else ""
    key += settings
    pool = tmp_path / "pool.toml"
    pool.write_text(
        f'[conductor]\nbackend = "openai"\nmodel = "m"\nbase_url = "{base_url}"\n{key}'
        f'[[workers]]\nname = "w"\nbackend = "openai"\nmodel = "m"\nbase_url = "{base_url}"\n'
        f'{key}'
    )
    return pool


def test_missing_key_env_var_names_the_variable(tmp_path):
    pool = _http_pool(tmp_path, "http://127.0.0.1:9/v1", "PODIUM_TEST_KEY_UNSET")
    proc = podium_in_process("ask", "hi", "--pool", str(pool), env={"PODIUM_TEST_KEY_UNSET": ""})
    assert proc.returncode == 2
    assert "PODIUM_TEST_KEY_UNSET" in proc.stderr and "Traceback" not in proc.stderr


def test_unreachable_base_url(tmp_path):
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    # one quick retry: the default four, backing off 1, 2, 4, 8 s, take ~12 s
    pool = _http_pool(tmp_path, url, "PODIUM_TEST_KEY", "retries = 1\nbackoff_s = 0.05\n")
    secret = "sk-test-never-print-this-0123456789"
    proc = podium_in_process("ask", "hi", "--pool", str(pool), env={"PODIUM_TEST_KEY": secret})
    assert proc.returncode == 1
    assert "base_url" in proc.stderr and url in proc.stderr
    assert "Traceback" not in proc.stderr
    assert secret not in proc.stderr + proc.stdout


def test_debug_shows_traceback(tmp_path):
    pool = tmp_path / "pool.toml"
    pool.write_text("[conductor\n")
    proc = podium_in_process("ask", "hi", "--pool", str(pool), "--debug")
    assert proc.returncode == 2 and "Traceback" in proc.stderr


def test_version_names_the_installed_podium():
    from importlib.metadata import version

    proc = podium_in_process("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"podium {version('podium')} (Python ")
