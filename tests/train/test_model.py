"""The bundled GGUF's trainable conversion: made once per machine, named by what it was made
from, used only when complete, and shared by every test session."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import podium.train.model as model


@pytest.fixture
def models(tmp_path, monkeypatch):
    """An empty podium cache, and `convert_gguf` counting its calls (writing config.json only)."""
    monkeypatch.setenv("PODIUM_CACHE_DIR", str(tmp_path))
    made = []

    def convert(target, gguf=None):
        made.append(target)
        target.mkdir(parents=True)
        (target / "config.json").write_text("{}")
        return target

    monkeypatch.setattr(model, "convert_gguf", convert)
    return made


def test_a_conversion_is_made_once_and_then_reused(models):
    first = model.resolve_model("smollm2")
    assert model.resolve_model("smollm2") == first
    assert models == [Path(first)] and Path(first).parent == model.models_dir()
    assert model.resolve_model("/some/hf/folder") == "/some/hf/folder"  # loaded as it is


def test_a_leftover_partial_conversion_is_never_used(models):
    """A conversion interrupted before its rename leaves only a `.NAME-xxxx` folder: the next
    run converts afresh."""
    target = model.converted_dir()
    partial = target.parent / f".{target.name}-abcd1234"
    partial.mkdir(parents=True)
    (partial / "config.json").write_text("{}")
    assert model.resolve_model("smollm2") == str(target)
    assert models == [target]


def test_another_gguf_or_conversion_version_gets_a_folder_of_its_own(tmp_path, monkeypatch):
    from podium.llm.embedded import bundled_gguf

    monkeypatch.setenv("PODIUM_CACHE_DIR", str(tmp_path))
    bundled = model.converted_dir()
    copy = tmp_path / "same.gguf"
    shutil.copyfile(bundled_gguf(), copy)
    assert model.converted_dir(copy) == bundled  # named by content, not by path
    with copy.open("ab") as fh:
        fh.write(b"\0")
    assert model.converted_dir(copy) != bundled
    monkeypatch.setattr(model, "CONVERSION", model.CONVERSION + 1)
    assert model.converted_dir() != bundled


def test_test_sessions_share_the_machines_conversion():
    """Each session's podium cache is a fresh folder, its models/ podium's own: a second
    `make test`, or a fresh clone's, does not convert the GGUF again."""
    session = Path(os.environ["PODIUM_CACHE_DIR"])
    shared = session / "models"
    assert shared.is_symlink() and session not in shared.resolve().parents
    assert model.models_dir().resolve() == shared.resolve()
