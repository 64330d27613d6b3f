"""`podium train`: train a Conductor with GRPO from a TOML config."""

from __future__ import annotations

import os

from rich.console import Console

from podium.errors import ConfigError

INSTALL = ("Training needs the `train` extra: pip install 'podium[train]' (torch 2.13.0 CPU, "
           "transformers, trl, datasets).")


def require_train() -> None:
    try:
        import trl  # noqa: F401
    except ImportError:
        raise ConfigError(INSTALL) from None


def run_train(config: str, overrides: list[str], dry_run: bool, resume: bool) -> int:
    console = Console()
    require_train()
    from podium.train.config import load_train_config
    from podium.train.trainer import build, train

    cfg = load_train_config(config, overrides)
    if dry_run:
        plan = build(cfg, dry_run=True)
        try:
            console.print("[bold]Plan[/] (--dry-run: built, not trained)")
            for line in plan.lines:
                console.print("  " + line, markup=False, highlight=False, soft_wrap=True)
            if plan.data.missing:
                console.print("[yellow]Some training data is not on this machine: podium train "
                              "will stop there until it is (see 'missing' above).[/]")
        finally:
            plan.close()
        return 0
    header = []

    def echo(line: str) -> None:  # the plan, from the main process, before the first step
        if not header:
            header.append(console.print("[bold]Plan[/]"))
        console.print("  " + line, markup=False, highlight=False, soft_wrap=True)

    final = train(cfg, resume=resume, echo=echo)
    if os.environ.get("RANK", "0") != "0":
        return 0
    console.print(f"Trained Conductor: {final} (metrics: {cfg.output.dir}/metrics.jsonl, "
                  f"transcripts: {cfg.output.dir}/transcripts.jsonl)")
    return 0
