"""The `podium` command. Each command group lives in its own module, imported lazily."""

from __future__ import annotations

import sys

import typer

from podium.cli.worker import worker_app  # its commands import their work lazily

app = typer.Typer(
    name="podium",
    help="Run a Conductor: a small LLM that writes workflows for a team of worker LLMs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


CONDUCTOR_OPT = typer.Option(None, "--conductor", help="A trained Conductor: a podium train "
                             "checkpoint directory, a .gguf file, or an OpenAI-compatible "
                             "URL\\[#MODEL].")  # \\[: not rich markup
MISMATCH_OPT = typer.Option(False, "--allow-pool-mismatch", help="Run a checkpoint with a pool "
                            "it was not trained on.")


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            installed = version("podium")
        except PackageNotFoundError:  # run from a source tree that is not installed
            import podium

            installed = podium.__version__
        typer.echo(f"podium {installed} (Python {sys.version.split()[0]})")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                      help="Print podium's version and exit."),
) -> None:
    """Run a Conductor: a small LLM that writes workflows for a team of worker LLMs."""


@app.command()
def ask(
    question: str = typer.Argument(None, show_default=False, help="The question to answer; "
                                   "when left out, read from standard input (echo QUESTION "
                                   "| podium ask)."),
    pool: str = typer.Option(None, "--pool", "-p", help="Pool file (TOML). Default: the "
                             "embedded SmolLM2 team, offline."),
    recursion: int = typer.Option(None, "--recursion", "-r", min=0, help="Recursive Conductor "
                                  "rounds after the first (default: the pool's run.recursion, 0)."),
    workers: str = typer.Option(None, "--workers", "-w", help="Comma-separated worker names: "
                                "run with this sub-pool only."),
    budget: float = typer.Option(None, "--budget", "-b", help="What the workers' calls may "
                                 "cost (USD, list price): shown to the Conductor with "
                                 "run.show_budget; the answer says whether the plan kept to "
                                 "it."),
    conductor: str = CONDUCTOR_OPT,
    allow_pool_mismatch: bool = MISMATCH_OPT,
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
                   trace=trace, json_out=json_out, verbose=verbose, debug=debug,
                   conductor=conductor, allow_pool_mismatch=allow_pool_mismatch,
                   budget=budget)
    raise typer.Exit(code)


