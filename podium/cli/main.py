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

    code = run_ask(question, pool=pool, recursion=recursion, trace=trace, json_out=json_out,
                   verbose=verbose, debug=debug)
    raise typer.Exit(code)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)


if __name__ == "__main__":
    main()
