"""The `podium` command. Each command group lives in its own module, imported lazily."""

from __future__ import annotations

import sys

import typer

app = typer.Typer(
    name="podium",
    help="Run a Conductor: a small LLM that writes workflows for a team of worker LLMs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Run a Conductor: a small LLM that writes workflows for a team of worker LLMs."""


@app.command()
def ask(
    question: str = typer.Argument(..., help="The question to answer."),
    pool: str = typer.Option(None, "--pool", "-p", help="Pool file (TOML). Default: the "
                             "embedded SmolLM2 team, offline."),
    recursion: int = typer.Option(None, "--recursion", "-r", min=0, help="Recursive Conductor "
                                  "rounds after the first (default: the pool's run.recursion, 0)."),
    workers: str = typer.Option(None, "--workers", "-w", help="Comma-separated worker names: "
                                "run with this sub-pool only."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Call every model afresh; don't "
                                  "read or write the response cache."),
    trace: str = typer.Option(None, "--trace", help="Write the full trace (every prompt and "
                              "response) as JSON to this file."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object instead of "
                                  "tables."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show full responses and the "
                                 "Conductor's reasoning."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Ask the team a question: the Conductor writes a workflow, the workers run it."""
    from podium.cli.ask import run_ask

    names = [n.strip() for n in workers.split(",") if n.strip()] if workers else None
    code = run_ask(question, pool=pool, recursion=recursion, workers=names, no_cache=no_cache,
                   trace=trace, json_out=json_out, verbose=verbose, debug=debug)
    raise typer.Exit(code)


pool_app = typer.Typer(help="Look at and check a pool file.", no_args_is_help=True)
app.add_typer(pool_app, name="pool")

POOL_OPT = typer.Option(None, "--pool", "-p", help="Pool file (TOML). Default: the embedded "
                        "team.")


def _guard(fn, debug: bool) -> int:
    from podium.cli.output import error
    from podium.errors import ConfigError, PodiumError

    try:
        return fn()
    except PodiumError as exc:
        if debug:
            raise
        from rich.console import Console

        error(Console(stderr=True), exc)
        return 2 if isinstance(exc, ConfigError) else 1


@pool_app.command("show")
def pool_show(pool: str = POOL_OPT, debug: bool = typer.Option(False, "--debug")) -> None:
    """Print the Conductor and workers with their settings (keys only as variable names)."""
    from podium.cli import pool as pool_cli

    raise typer.Exit(_guard(lambda: pool_cli.show(pool), debug))


@pool_app.command("check")
def pool_check(pool: str = POOL_OPT, debug: bool = typer.Option(False, "--debug")) -> None:
    """Send a tiny request to every model: reachable? latency, model, price. Exit 1 on failure."""
    from podium.cli import pool as pool_cli

    raise typer.Exit(_guard(lambda: pool_cli.check(pool), debug))


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)


if __name__ == "__main__":
    main()
