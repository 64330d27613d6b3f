"""What a worker writes reaches the terminal as text, never as commands to it.

A hostile (or broken) OpenAI-compatible endpoint on 127.0.0.1 answers with terminal escape
sequences (OSC 8 links, a clear-screen CSI, the C1 CSI, BEL, a right-to-left override), Rich
markup and an emoji code; `podium ask` prints the run through the real CLI, and not one
control byte comes out raw: each is shown escaped (`\\x1b`), the markup and the code as typed.
`--json` stays exact, strict JSON.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import support

HOSTILE = ("\x1b]8;;https://evil.example/\x07click\x1b]8;;\x07 \x1b[2J\x1b[31mred "
           "[bold red]MARKUP[/] [link=https://evil.example]L[/link] :thumbs_up: "
           "\x9b31m\x07\x00\x7f \u202eevil <answer>5</answer>")
RAW = [b"\x1b", b"\x07", b"\x00", b"\x7f", "\x9b".encode(), "\u202e".encode()]


class Hostile(BaseHTTPRequestHandler):
    """Every chat completion is answered with HOSTILE; with `status` set, an error whose
    message is HOSTILE."""

    status = 200

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.status == 200:
            body = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1,
                    "model": HOSTILE, "choices": [{"index": 0, "finish_reason": "stop",
                                               "message": {"role": "assistant",
                                                           "content": HOSTILE}}],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}}
        else:
            body = {"error": {"message": HOSTILE, "type": "invalid_request_error"}}
        data = json.dumps(body).encode()
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(params=[200, 400], ids=["reply", "error"])
def endpoint(request):
    handler = type("Handler", (Hostile,), {"status": request.param})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield request.param, f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def pool_file(tmp_path: Path, base_url: str) -> Path:
    path = tmp_path / "pool.toml"
    path.write_text(f"""
[conductor]
backend = "function"
function = "podium.testing.workers:one_step"

[[workers]]
name = "w"
backend = "openai"
model = "m"
base_url = "{base_url}"
retries = 0
empty_retries = 0

[run]
fewshots = "none"
cache = false
""")
    return path


def ask(tmp_path: Path, base_url: str, *flags: str):
    return support.podium("ask", "What is 2 + 3?", "--pool", str(pool_file(tmp_path, base_url)),
                          *flags, columns=400, text=False)


@pytest.mark.parametrize("flags", [(), ("--verbose",)], ids=["plain", "verbose"])
def test_no_control_byte_from_a_worker_reaches_the_terminal(tmp_path, endpoint, flags):
    status, url = endpoint
    proc = ask(tmp_path, url, *flags)
    out = proc.stdout + proc.stderr
    assert proc.returncode == (0 if status == 200 else 1), out
    assert b"Traceback" not in out
    for raw in RAW:
        assert raw not in out, (raw, out)
    if status == 200:  # the reply is shown, every control visibly escaped, markup as typed
        text = out.decode()
        for shown in ("\\x1b]8;;https://evil.example/\\x07click", "\\x1b[2J", "\\x9b31m",
                      "\\x00\\x7f", "\\u202eevil", "[bold red]MARKUP[/]",
                      "[link=https://evil.example]L[/link]", ":thumbs_up:"):
            assert shown in text, (shown, text)


def test_pool_check_shows_an_endpoints_text_escaped(tmp_path, endpoint):
    """`pool check` prints the model name an endpoint reports and its error text: both as
    text, never as commands to the terminal."""
    status, url = endpoint
    proc = support.podium("pool", "check", "--pool", str(pool_file(tmp_path, url)),
                          columns=400, text=False)
    out = proc.stdout + proc.stderr
    assert b"Traceback" not in out
    for raw in RAW:
        assert raw not in out, (raw, out)
    assert b"\\x1b[2J" in out and b"[bold red]MARKUP[/]" in out, out


def test_json_output_is_the_exact_reply_as_strict_json(tmp_path, endpoint):
    status, url = endpoint
    proc = ask(tmp_path, url, "--json")
    for raw in RAW:
        assert raw not in proc.stdout, raw

    def refuse(name: str):
        raise AssertionError(f"non-standard JSON constant {name}")

    data = json.loads(proc.stdout, parse_constant=refuse)
    if status == 200:
        assert proc.returncode == 0, proc.stderr
        assert data["answer"] == HOSTILE  # JSON is exact: the escapes are JSON's own
        assert data["steps"][0]["response"] == HOSTILE


def test_debug_tracebacks_show_controls_escaped(capsys):
    from podium.cli.main import _guard
    from podium.errors import ConfigError

    def fail() -> int:
        raise ConfigError(f"a worker said {HOSTILE}")

    assert _guard(fail, debug=True) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and "\\x1b[2J" in err and "[bold red]MARKUP[/]" in err
    for raw in RAW:
        assert raw.decode() not in err


def test_an_unexpected_failure_is_one_paragraph_without_debug(capsys):
    from podium.cli.main import _guard

    def crash() -> int:
        raise TypeError(f"unexpected \x1b[2J{HOSTILE}")

    assert _guard(crash, debug=False) == 1
    err = capsys.readouterr().err
    assert "Unexpected error (TypeError)" in err and "--debug" in err
    assert "Traceback" not in err and "\x1b" not in err


def test_non_finite_numbers_are_never_printed_as_json_constants():
    from podium.cli.output import json_line

    line = json_line({"cost": float("nan"), "used": [float("inf"), -float("inf"), 1.5],
                      "text": "\x9b\x1b"})
    assert json.loads(line) == {"cost": None, "used": [None, None, 1.5], "text": "\x9b\x1b"}
    assert "NaN" not in line and "Infinity" not in line and "\x9b" not in line