@app.command("eval")
def eval_cmd(
    task: str = typer.Option(..., "--task", "-t", help="gsm8k, math500, mmlu, aime24, aime25, "
                             "humaneval, bigcodebench, bigcodebench-instruct, livecodebench, "
                             "gpqa, rlpr, gym, or jsonl:PATH / csv:PATH / json:PATH "
                             "(`podium tasks` lists them)."),
    system: str = typer.Option("conductor", "--system", "-s", help="conductor, single:W, "
                               "moa[:W1,W2], self-moa:W[:k], vote:W[:k], reflect:W[:k], "
                               "pipeline[:P,E,V], random (W: a worker name or index), or "
                               "openai:URL[:MODEL] (any OpenAI-compatible model, e.g. "
                               "podium serve's)."),
    n: int = typer.Option(None, "--n", min=1, help="Items to run (seeded sample); default all."),
    repeats: int = typer.Option(3, "--repeats", "-R", min=1, help="Runs of every item "
                                "(the paper's 3; accuracy is reported as mean ± s.e.)."),
    concurrency: int = typer.Option(4, "--concurrency", "-c", min=1,
                                    help="Items in flight at once."),
    out: str = typer.Option(None, "--out", "-o", help="Results folder (default "
                            "runs/eval/TASK-SYSTEM); rerun with the same folder to resume."),
    pool: str = typer.Option(None, "--pool", "-p", help="Pool file (default: embedded)."),
    conductor: str = CONDUCTOR_OPT,
    allow_pool_mismatch: bool = MISMATCH_OPT,
    split: str = typer.Option(None, "--split", help="Which split of the task (default: the "
                              "preset's, else test)."),
    preset: str = typer.Option(None, "--preset", help="paper: the reference code's test "
                               "subsets and graders, comparable with the paper's Table 7."),
    seed: int = typer.Option(0, "--seed", help="Seed for the item sample."),
    data_dir: str = typer.Option(None, "--data-dir", help="Folder of offline benchmark files "
                                 "(default $PODIUM_DATA_DIR; without either, the task's "
                                 "dataset comes from the Hugging Face Hub at a pinned "
                                 "revision; docs/evaluation.md, \"Data\")."),
    path: str = typer.Option(None, "--path", help="The task's data file, where it takes one "
                             "(livecodebench, gpqa, rlpr)."),
    task_option: list[str] = typer.Option(None, "--task-option", "--option", help="A task "
                                          "option, KEY=VALUE (the value read as TOML), e.g. "
                                          "--task-option grading=legacy (repeatable; `podium "
                                          "tasks` lists each task's options)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Don't use the response cache."),
    fallback: bool = typer.Option(False, "--fallback", help="Answer with one worker when the "
                                  "Conductor's output does not parse (default: score it as a "
                                  "format error, as the paper does)."),
    retry_errors: bool = typer.Option(False, "--retry-errors", help="Rerun items recorded "
                                      "as errors."),
    traces: bool = typer.Option(False, "--traces", help="Also save every item's full trace."),
    budget: float = typer.Option(None, "--budget", "-b", help="What each question's worker "
                                 "calls may cost (USD, list price): shown to the Conductor "
                                 "with run.show_budget; the summary gives the share of plans "
                                 "over it and the accuracy counting those as wrong."),
    allow_unisolated: bool = typer.Option(False, "--allow-unisolated", help="Grade a code task "
                                          "even where the sandbox cannot isolate the code fully "
                                          "(no unshare, no seccomp); meta.json records what was "
                                          "missing."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Evaluate a system on a task: resumable results, accuracy ± s.e., cost, workflow stats."""
    from podium.cli.eval import eval_command
    from podium.eval.run import EvalSpec

    options = {k: v for k, v in {"data_dir": data_dir, "path": path}.items() if v}
    options.update(_task_options(task_option or []))
    out = out or f"runs/eval/{task.replace(':', '_').replace('/', '_')}-{system.replace(':', '_')}"
    spec = EvalSpec(task=task, system=system, n=n, repeats=repeats, concurrency=concurrency,
                    out=out, pool=pool, split=split, seed=seed, preset=preset,
                    task_options=options, conductor=conductor,
                    allow_pool_mismatch=allow_pool_mismatch, no_cache=no_cache,
                    fallback=fallback, retry_errors=retry_errors, traces=traces,
                    allow_unisolated=allow_unisolated,
                    budget=budget)
    code = _guard(lambda: eval_command(spec), debug)
    raise typer.Exit(code)


@app.command("report")
def report_cmd(
    folders: list[str] = typer.Argument(..., help="Folders written by podium eval."),
    out: str = typer.Option("runs/report", "--out", "-o", help="Where report.md and PNGs go."),
    debug: bool = typer.Option(False, "--debug"),
) -> None:
    """Put evaluated systems side by side: a Markdown table and PNG plots."""
    from podium.cli.eval import run_report

    raise typer.Exit(_guard(lambda: run_report(folders, out), debug))


@app.command("tasks")
def tasks_cmd(debug: bool = typer.Option(False, "--debug", help="Show tracebacks.")) -> None:
    """List the tasks `podium eval --task` takes, with the options each accepts."""
    from podium.cli.output import tasks_table

    def run() -> int:
        from podium.cli.output import console

        console().print(tasks_table())
        return 0

    raise typer.Exit(_guard(run, debug))


train_app = typer.Typer(help="Train a Conductor with GRPO: rewards are the team's graded "
                        "answers. `podium train plot RUN` draws a run's learning curve.")
app.add_typer(train_app, name="train")


@train_app.callback(invoke_without_command=True)
def train_cmd(
    ctx: typer.Context,
    config: str = typer.Option(None, "--config", "-c", help="Training config (TOML); "
                               "configs/train/ has recipes."),
    overrides: list[str] = typer.Option(None, "--set", help="Override a config key: "
                                        "section.key=value (repeatable)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Build everything (data, policy, "
                                 "reward, trainer), print the plan, train nothing."),
    resume: bool = typer.Option(False, "--resume", help="Continue the output folder's run "
                                "from its newest complete checkpoint (none: start at step 1, "
                                "moving what an earlier attempt left into attempt-K/)."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Train a Conductor with GRPO: rewards are the team's graded answers."""
    if ctx.invoked_subcommand is not None:
        return
    if config is None:
        raise typer.BadParameter("a training config is required (configs/train/ has "
                                 "recipes), or a command such as `plot`.",
                                 param_hint="'--config' / '-c'")
    from podium.cli.train import run_train

    raise typer.Exit(_guard(lambda: run_train(config, overrides or [], dry_run, resume), debug))


@train_app.command("plot")
def train_plot_cmd(
    runs: list[str] = typer.Argument(..., help="Output folders of `podium train` runs (each "
                                     "holds metrics.jsonl)."),
    out: str = typer.Option(None, "--out", "-o", help="The PNG to write (default: RUN/"
                            "learning_curve.png for one run, learning_curves.png here for "
                            "several)."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Draw the learning curve of one or several training runs (several on one figure)."""
    from podium.cli.train import run_plot

    raise typer.Exit(_guard(lambda: run_plot(runs, out), debug))


@app.command("export")
def export_cmd(
    checkpoint: str = typer.Argument(..., help="A podium train checkpoint directory."),
    gguf: str = typer.Option(..., "--gguf", help="The GGUF file to write."),
    like: str = typer.Option(None, "--like", help="A GGUF of the same family to copy the "
                             "tokenizer and settings from (default: the bundled SmolLM2)."),
    dtype: str = typer.Option("f16", "--type", help="f16 or f32."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Write a trained SmolLM2-family Conductor as GGUF, for the embedded llama.cpp backend."""

    def run() -> int:
        from podium.cli.train import require_train

        require_train()
        if dtype not in ("f16", "f32"):
            from podium.errors import ConfigError

            raise ConfigError(f"--type {dtype!r}: use f16 or f32.")
        from podium.train.export import export_gguf

        out = export_gguf(checkpoint, gguf, like=like, dtype=dtype)  # type: ignore[arg-type]
        typer.echo(f"Wrote {out}; run it with: podium ask --conductor {out} ...")
        return 0

    raise typer.Exit(_guard(run, debug))


@app.command("serve")
def serve_cmd(
    pool: str = typer.Option(None, "--pool", "-p", help="Pool file (default: embedded)."),
    conductor: str = CONDUCTOR_OPT,
    allow_pool_mismatch: bool = MISMATCH_OPT,
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    port: int = typer.Option(8000, "--port", min=1, max=65535, help="Port to listen on."),
    api_key_env: str = typer.Option(None, "--api-key-env", help="Environment variable "
                                    "holding the API key clients must send."),
    api_key_file: str = typer.Option(None, "--api-key-file", help="File of API keys, one a "
                                     "line."),
    no_auth: bool = typer.Option(False, "--no-auth", help="Serve without keys (loopback "
                                 "--host only)."),
    max_concurrency: int = typer.Option(4, "--max-concurrency", min=1, help="Runs in flight "
                                        "at once; more get 429."),
    max_request_bytes: int = typer.Option(1_000_000, "--max-request-bytes", min=1,
                                          help="Largest request body; larger gets 413."),
    trace_dir: str = typer.Option("runs/serve-traces", "--trace-dir", help="Where every "
                                  "request's trace is kept (owner-only)."),
    trace_keep: int = typer.Option(1000, "--trace-keep", min=1, help="Traces kept (newest)."),
    graceful_timeout: float = typer.Option(30.0, "--graceful-timeout", min=0, help="On "
                                           "SIGTERM, seconds to let requests in flight finish."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Don't use the response cache."),
    pass_through: bool = typer.Option(False, "--pass-through", help="Also serve each worker "
                                      "as a model of its own (one call, the bare question)."),
    processes: int = typer.Option(1, "--processes", min=1, help="Server processes sharing "
                                  "the port (one core each); the limits are split among them."),
    session_key_env: str = typer.Option(None, "--session-key-env", help="Environment "
                                        "variable holding the secret (32+ characters) that "
                                        "seals tool-call ids; default: a random one per start."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Serve the team as one OpenAI-compatible model, `podium` (see docs/serving.md)."""
    from podium.cli.serve import run_serve

    raise typer.Exit(_guard(lambda: run_serve(
        pool=pool, conductor=conductor, allow_pool_mismatch=allow_pool_mismatch, host=host,
        port=port, api_key_env=api_key_env, api_key_file=api_key_file, no_auth=no_auth,
        max_concurrency=max_concurrency, max_request_bytes=max_request_bytes,
        trace_dir=trace_dir, trace_keep=trace_keep, graceful_timeout=graceful_timeout,
        no_cache=no_cache, pass_through=pass_through, processes=processes,
        session_key_env=session_key_env), debug))


trace_app = typer.Typer(help="Look at saved traces.", no_args_is_help=True)
app.add_typer(trace_app, name="trace")


@trace_app.command("view")
def trace_view(
    file: str = typer.Argument(..., help="A trace: podium ask --trace FILE, podium eval "
                               "--traces (OUT/traces/*.json) or podium serve's --trace-dir."),
    out: str = typer.Option(None, "--out", "-o", help="The HTML page to write (default: "
                            "beside the trace, .html)."),
    no_open: bool = typer.Option(False, "--no-open", help="Write the page, open no browser."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Draw a trace's workflow (steps, visibility, rounds, every response) in a browser."""
    from podium.cli.trace import view

    raise typer.Exit(_guard(lambda: view(file, out, not no_open), debug))


pool_app = typer.Typer(help="Look at and check a pool file.", no_args_is_help=True)
app.add_typer(pool_app, name="pool")
app.add_typer(worker_app, name="worker")  # podium worker serve (podium/cli/worker.py)

POOL_OPT = typer.Option(None, "--pool", "-p", help="Pool file (TOML). Default: the embedded "
                        "team.")


def _task_options(items: list[str]) -> dict:
    """`--option KEY=VALUE` pairs, each value read as TOML (else as text)."""
    import tomllib

    out = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"--task-option {item!r}: write KEY=VALUE, e.g. "
                                     "--task-option grading=legacy")
        try:
            out[key.strip()] = tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError:
            out[key.strip()] = text
    return out


def _guard(fn, debug: bool) -> int:
    """Run a command; end a failure in one paragraph (and, with --debug, its traceback)."""
    from podium.cli.output import console, error, print_traceback
    from podium.errors import ConfigError, PodiumError

    try:
        return fn()
    except (typer.Exit, typer.Abort, typer.BadParameter):
        raise  # typer's own: a usage error, an exit code
    except Exception as exc:  # an unexpected one too: one paragraph, never a bare traceback
        if debug:
            print_traceback()
        error(console(stderr=True), exc, unexpected=not isinstance(exc, PodiumError))
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
