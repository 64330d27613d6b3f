"""`podium ask` reads its question from standard input when the argument is left out, as
`llm` reads a prompt (`echo QUESTION | podium ask`), on a pool of exact function workers;
with neither an argument nor piped input it says both ways to ask."""

from __future__ import annotations

import json
import os
import pty

import pytest
from support import ADDER_POOL, podium
from typer.testing import CliRunner

from podium.cli.main import app


@pytest.fixture()
def pool(tmp_path):
    path = tmp_path / "adder.toml"
    path.write_text(ADDER_POOL + "\n[run]\ncache = false\n")
    return str(path)


def ask(*args: str, stdin: str | bytes):
    return CliRunner().invoke(app, ["ask", *args], input=stdin, catch_exceptions=False)


def test_the_question_piped_in_is_answered(pool, tmp_path):
    trace = tmp_path / "trace.json"
    result = ask("--pool", pool, "--json", "--trace", str(trace), stdin="What is 2 + 5?\n")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["answer"] == "<answer>7</answer>"
    assert json.loads(trace.read_text())["question"] == "What is 2 + 5?"  # the newline dropped


def test_the_argument_wins_over_piped_input(pool):
    result = ask("What is 1 + 1?", "--pool", pool, "--json", stdin="What is 2 + 5?\n")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["answer"] == "<answer>2</answer>"


@pytest.mark.parametrize("stdin", ["", "  \n\n", b"What is \xff?"])
def test_blank_or_undecodable_piped_input_names_both_ways_to_ask(pool, stdin):
    result = ask("--pool", pool, stdin=stdin)
    assert result.exit_code == 2
    assert "podium ask \"What is 17 * 3?\"" in result.stderr
    assert "| podium ask" in result.stderr and "Traceback" not in result.stderr


def test_no_argument_at_a_terminal_names_both_ways_to_ask(pool):
    """Standard input is a terminal (a pseudo-terminal here): podium does not sit waiting
    for typed input, it says how to ask."""
    main, tty = pty.openpty()
    try:
        proc = podium("ask", "--pool", pool, stdin=tty, timeout=120)
    finally:
        os.close(main)
        os.close(tty)
    assert proc.returncode == 2, proc.stderr
    assert "No question was given" in proc.stderr and "| podium ask" in proc.stderr
    assert "Missing argument" not in proc.stderr
