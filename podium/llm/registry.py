"""Build clients from pool entries: one place that maps a backend name to a class and stacks
the layers every call goes through:

    CachedClient          identical earlier request -> answered from the response cache
      ReliableClient      RPM/TPM limits, retries with backoff, re-asks on empty replies
        backend client    openai | anthropic | gemini | embedded | function | transformers

Network backends get the reliability layer; the embedded model and Python functions don't need
it. Concurrency limits live in the executor's `Team`, shared by every workflow.
"""

from __future__ import annotations

from podium.config import ModelSpec, Pool
from podium.llm.base import ChatClient
from podium.llm.cache import CachedClient, ResponseCache
from podium.llm.embedded import EmbeddedClient, ModelStore
from podium.llm.function import FunctionClient
from podium.llm.reliable import ReliableClient

NETWORK_BACKENDS = ("openai", "anthropic", "gemini")


def _backend(spec: ModelSpec, store: ModelStore | None) -> ChatClient:
    if spec.backend == "openai":
        from podium.llm.openai_compat import OpenAICompatClient

        return OpenAICompatClient(spec)
    if spec.backend == "anthropic":
        from podium.llm.anthropic_native import AnthropicClient

        return AnthropicClient(spec)
    if spec.backend == "gemini":
        from podium.llm.gemini_native import GeminiClient

        return GeminiClient(spec)
    if spec.backend == "embedded":
        return EmbeddedClient(spec, store or ModelStore())
    if spec.backend == "function":
        return FunctionClient(spec)
    if spec.backend == "transformers":
        from podium.llm.transformers_local import TransformersClient

        return TransformersClient(spec)
    raise AssertionError(f"unhandled backend {spec.backend!r}")  # the config validates it


def build_client(spec: ModelSpec, store: ModelStore | None = None, *,
                 cache: ResponseCache | None = None) -> ChatClient:
    """One model's client with its reliability and cache layers."""
    client = _backend(spec, store)
    if spec.backend in NETWORK_BACKENDS:
        client = ReliableClient(client, spec)  # with its own RPM/TPM limiter when set
    if cache is not None:
        client = CachedClient(client, spec, cache)
    return client


def build_clients(pool: Pool, *, cache: ResponseCache | None = None
                  ) -> tuple[ChatClient, list[ChatClient]]:
    """The Conductor's client and one client per worker, sharing embedded models."""
    store = ModelStore()
    return (build_client(pool.conductor, store, cache=cache),
            [build_client(w, store, cache=cache) for w in pool.workers])
