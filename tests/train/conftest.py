"""Fixtures shared by the training tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tokenizer():
    """The bundled SmolLM2's tokenizer, as training loads it (special tokens fixed)."""
    pytest.importorskip("transformers")
    from podium.train.model import load_tokenizer

    return load_tokenizer("smollm2")

