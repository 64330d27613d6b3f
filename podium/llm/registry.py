"""Build clients from pool entries: one place that maps a backend name to a class."""

from __future__ import annotations

from podium.config import ModelSpec, Pool
from podium.llm.base import ChatClient
from podium.llm.embedded import EmbeddedClient, ModelStore
from podium.llm.function import FunctionClient
from podium.llm.openai_compat import OpenAICompatClient


def build_client(spec: ModelSpec, store: ModelStore | None = None) -> ChatClient:
    if spec.backend == "openai":
        return OpenAICompatClient(spec)
    if spec.backend == "embedded":
        return EmbeddedClient(spec, store or ModelStore())
    if spec.backend == "function":
        return FunctionClient(spec)
    raise AssertionError(f"unhandled backend {spec.backend!r}")  # the config validates it


def build_clients(pool: Pool) -> tuple[ChatClient, list[ChatClient]]:
    """The Conductor's client and one client per worker, sharing embedded models."""
    store = ModelStore()
    return build_client(pool.conductor, store), [build_client(w, store) for w in pool.workers]
