"""Every recipe in configs/train/ builds: data, pool, policy, reward and TRL trainer, with
`--dry-run`. A 7B recipe is built with its model swapped for the bundled SmolLM2 and vLLM off;
data that is not on this machine is named in the plan instead of stopping the build."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("trl")

from podium.cli.main import app  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RECIPES = sorted((ROOT / "configs" / "train").glob("*.toml"))
KEYS = {"OPENAI_API_KEY": "sk-dry-run", "ANTHROPIC_API_KEY": "sk-dry-run",
        "GEMINI_API_KEY": "dry-run"}  # never sent: nothing is called in a dry run


def test_there_are_recipes():
    names = {p.stem for p in RECIPES}
    assert {"paper-qwen2.5-7b", "paper-subpool", "paper-recursion", "cpu-gsm8k"} <= names


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
def test_every_recipe_builds_under_dry_run(recipe, tmp_path, monkeypatch):
    for key, value in KEYS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(ROOT)
    result = CliRunner().invoke(app, [
        "train", "--config", str(recipe), "--dry-run", "--set", "model.path=smollm2",
        "--set", "vllm.enabled=false", "--set", f"output.dir={tmp_path / 'out'}",
    ], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "Plan (--dry-run" in out and "policy      smollm2" in out
    assert "questions x" in out and "reward      paper" in out
    assert "layout      " in out
    if recipe.stem.startswith("paper"):  # the paper pool, all seven workers
        assert "0 gemini-2.5-pro" in out and "6 r1-distill-qwen-32b" in out
        assert "layout      2 process(es) x 128 rollouts each (4 per pass x 32 accumulated; " \
               "whole groups)" in out  # laid out for its two training GPUs
    if recipe.stem == "paper-recursion":
        assert "32 of 64 rollouts continue into round 1 (v0 prompt)" in out
    if recipe.stem == "gym-budget":
        assert "budgets     $0.001, $0.002, $0.004, prices x 0.5..2, 50% of price lists " \
               "shuffled; shown to the Conductor" in out
    if recipe.stem == "paper-subpool":
        assert "sub-pools   100% of rows" in out
    assert not (tmp_path / "out" / "metrics.jsonl").exists()


def test_docs_list_every_training_key_with_its_meaning():
    """docs/training.md's "Every key" tables name every key of every section with the
    description the config itself gives (what `podium train` errors point to)."""
    from podium.train import config as c

    text = (ROOT / "docs" / "training.md").read_text().split("## Every key", 1)[1]
    tables = {}
    for block in text.split("\n`[")[1:]:
        label = "[" + block.split("`", 1)[0]
        tables[label] = [line for line in block.splitlines() if line.startswith("| `")]
    sections = {"[model]": c.ModelSection, "[pool]": c.PoolSection,
                "[[data.tasks]]": c.TaskSpec, "[data]": c.DataSection,
                "[reward]": c.RewardSection, "[budget]": c.BudgetSection,
                "[subpool]": c.SubpoolSection,
                "[recursion]": c.RecursionSection, "[grpo]": c.GRPOSection,
                "[rollout]": c.RolloutSection, "[vllm]": c.VllmSection,
                "[heldout]": c.HeldOutSection, "[output]": c.OutputSection}
    for label, cls in sections.items():
        rows = {line.split("`")[1]: line for line in tables[label]}
        for name, field in cls.model_fields.items():
            if name == "tasks":
                continue  # [[data.tasks]] has its own table
            assert name in rows, f"docs/training.md {label} lacks `{name}`"
            assert (field.description or "") in rows[name], f"{label} {name}: stale meaning"
