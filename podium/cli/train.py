"""`podium train`: train a Conductor with GRPO from a TOML config."""

from __future__ import annotations

from rich.console import Console

from podium.errors import ConfigError

INSTALL = ("Training needs the `train` extra: pip install 'podium[train]' (torch 2.13.0 CPU, "
           "transformers, trl, datasets).")


def require_train() -> None:
    import importlib.util

    if importlib.util.find_spec("trl") is None:
        raise ConfigError(INSTALL)


def run_train(config: str, overrides: list[str], dry_run: bool, resume: bool) -> int:
    console = Console()
    require_train()
    from podium.train.config import load_train_config
    from podium.train.rollout.layout import Launch
    from podium.train.trainer import build, train

    cfg = load_train_config(config, overrides)

    def show(lines: list[str], note: str = "") -> None:
        console.print(f"[bold]Plan[/]{note}")
        for line in lines:
            console.print("  " + line, markup=False, highlight=False, soft_wrap=True)

    if dry_run:
        plan = build(cfg, dry_run=True)
        try:
            show(plan.lines, " (--dry-run: built, not trained)")
            if plan.data.missing:
                console.print("[yellow]Some training data is not on this machine: podium train "
                              "will stop there until it is (see 'missing' above).[/]")
        finally:
            plan.close()
        return 0
    final = train(cfg, resume=resume, echo=show)
    if Launch.from_env().rank != 0:  # the other processes of the job say nothing
        return 0
    console.print(f"Trained Conductor: {final} (metrics: {cfg.output.dir}/metrics.jsonl, "
                  f"transcripts: {cfg.output.dir}/transcripts.jsonl)")
    return 0


def run_plot(runs: list[str], out: str | None) -> int:
    """`podium train plot`: the learning curve of one run (into its folder) or several."""
    from pathlib import Path

    from podium.train.curve import CURVE, plot_runs

    folders = [Path(r) for r in runs]
    target = Path(out) if out else (folders[0] / CURVE if len(folders) == 1
                                    else Path("learning_curves.png"))
    Console().print(f"Wrote {plot_runs(folders, target)}")
    return 0
