"""`podium worker serve`: a worker on this machine, as an OpenAI-compatible endpoint.

    embedded  the bundled SmolLM2-135M-Instruct GGUF (or `--model PATH.gguf`) under
              llama-cpp-python's own server (`llama_cpp.server`, in this process): one model,
              which answers whatever model name a request gives
    scripted  podium's scripted fakes (`podium.testing.scripted_server`): deterministic replies
              (an echo of what the worker was shown, or `--config`'s fixed replies and faults)

On start it prints the base URL, the model names and a `[[workers]]` entry to paste into a pool
file; `configs/pools/local-team.toml` uses the two defaults (embedded on 8081, scripted on
8082). Everything that can be wrong (the server extra or the model missing, the port in use, a
public --host without a key) is a ConfigError before the server starts. Ctrl-C stops it.
"""

from __future__ import annotations

import importlib.util
import json
import socket
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path

import typer

from podium.errors import ConfigError

DEFAULT_PORTS = {"embedded": 8081, "scripted": 8082}
DEFAULT_NAMES = {"embedded": "smollm2", "scripted": "echo"}
SERVER_HINT = "Install it with `pip install 'podium[local]'`."


class Kind(StrEnum):
    embedded = "embedded"
    scripted = "scripted"


worker_app = typer.Typer(help="Serve a model on this machine as an OpenAI-compatible worker.",
                         no_args_is_help=True)


