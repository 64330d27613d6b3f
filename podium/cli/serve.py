"""`podium serve`: check the setup, build the pipeline once, run the app under uvicorn.

Everything that can be wrong with the setup (no key and no --no-auth, --no-auth on a public
address, an unset key variable, a bad pool, an unwritable trace folder, the `serve` extra not
installed) is a ConfigError before the port is bound: exit 2 with the flag to fix. uvicorn then
owns the process: SIGTERM or Ctrl-C stops new connections, lets the requests in flight finish
for up to --graceful-timeout seconds, then closes the pipeline.
"""

from __future__ import annotations

import logging
import sys

from podium.errors import ConfigError


def _need_extra() -> None:
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise ConfigError(f"podium serve needs the serve extra ({exc.name} is missing). "
                          "Install it: pip install 'podium[serve]'.") from None


def _log_handler() -> None:
    log = logging.getLogger("podium.serve")
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)-9s podium: %(message)s"))
        log.addHandler(handler)
    log.setLevel(logging.INFO)


def run_serve(*, pool: str | None, conductor: str | None, allow_pool_mismatch: bool,
              host: str, port: int, api_key_env: str | None, api_key_file: str | None,
              no_auth: bool, max_concurrency: int, max_request_bytes: int, trace_dir: str,
              trace_keep: int, graceful_timeout: float, no_cache: bool,
              pass_through: bool = False) -> int:
    from podium.serve.auth import check_auth_setup, load_keys

    keys = load_keys(api_key_env, api_key_file)
    check_auth_setup(keys, no_auth, host)
    _need_extra()

    import uvicorn

    from podium.checkpoint import with_conductor
    from podium.config import load_pool
    from podium.pipeline import Pipeline
    from podium.serve import ServeConfig, create_app

    team = load_pool(pool)
    if conductor:
        team = with_conductor(team, conductor, allow_mismatch=allow_pool_mismatch)
    settings = team.run.model_copy(update={"cache": False}) if no_cache else team.run
    config = ServeConfig(keys=keys, max_concurrency=max_concurrency,
                         max_request_bytes=max_request_bytes, trace_dir=trace_dir,
                         trace_keep=trace_keep, pass_through=pass_through)
    pipeline = Pipeline(team, settings=settings)
    try:
        app = create_app(config, pipeline)
    except OSError as exc:
        raise ConfigError(f"--trace-dir {trace_dir} cannot be used ({exc.strerror or exc}). "
                          "Pass a folder you can write.") from None
    _log_handler()
    auth = (f"{len(keys)} API key{'s' if len(keys) != 1 else ''}" if keys
            else "no key (--no-auth, loopback only)")
    workers = ", ".join(w.name for w in team.workers)
    shown = f"[{host}]" if ":" in host else host
    models = "models 'podium' and each worker's" if pass_through else "model 'podium'"
    sys.stderr.write(f"podium: serving {models} at http://{shown}:{port}/v1 · Conductor "
                     f"{team.conductor.name} · workers {workers} · pool {team.source} · "
                     f"{auth} · traces in {trace_dir}\n")
    server = uvicorn.Server(uvicorn.Config(
        app, host=host, port=port, timeout_graceful_shutdown=graceful_timeout,
        log_level="info", access_log=True))
    try:
        server.run()
    except SystemExit:  # uvicorn could not start (it logged why: e.g. the port is in use)
        sys.stderr.write(f"podium: the server could not start on {host}:{port}; pick another "
                         "--port (or --host) and run podium serve again.\n")
        return 2
    return 0
