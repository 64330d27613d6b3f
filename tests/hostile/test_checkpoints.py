"""Hostile checkpoints: damaged cards, folders that are not checkpoints, a GGUF without its card.

Each case ends in one paragraph naming the fix (exit 2), never a traceback, and `podium export`
leaves nothing at `--gguf` when it fails. The export that fails once it has written the GGUF
(its card cannot be written) runs on a trained checkpoint in tests/train/test_train.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.hostile.test_inputs import POOL, assert_clean_error, podium

pytest.importorskip("gguf")

# SmolLM2-135M's shape, which podium export checks against the bundled GGUF
SMOLLM2 = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 30,
           "hidden_size": 576, "intermediate_size": 1536, "num_attention_heads": 9,
           "num_key_value_heads": 3, "vocab_size": 49152, "tie_word_embeddings": True}
CARD = {"format": 1, "pool": [{"id": 0, "name": "adder", "backend": "function", "model": ""}],
        "pool_source": "pool.toml", "run": {"prompt": "v1", "fewshots": "none"}}


def checkpoint(folder: Path, *, card: dict | str | None = CARD, weights: bytes | None = None
               ) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(SMOLLM2))
    if card is not None:
        (folder / "podium-conductor.json").write_text(
            card if isinstance(card, str) else json.dumps(card))
    if weights is not None:
        (folder / "model.safetensors").write_bytes(weights)
    return folder


def truncated_safetensors(tmp_path: Path) -> bytes:
    import torch
    from safetensors.torch import save_file

    whole = tmp_path / "whole.safetensors"
    save_file({"model.embed_tokens.weight": torch.zeros(64, 64)}, str(whole))
    data = whole.read_bytes()
    return data[: len(data) // 2]  # a copy cut off half way


def export(tmp_path: Path, source: Path | str):
    out = tmp_path / "out" / "conductor.gguf"
    proc = podium("export", str(source), "--gguf", str(out))
    return proc, out


@pytest.mark.parametrize("case, words", [
    ("missing", ["no such checkpoint"]),
    ("file", ["is a file, not a checkpoint folder"]),
    ("empty", ["holds no config.json"]),
    ("no card", ["has no Conductor card", "podium-conductor.json"]),
    ("no weights", ["holds no .safetensors weights"]),
    ("truncated", ["cannot be read", "truncated or damaged"]),
    ("card of another shape", ["is not a Conductor card podium can read", "pool"]),
])
def test_export_of_something_that_is_not_a_whole_checkpoint(tmp_path, case, words):
    source = tmp_path / "ckpt"
    if case == "file":
        source.write_text("not a folder")
    elif case == "empty":
        source.mkdir()
    elif case == "no card":
        checkpoint(source, card=None)
    elif case == "no weights":
        checkpoint(source)
    elif case == "truncated":
        checkpoint(source, weights=truncated_safetensors(tmp_path))
    elif case == "card of another shape":
        checkpoint(source, card={"format": 1, "pool": {"0": "adder"}, "run": {}})
    proc, out = export(tmp_path, source)
    assert_clean_error(proc, 2, *words)
    assert not out.parent.exists() or not any(out.parent.iterdir())  # nothing half-written


def test_export_to_a_name_that_is_not_a_gguf_file(tmp_path):
    proc = podium("export", str(checkpoint(tmp_path / "ckpt")), "--gguf", str(tmp_path))
    assert_clean_error(proc, 2, "name the .gguf file to write")


@pytest.fixture
def pool(tmp_path) -> Path:
    path = tmp_path / "pool.toml"
    path.write_text(POOL)
    return path


def ask(pool: Path, conductor: Path, *more: str):
    return podium("ask", "What is 2 + 3?", "--pool", str(pool), "--conductor", str(conductor),
                  "--no-cache", "--json", *more)


@pytest.mark.parametrize("card, words", [
    ("{\"format\": 1, \"pool\": [", ["is not a Conductor card podium can read",
                                    "JSONDecodeError"]),
    ("[1, 2, 3]", ["is not a Conductor card podium can read", "(the whole card)"]),
    (json.dumps({**CARD, "pool": [{"id": "zero"}]}), ["pool.0.id"]),
    (json.dumps({**CARD, "run": {"max_steps": "many"}}), ["max_steps"]),
    (json.dumps({**CARD, "format": 7}), ["another podium version", "format 7"]),
])
def test_a_damaged_card_is_named_with_its_field(tmp_path, pool, card, words):
    folder = checkpoint(tmp_path / "ckpt", card=card)
    proc = ask(pool, folder)
    assert_clean_error(proc, 2, "podium-conductor.json", *words)


def test_a_gguf_without_its_card_is_refused_unless_asked_for(tmp_path, pool):
    from podium.llm.embedded import bundled_gguf

    moved = tmp_path / "moved" / "conductor.gguf"
    moved.parent.mkdir()
    try:
        moved.symlink_to(bundled_gguf())
    except OSError:
        shutil.copy(bundled_gguf(), moved)
    proc = ask(pool, moved)
    assert_clean_error(proc, 2, "has no card", "conductor.podium-conductor.json",
                       "--allow-pool-mismatch")
    # run anyway, with the pool's own settings: its Conductor's 32 tokens (unheld, the bundled
    # model rambles for hundreds)
    pool.write_text(POOL.replace('function = "podium.testing.workers:one_step"\n',
                                 'function = "podium.testing.workers:one_step"\n'
                                 'max_tokens = 32\n', 1))
    proc = ask(pool, moved, "--allow-pool-mismatch")
    assert proc.returncode in (0, 1), proc.stderr.decode()
    assert json.loads(proc.stdout)["conductor"][0]["completion"]