@worker_app.command("serve")
def serve_cmd(
    kind: Kind = typer.Argument(Kind.embedded, help="embedded: the bundled SmolLM2 GGUF (or "
                                "--model) under llama-cpp-python's server; scripted: podium's "
                                "deterministic fakes."),
    port: int = typer.Option(None, "--port", min=1, max=65535, help="Port to listen on "
                             "(default 8081 embedded, 8082 scripted: the ports "
                             "configs/pools/local-team.toml names)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (scripted: "
                             "loopback only; embedded: another address needs --api-key-env)."),
    name: list[str] = typer.Option(None, "--name", help="Model name it answers to (default "
                                   "smollm2 embedded, echo scripted; scripted takes several)."),
    model: str = typer.Option(None, "--model", help="embedded: a chat .gguf to serve "
                              "instead of the bundled SmolLM2-135M-Instruct."),
    n_ctx: int = typer.Option(None, "--n-ctx", min=256, help="embedded: context window "
                              "(default 4096)."),
    api_key_env: str = typer.Option(None, "--api-key-env", help="embedded: environment "
                                    "variable holding the key clients must send."),
    latency: float = typer.Option(None, "--latency", min=0, help="scripted: seconds each "
                                  "reply takes (default 0.05)."),
    config: str = typer.Option(None, "--config", help="scripted: JSON of per-model "
                               "latencies, faults and fixed replies (see "
                               "podium/testing/scripted_server.py)."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Serve the embedded model, or the scripted fakes, as an OpenAI-compatible worker."""
    from podium.cli.main import _guard

    def run() -> int:
        where = port or DEFAULT_PORTS[kind.value]
        if kind is Kind.embedded:
            _only_for("scripted", latency=latency, config=config)
            if name and len(name) > 1:
                raise ConfigError("--name: the embedded server is one model, so give one name "
                                  "(it answers every name anyway).")
            return serve_embedded(host, where, name[0] if name else DEFAULT_NAMES["embedded"],
                                  model, n_ctx or 4096, api_key_env)
        _only_for("embedded", model=model, n_ctx=n_ctx, api_key_env=api_key_env)
        return serve_scripted(host, where, name, 0.05 if latency is None else latency, config)

    raise typer.Exit(_guard(run, debug))


def _only_for(kind: str, **given: object) -> None:
    for option, value in given.items():
        if value is not None:
            flag = "--" + option.replace("_", "-")
            raise ConfigError(f"{flag} is an option of `podium worker serve {kind}`; leave it "
                              "out here.")


def check_port_free(host: str, port: int) -> None:
    """ConfigError when `host:port` cannot be bound (in use, or not this machine's address)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind((host.strip("[]"), port))
        except OSError as exc:
            raise ConfigError(f"Cannot listen on {host}:{port} ({exc.strerror or exc}). Pass "
                              "another --port, or stop what listens there.") from None


def base_url(host: str, port: int) -> str:
    shown = socket.gethostname() if host in ("0.0.0.0", "::", "[::]") else host
    if ":" in shown and not shown.startswith("["):
        shown = f"[{shown}]"
    return f"http://{shown}:{port}/v1"


def pool_entry(name: str, url: str, **more: str) -> str:
    """A `[[workers]]` table for one served model (TOML; strings as JSON writes them)."""
    fields = {"name": name, "backend": "openai", "model": name, "base_url": url, **more}
    lines = ["[[workers]]"] + [f"{key} = {json.dumps(value)}" for key, value in fields.items()]
    return "\n".join(lines + ["price = { input = 0.0, output = 0.0 }"])


def banner(what: str, url: str, names: list[str], note: str, entries: list[str]) -> str:
    return "\n".join([
        f"podium worker: {what}",
        f"  base URL  {url}",
        f"  models    {', '.join(names)} ({note})",
        "Pool entry (paste under a pool file's workers):",
        "",
        *("\n\n".join(entries).splitlines()),
        "",
        "Ctrl-C stops it.",
    ])


def _run(serve: Callable[[], None]) -> int:
    """Run a uvicorn server until Ctrl-C (uvicorn finishes the requests in flight first)."""
    try:
        serve()
    except KeyboardInterrupt:  # uvicorn re-raises the Ctrl-C it caught, once it has stopped
        pass
    except SystemExit:  # uvicorn could not start; it logged why
        raise ConfigError("The worker server did not start (see the lines above). Pass "
                          "another --port, or stop what listens there.") from None
    typer.echo("stopped")
    return 0


def serve_embedded(host: str, port: int, name: str, model: str | None, n_ctx: int,
                   api_key_env: str | None) -> int:
    from podium.llm.embedded import INSTALL_HINT, bundled_gguf

    path = Path(model).expanduser() if model else bundled_gguf()
    if not path.is_file():
        raise ConfigError(f"--model {model}: no such file. Pass the path of a chat .gguf, or "
                          "leave --model out to serve the bundled SmolLM2-135M-Instruct.")
    try:
        import uvicorn
        from llama_cpp import __version__ as llama_cpp_version
        from llama_cpp.server.app import create_app
        from llama_cpp.server.settings import ModelSettings, ServerSettings
    except ImportError as exc:
        raise ConfigError(f"llama-cpp-python's server is not installed ({exc.name} is "
                          f"missing). {INSTALL_HINT}") from None
    from podium.serve.auth import is_loopback, load_keys

    keys = load_keys(api_key_env, None)
    if not keys and not is_loopback(host):
        raise ConfigError(f"--host {host} would serve the model to anyone who reaches this "
                          "machine, without a key. Pass --api-key-env NAME (a variable holding "
                          "the key clients send), or use --host 127.0.0.1.")
    check_port_free(host, port)
    try:  # loads the model (llama.cpp's own logging off)
        app = create_app(
            server_settings=ServerSettings(host=host, port=port, api_key=keys[0] if keys else
                                           None, interrupt_requests=False),
            model_settings=[ModelSettings(model=str(path), model_alias=name, n_ctx=n_ctx,
                                          verbose=False)])
    except ValueError as exc:  # llama.cpp: "Failed to load model from file: ..."
        raise ConfigError(f"llama.cpp could not load {path} ({exc}). Pass a chat model in "
                          "GGUF format as --model.") from None
    url = base_url(host, port)
    more = {"prefill": "completions", "chat_template": str(path.resolve())}
    if api_key_env:
        more["api_key_env"] = api_key_env
    typer.echo(banner(f"{path.name} (embedded, llama-cpp-python {llama_cpp_version})", url,
                      [name], "this one model answers every model name",
                      [pool_entry(name, url, **more)]), nl=True)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False)
    try:
        return _run(uvicorn.Server(config).run)
    finally:
        from llama_cpp.server import app as server_app

        if server_app._llama_proxy is not None:  # freed while llama.cpp is whole
            server_app._llama_proxy.free()


def serve_scripted(host: str, port: int, names: list[str] | None, latency: float,
                   config_json: str | None) -> int:
    from podium.testing.scripted_server import HOST, ServerConfig, serve

    if host not in (HOST, "localhost"):
        raise ConfigError(f"--host {host}: the scripted fakes listen on {HOST} only (they are "
                          "test doubles, without keys). Leave --host out.")
    missing = [m for m in ("uvicorn", "starlette") if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(f"The scripted fakes need {' and '.join(missing)}. {SERVER_HINT}")
    try:
        config = ServerConfig.from_json(config_json or "{}", latency=latency)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"--config: {exc}") from None
    if names and config.models:
        raise ConfigError("--name and --config's \"models\" both name the models; give one "
                          "of them.")
    config.models = config.models or names or [DEFAULT_NAMES["scripted"]]
    check_port_free(HOST, port)
    url = base_url(HOST, port)
    shown = config.model_names()
    typer.echo(banner("scripted fakes (podium.testing.scripted_server)", url, shown,
                      "any other name is answered too: each reply echoes the end of what the "
                      "worker was shown, or is --config's reply_by_model",
                      [pool_entry(n, url) for n in shown]))
    return _run(lambda: serve(port, config))
