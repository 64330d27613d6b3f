"""`ScriptedServer`: the scripted server in a subprocess on a free port, from a test's side
(standard library only)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from podium.testing.ports import free_port
from podium.testing.scripted.settings import HOST, ServerConfig

# --------------------------------------------------------------------------------------------
# the client-side handle (standard library only)

_NO_PROXY_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _request_json(method: str, url: str, body: Any = None, timeout: float = 10.0) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    with _NO_PROXY_OPENER.open(request, timeout=timeout) as response:
        return json.loads(response.read().decode())


class ScriptedServer:
    """Runs the scripted server in a subprocess on a free 127.0.0.1 port.

    Use as a context manager (or call `start()` / `stop()`); `base_url` is the OpenAI base
    URL (`http://127.0.0.1:PORT/v1`), `stats()` returns the `/stats` JSON and `reset()` clears
    it. On exit the process is terminated, and killed if it has not stopped within 5 s.
    """

    def __init__(
        self,
        latency: float = 0.05,
        *,
        latency_by_model: dict[str, float] | None = None,
        faults_by_model: dict[str, str] | None = None,
        retry_after_by_model: dict[str, float] | None = None,
        reply_by_model: dict[str, str] | None = None,
        tool_calls_by_model: dict[str, list[dict[str, Any]]] | None = None,
        models: list[str] | None = None,
        startup_timeout: float = 20.0,
    ) -> None:
        self.config = ServerConfig(
            latency=latency,
            latency_by_model=dict(latency_by_model or {}),
            faults_by_model=dict(faults_by_model or {}),
            retry_after_by_model=dict(retry_after_by_model or {}),
            reply_by_model=dict(reply_by_model or {}),
            tool_calls_by_model=dict(tool_calls_by_model or {}),
            models=list(models or []),
        )
        self.startup_timeout = startup_timeout
        self.port: int | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._stderr: Any = None

    # -- urls ---------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The server root, e.g. `http://127.0.0.1:PORT`."""
        if self.port is None:
            raise RuntimeError("ScriptedServer is not started; use `with ScriptedServer(...)`")
        return f"http://{HOST}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL, e.g. `http://127.0.0.1:PORT/v1`."""
        return f"{self.url}/v1"

    # -- statistics ---------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """The `/stats` JSON: `overall`, `by_model` and `log` (see the module docstring)."""
        return _request_json("GET", f"{self.url}/stats")

    def reset(self) -> None:
        """Clear the statistics and restart the counted faults."""
        _request_json("POST", f"{self.url}/reset", body={})

    # -- lifetime -----------------------------------------------------------------------------

    def start(self) -> ScriptedServer:
        if self._process is not None:
            return self
        deadline = time.monotonic() + self.startup_timeout
        last_error = ""
        for _attempt in range(3):  # another process may take the free port before we bind it
            self._spawn(free_port())
            ready, last_error = self._wait_ready(deadline)
            if ready:
                return self
            self.stop()
            if time.monotonic() >= deadline or "address already in use" not in last_error.lower():
                break
        raise RuntimeError(f"the scripted server did not start: {last_error}")

    def _spawn(self, port: int) -> None:
        self.port = port
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])  # so `-m podium...` works uninstalled
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop()
        command = [
            sys.executable,
            "-m",
            "podium.testing.scripted_server",
            "--port",
            str(port),
            "--latency",
            repr(self.config.latency),
            "--config",
            self.config.to_json(),
        ]
        self._process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
            env=env,
        )

    def _stderr_text(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace").strip()[-2000:]

    def _wait_ready(self, deadline: float) -> tuple[bool, str]:
        assert self._process is not None
        while True:
            if self._process.poll() is not None:
                return False, (
                    f"exited with code {self._process.returncode}: {self._stderr_text()}"
                )
            try:
                _request_json("GET", f"{self.base_url}/models", timeout=1.0)
                return True, ""
            except (urllib.error.URLError, OSError, ValueError):
                pass
            if time.monotonic() >= deadline:
                return False, (
                    f"{self.base_url}/models did not answer within {self.startup_timeout:g} s; "
                    f"stderr: {self._stderr_text()}"
                )
            time.sleep(0.05)

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
