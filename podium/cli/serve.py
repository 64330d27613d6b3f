"""`podium serve`: check the setup, build the pipeline, run the app under uvicorn.

Everything that can be wrong with the setup (no key and no --no-auth, --no-auth on a public
address, an unset key variable, a bad pool, an unwritable trace folder, the `serve` extra not
installed) is a ConfigError before the port is bound: exit 2 with the flag to fix. uvicorn then
owns the process, with a bound on each request's headers (`podium.serve.http_limits`):
SIGTERM or Ctrl-C stops new connections, lets the requests in flight finish for up to
--graceful-timeout seconds, answers those still running with a 503 (an error event on a
stream) and writes their traces, then closes the pipeline (`podium.serve.shutdown`).

With `--processes N` (N > 1) `podium.serve.processes` starts N server processes, each
listening on the port with a socket of its own (SO_REUSEPORT: the kernel spreads connections
over them), restarting one that dies; SIGTERM stops them all, each as above. One process runs
the event loop and the pipeline on one core, so on a machine with cores to spare more
processes serve more requests at once. Each process builds its own pipeline from the same
settings (passed in the environment variable `PODIUM_SERVE_ARGS`, without the keys: each
process reads them from --api-key-env / --api-key-file itself), so the limits are split
(`podium.config.split_limits`):

* a remote worker's or Conductor's `max_concurrency`, `rpm` and `tpm` (openai, anthropic,
  gemini backends) and --max-concurrency are divided by N, rounded down and at least 1, so
  the pool's limits hold across the processes (the startup line names any limit below N,
  which each process then keeps at 1, N in all);
* an in-process model (embedded, transformers, function) is loaded by every process, with the
  pool's limit in each: N copies in memory;
* the trace folder is shared (`TraceStore(shared=True)`), and so is the response cache (SQLite
  in WAL mode takes writers from several processes);
* so is the session key that seals tool-call ids (`podium.serve.session`): --session-key-env's
  secret, or one drawn at the start, handed to each process (`podium.serve.processes`).
"""

from __future__ import annotations

import gc
import json
import logging
import os
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass

from podium.config import Pool, split_limits
from podium.errors import ConfigError
from podium.settings import resolve_settings

ARGS_ENV = "PODIUM_SERVE_ARGS"


@dataclass(frozen=True)
class ServeArgs:
    """What `podium serve` was asked for (no keys: only where to read them)."""

    pool: str | None = None
    conductor: str | None = None
    allow_pool_mismatch: bool = False
    host: str = "127.0.0.1"
    port: int = 8000
    api_key_env: str | None = None
    api_key_file: str | None = None
    no_auth: bool = False
    max_concurrency: int = 4
    max_request_bytes: int = 1_000_000
    trace_dir: str = "runs/serve-traces"
    trace_keep: int = 1000
    graceful_timeout: float = 30.0
    no_cache: bool = False
    pass_through: bool = False
    processes: int = 1
    session_key_env: str | None = None

    @property
    def runs_per_process(self) -> int:
        """Each process's share of --max-concurrency (at least 1)."""
        return max(1, self.max_concurrency // self.processes)


def _check_trace_dir(folder: str) -> None:
    """A --trace-dir that is a file, or under one, is refused before anything starts (the
    store would start, and every trace id would then be a 404)."""
    from podium.files import file_in_the_way

    blocker = file_in_the_way(folder)
    if blocker is not None:
        raise ConfigError(f"--trace-dir {folder} cannot be used (Not a directory: {blocker} is "
                          "a file). Pass a folder you can write.")


def _need_extra() -> None:
    import importlib.util

    for name in ("fastapi", "uvicorn", "jsonschema", "cryptography"):
        if importlib.util.find_spec(name) is None:
            raise ConfigError(f"podium serve needs the serve extra ({name} is missing). "
                              "Install it: pip install 'podium[serve]'.")


def _log_handler() -> None:
    log = logging.getLogger("podium.serve")
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)-9s podium: %(message)s"))
        log.addHandler(handler)
    log.setLevel(logging.INFO)


def _team(args: ServeArgs) -> Pool:
    from podium.checkpoint import with_conductor
    from podium.config import load_pool

    team = load_pool(args.pool)
    if args.conductor:
        team = with_conductor(team, args.conductor, allow_mismatch=args.allow_pool_mismatch)
    return team


def _app(args: ServeArgs, keys: tuple[str, ...], team: Pool, session_key: str | None):
    """The app one process serves: its share of the limits, its own pipeline."""
    from podium.pipeline import Pipeline
    from podium.serve import ServeConfig, create_app

    team, _ = split_limits(team, args.processes, "--processes")
    settings = resolve_settings(team.run, flags={"cache": False} if args.no_cache else None)
    config = ServeConfig(keys=keys, max_concurrency=args.runs_per_process,
                         max_request_bytes=args.max_request_bytes, trace_dir=args.trace_dir,
                         trace_keep=args.trace_keep, pass_through=args.pass_through,
                         shared_traces=args.processes > 1,
                         graceful_timeout_s=args.graceful_timeout,
                         session_key=session_key)
    try:
        app = create_app(config, Pipeline(team, settings=settings))
    except OSError as exc:
        raise ConfigError(f"--trace-dir {args.trace_dir} cannot be used "
                          f"({exc.strerror or exc}). Pass a folder you can write.") from None
    # What is alive now (modules, the pipeline, its clients) lives as long as the server:
    # out of the collector's sight, a full collection scans a request's leftovers only, not
    # the whole heap (it stopped the event loop for ~40 ms every second or so under load).
    gc.collect()
    gc.freeze()
    return app


