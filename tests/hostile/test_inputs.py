"""Hostile input at the CLI's edge: files it reads and writes, text it is handed.

Each case is what a careless or hostile user does; each must end in one paragraph naming the
fix and the documented exit code (2 configuration, 1 failed run), never a traceback, and must
lose nothing already paid for. The pool here is exact function workers (podium.testing.workers),
so every run is real and instant. The CLI runs in this process (typer's CliRunner) unless a
separate process is what a case tests (the bytes of its argv). Add a case: a command, the input,
the exit code and the words the user needs to see.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import support
from support import ADDER_POOL, needs_data

POOL = ADDER_POOL + """
[run]
fewshots = "none"
"""


def podium(*args: str, **kw):
    return support.podium_in_process(*args, columns=200, **kw)


def text(proc) -> str:
    return proc.stdout + proc.stderr


@pytest.fixture
def pool(tmp_path) -> Path:
    path = tmp_path / "pool.toml"
    path.write_text(POOL)
    return path


@pytest.fixture
def no_listening(monkeypatch):
    """`podium serve` must stop before it listens: reaching the server fails the test (not a
    hang on a port, as root may bind port 1)."""
    from podium.serve.shutdown import Server

    def listen(self, *args, **kwargs):
        pytest.fail("podium serve went on to listen")

    monkeypatch.setattr(Server, "run", listen)


@pytest.fixture
def cache_env(tmp_path) -> dict:
    return {"PODIUM_CACHE_DIR": str(tmp_path / "cache" / "podium")}


def assert_clean_error(proc, code: int, *words: str) -> None:
    out = text(proc)
    assert proc.returncode == code, out
    assert "Traceback" not in out, out
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", out), out  # no raw control character
    for word in words:
        assert word in out, out


# ------------------------------------------------------------------ --trace


def test_a_trace_path_that_is_a_folder_is_refused_before_any_call(pool, tmp_path, cache_env):
    proc = podium("ask", "What is 2 + 3?", "--pool", str(pool), "--trace", str(tmp_path),
                  env=cache_env)
    assert_clean_error(proc, 2, "--trace", "is a folder")
    assert not (tmp_path / "cache").exists()  # refused before the cache or any model was used


def test_a_trace_under_a_file_is_refused(pool, tmp_path, cache_env):
    (tmp_path / "plain").write_text("x")
    proc = podium("ask", "What is 2 + 3?", "--pool", str(pool), "--trace",
                  str(tmp_path / "plain" / "trace.json"), env=cache_env)
    assert_clean_error(proc, 2, "--trace")


def test_a_trace_that_fails_after_the_run_keeps_the_answer(pool, tmp_path, monkeypatch, capsys,
                                                            cache_env):
    """Fault injection: the disk fills between the check and the write."""
    import errno

    from podium.cli import ask

    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setenv("PODIUM_CACHE_DIR", cache_env["PODIUM_CACHE_DIR"])
    monkeypatch.setattr(ask, "write_private", full)
    code = ask.run_ask("What is 2 + 3?", pool=str(pool), recursion=None,
                       trace=str(tmp_path / "t.json"), json_out=True, verbose=False, debug=False)
    captured = capsys.readouterr()
    assert code == 1
    assert json.loads(captured.out)["answer"] == "<answer>5</answer>"  # the answer is printed
    assert "could not be written" in captured.err and "No space left" in captured.err


def test_traces_and_the_cache_are_owner_only(pool, tmp_path, cache_env):
    trace = tmp_path / "new" / "trace.json"
    proc = podium("ask", "What is 2 + 3?", "--pool", str(pool), "--trace", str(trace),
                  env=cache_env)
    assert proc.returncode == 0, text(proc)
    assert stat.S_IMODE(trace.stat().st_mode) == 0o600
    assert stat.S_IMODE(trace.parent.stat().st_mode) == 0o700
    cache = Path(cache_env["PODIUM_CACHE_DIR"])
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    for f in cache.iterdir():  # the database and its WAL files
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f


def test_an_existing_world_readable_cache_is_narrowed(tmp_path):
    from podium.llm.cache import ResponseCache

    path = tmp_path / "responses.sqlite"
    path.touch(mode=0o644)
    os.chmod(path, 0o644)
    ResponseCache(path).close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


# ------------------------------------------------------------------ non-UTF-8 text and files


LATIN1_POOL = POOL.replace("[run]", "# caf\xe9\n[run]").encode("latin-1")


@pytest.mark.parametrize("command", [("pool", "show"), ("pool", "check"),
                                     ("ask", "What is 2 + 3?"),
                                     pytest.param(("eval", "--task", "gsm8k", "--n", "1"),
                                                  marks=needs_data)])
def test_a_non_utf8_pool_file_is_a_configuration_error(tmp_path, command, cache_env):
    path = tmp_path / "latin1.toml"
    path.write_bytes(LATIN1_POOL)
    out = ["--out", str(tmp_path / "o")] if command[0] == "eval" else []
    proc = podium(*command, "--pool", str(path), *out, env=cache_env)
    assert_clean_error(proc, 2, "not UTF-8", "latin1.toml")


def test_a_question_with_bytes_that_are_not_utf8(pool, cache_env):
    question = b"What is 2 + 3? \xff\xfe"  # argv bytes Python decodes with surrogates
    proc = subprocess.run([os.fsencode(sys.executable), b"-m", b"podium.cli.main", b"ask",
                           question, b"--pool", os.fsencode(str(pool))], capture_output=True,
                          text=True, errors="replace", timeout=120, env={**os.environ, **cache_env, "COLUMNS": "200"})
    assert_clean_error(proc, 2, "not UTF-8")


def test_a_non_utf8_jsonl_task_file(pool, tmp_path, cache_env):
    data = tmp_path / "items.jsonl"
    data.write_bytes(b'{"question": "What is 2 + 3?", "answer": "5"}\n'
                     b'{"question": "caf\xe9", "answer": "1"}\n')
    proc = podium("eval", "--task", f"jsonl:{data}", "--pool", str(pool), "--out",
                  str(tmp_path / "o"), env=cache_env)
    assert_clean_error(proc, 2, "not UTF-8", "items.jsonl")
    assert not (tmp_path / "o" / "results.jsonl").exists()


def test_a_bad_jsonl_line_is_named_by_its_line_number(pool, tmp_path, cache_env):
    data = tmp_path / "items.jsonl"
    data.write_text('{"question": "What is 2 + 3?", "answer": "5"}\n{"question": oops}\n')
    proc = podium("eval", "--task", f"jsonl:{data}", "--pool", str(pool), "--out",
                  str(tmp_path / "o"), env=cache_env)
    assert_clean_error(proc, 2, "line 2")


# ------------------------------------------------------------------ --data-dir, task options


def test_a_data_dir_that_does_not_exist_is_an_error(pool, tmp_path, cache_env):
    proc = podium("eval", "--task", "gsm8k", "--n", "1", "--pool", str(pool), "--data-dir",
                  str(tmp_path / "nope"), "--out", str(tmp_path / "o"), env=cache_env)
    assert_clean_error(proc, 2, "--data-dir", "nope")


def test_a_podium_data_dir_that_does_not_exist_is_an_error(pool, tmp_path, cache_env):
    proc = podium("eval", "--task", "gsm8k", "--n", "1", "--pool", str(pool), "--out",
                  str(tmp_path / "o"), env={**cache_env, "PODIUM_DATA_DIR": str(tmp_path / "x")})
    assert_clean_error(proc, 2, "PODIUM_DATA_DIR")


def test_no_data_folder_and_no_hub_is_an_error_naming_both_ways(pool, tmp_path, cache_env):
    """With neither --data-dir nor $PODIUM_DATA_DIR a task loads from the Hugging Face Hub; with
    the Hub out of reach (and nothing cached) the error names both ways to give the data."""
    proc = podium("eval", "--task", "gsm8k", "--n", "1", "--pool", str(pool), "--out",
                  str(tmp_path / "o"), env={**cache_env, "PODIUM_DATA_DIR": "",
                                            "HF_HOME": str(tmp_path / "hf"),
                                            "HF_HUB_OFFLINE": "1"})
    assert_clean_error(proc, 2, "openai/gsm8k", "Hugging Face Hub", "--data-dir",
                       "PODIUM_DATA_DIR", "docs/evaluation.md")
    assert not (tmp_path / "o").exists()


def test_task_options_from_the_cli_reach_the_task(pool, tmp_path, cache_env):
    """grader=numeric accepts 5.0 for 5, the default exact grader does not."""
    data = tmp_path / "items.jsonl"
    data.write_text('{"question": "What is 2 + 3?", "answer": "5.0"}\n')
    runs = {}
    for grader in ("exact", "numeric"):
        out = tmp_path / grader
        proc = podium("eval", "--task", f"jsonl:{data}", "--pool", str(pool), "--repeats", "1",
                      "--task-option", f"grader={grader}", "--out", str(out), env=cache_env)
        assert proc.returncode == 0, text(proc)
        runs[grader] = json.loads((out / "summary.json").read_text())["accuracy"]
    assert runs == {"exact": 0.0, "numeric": 1.0}


def test_a_malformed_task_option_is_a_usage_error(pool, tmp_path):
    proc = podium("eval", "--task", "gsm8k", "--pool", str(pool), "--task-option", "grader")
    assert_clean_error(proc, 2, "KEY=VALUE")


def test_podium_tasks_lists_each_task_with_its_options():
    proc = podium("tasks")
    out = text(proc)
    assert proc.returncode == 0, out
    for words in ("gsm8k", "math500", "grading='symbolic'", "jsonl:FILE", "grader='exact'",
                  "gym", "families="):
        assert words in out


# ------------------------------------------------------------------ podium serve's setup


def test_a_trace_folder_that_is_a_file_stops_podium_serve_before_it_listens(pool, tmp_path,
                                                                            no_listening):
    (tmp_path / "traces").write_text("not a folder")
    proc = podium("serve", "--pool", str(pool), "--no-auth", "--port", "1",
                  "--trace-dir", str(tmp_path / "traces"))
    assert_clean_error(proc, 2, f"--trace-dir {tmp_path / 'traces'} cannot be used",
                       "Not a directory", "Pass a folder you can write")


def test_a_key_file_line_with_a_control_character_is_refused(pool, tmp_path, no_listening):
    keys = tmp_path / "keys.txt"
    keys.write_bytes(b"# keys\nsk-good-key-0123456789\nsk-bad\x1b[31m-key\n")
    proc = podium("serve", "--pool", str(pool), "--api-key-file", str(keys), "--port", "1",
                  "--trace-dir", str(tmp_path / "t"))
    assert_clean_error(proc, 2, f"--api-key-file {keys}, line 3", "control character")


# ------------------------------------------------------------------ podium trace view


def test_trace_view_of_a_trace_nested_too_deeply_is_a_clear_error(tmp_path):
    trace = tmp_path / "trace.json"
    trace.write_text('{"question": "q", "steps": ' + "[" * 50_000 + "]" * 50_000 + "}")
    proc = podium("trace", "view", str(trace), "--no-open")
    assert_clean_error(proc, 2, str(trace), "nested too deeply")


@pytest.fixture
def saved_trace(pool, tmp_path, cache_env) -> Path:
    trace = tmp_path / "trace.json"
    proc = podium("ask", "What is 2 + 3?", "--pool", str(pool), "--trace", str(trace),
                  env=cache_env)
    assert proc.returncode == 0, text(proc)
    return trace


@pytest.mark.parametrize("where", ["/dev/full", "folder", "under a file"])
def test_trace_view_onto_a_path_it_cannot_write_is_a_clear_error(saved_trace, tmp_path, where):
    (tmp_path / "plain").write_text("a file")
    (tmp_path / "folder").mkdir()
    out = {"/dev/full": "/dev/full", "folder": str(tmp_path / "folder"),
           "under a file": str(tmp_path / "plain" / "page.html")}[where]
    before = saved_trace.read_bytes()
    proc = podium("trace", "view", str(saved_trace), "--out", out, "--no-open")
    assert_clean_error(proc, 2, f"--out {out} cannot be written", "--out a file")
    assert saved_trace.read_bytes() == before  # nothing lost
    assert (tmp_path / "plain").read_text() == "a file"
    assert list((tmp_path / "folder").iterdir()) == []  # no temporary file left behind


def test_trace_view_never_writes_through_a_link(saved_trace, tmp_path):
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    os.chmod(target, 0o644)
    link = tmp_path / "page.html"
    link.symlink_to(target)
    proc = podium("trace", "view", str(saved_trace), "--out", str(link), "--no-open")
    assert_clean_error(proc, 2, str(link), "symbolic link")
    assert target.read_text() == "keep me" and stat.S_IMODE(target.stat().st_mode) == 0o644


def test_a_trace_onto_a_link_is_refused_before_any_call(pool, tmp_path, cache_env):
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    os.chmod(target, 0o644)
    link = tmp_path / "link.json"
    link.symlink_to(target)
    proc = podium("ask", "What is 2 + 3?", "--pool", str(pool), "--trace", str(link),
                  env=cache_env)
    assert_clean_error(proc, 2, f"--trace {link} is a symbolic link")
    assert target.read_text() == "keep me" and stat.S_IMODE(target.stat().st_mode) == 0o644
    assert not (tmp_path / "cache").exists()  # refused before any model was used


@pytest.mark.parametrize("writer", ["write_private", "private_file"])
def test_private_files_are_never_written_through_a_link(tmp_path, writer):
    """A link put in place after the CLI's checks (or by another user in a shared folder)."""
    from podium import files

    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    os.chmod(target, 0o644)
    link = tmp_path / "out.json"
    link.symlink_to(target)
    with pytest.raises(files.LinkRefused, match="symbolic link"):
        files.write_private(link, "{}") if writer == "write_private" else files.private_file(link)
    assert target.read_text() == "keep me" and stat.S_IMODE(target.stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json", "precious.txt"]


def test_a_private_file_that_cannot_be_written_whole_keeps_the_old_one(tmp_path, monkeypatch):
    """write_private writes beside the file and renames: a failed write changes nothing."""
    import errno

    from podium import files

    path = tmp_path / "trace.json"
    path.write_text("the old trace")
    real = os.replace

    def full(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files.os, "replace", full)
    with pytest.raises(OSError):
        files.write_private(path, "the new trace")
    monkeypatch.setattr(files.os, "replace", real)
    assert path.read_text() == "the old trace"
    assert [p.name for p in tmp_path.iterdir()] == ["trace.json"]  # the temporary is gone


def test_a_jsonl_line_nested_too_deeply_is_named_by_its_line(pool, tmp_path, cache_env):
    data = tmp_path / "items.jsonl"
    data.write_text('{"question": "What is 2 + 3?", "answer": "5"}\n'
                    + "[" * 100_000 + "]" * 100_000 + "\n")
    proc = podium("eval", "--task", f"jsonl:{data}", "--pool", str(pool), "--out",
                  str(tmp_path / "o"), env=cache_env)
    assert_clean_error(proc, 2, f"{data} line 2", "nested too deeply")