def process_app():
    """uvicorn's app factory in each process of `--processes N`: the settings from
    `PODIUM_SERVE_ARGS`, the keys read again from their variable or file, the session key
    the supervisor handed this process (taken out of its environment)."""
    from podium.serve.auth import load_keys
    from podium.serve.processes import STARTUP_FAILURE
    from podium.serve.session import SESSION_KEY_VAR

    args = ServeArgs(**json.loads(os.environ[ARGS_ENV]))
    session_key = os.environ.pop(SESSION_KEY_VAR, None)
    _log_handler()
    try:
        return _app(args, load_keys(args.api_key_env, args.api_key_file), _team(args),
                    session_key)
    except ConfigError as exc:  # e.g. the key file changed since the start: stop, not restart
        sys.stderr.write(f"podium: {exc}\n")
        sys.exit(STARTUP_FAILURE)


def _banner(args: ServeArgs, keys: tuple[str, ...], team: Pool) -> str:
    auth = (f"{len(keys)} API key{'s' if len(keys) != 1 else ''}" if keys
            else "no key (--no-auth, loopback only)")
    workers = ", ".join(w.name for w in team.workers)
    shown = f"[{args.host}]" if ":" in args.host else args.host
    models = "models 'podium' and each worker's" if args.pass_through else "model 'podium'"
    line = (f"podium: serving {models} at http://{shown}:{args.port}/v1 · Conductor "
            f"{team.conductor.name} · workers {workers} · pool {team.source} · {auth} · traces "
            f"in {args.trace_dir}")
    if args.processes > 1:
        _, notes = split_limits(team, args.processes, "--processes")
        line += (f" · {args.processes} processes, each with its share of the limits "
                 f"({args.runs_per_process} runs in flight)")
        if args.max_concurrency < args.processes:
            notes.append(f"--max-concurrency {args.max_concurrency} is below --processes "
                         f"{args.processes}: each process runs 1, {args.processes} in all")
        line += "".join(f"\npodium: note: {n}" for n in notes)
    return line + "\n"


def run_serve(**options) -> int:
    from podium.serve.auth import check_auth_setup, load_keys

    args = ServeArgs(**options)
    _check_trace_dir(args.trace_dir)
    keys = load_keys(args.api_key_env, args.api_key_file)
    check_auth_setup(keys, args.no_auth, args.host)
    _need_extra()
    from podium.serve.session import load_secret

    session_key = load_secret(args.session_key_env)

    import uvicorn

    from podium.serve.http_limits import uvicorn_options
    from podium.serve.shutdown import Server

    team = _team(args)
    # podium.serve.access: one line each; http_limits: a bound on each request's headers
    options = dict(log_level="info", access_log=False, **uvicorn_options())
    if args.processes == 1:
        app = _app(args, keys, team, session_key)
        config = uvicorn.Config(app, host=args.host, port=args.port, **options)
        _log_handler()
        sys.stderr.write(_banner(args, keys, team))
        try:
            Server(config, app.state.server.drain).run()
        except SystemExit:  # uvicorn could not start (it logged why: e.g. the port is in use)
            return _not_started(args, "")
        return 0

    from podium.serve.processes import listeners, supervise
    from podium.serve.traces.files import TraceFiles

    try:  # fail here, not in every process; and apply retention once
        TraceFiles(args.trace_dir, args.trace_keep, shared=True)
    except OSError as exc:
        raise ConfigError(f"--trace-dir {args.trace_dir} cannot be used "
                          f"({exc.strerror or exc}). Pass a folder you can write.") from None
    try:
        socks = listeners(args.host, args.port, args.processes)
    except OSError as exc:
        return _not_started(args, f" ({exc.strerror or exc})")
    os.environ[ARGS_ENV] = json.dumps(asdict(args))
    # one /metrics over every process: prometheus-client's multiprocess mode, a folder the
    # processes share (the user's own PROMETHEUS_MULTIPROC_DIR is kept)
    metrics_dir = None
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        metrics_dir = tempfile.mkdtemp(prefix="podium-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    _log_handler()
    sys.stderr.write(_banner(args, keys, team))
    try:
        return supervise("podium.cli.serve:process_app", socks, options, session_key)
    finally:
        if metrics_dir is not None:
            shutil.rmtree(metrics_dir, ignore_errors=True)


def _not_started(args: ServeArgs, why: str) -> int:
    sys.stderr.write(f"podium: the server could not start on {args.host}:{args.port}{why}; pick "
                     "another --port (or --host) and run podium serve again.\n")
    return 2
