"""A worker that is a Python callable, named in the pool file as `function = "module:callable"`.

For tools (a calculator, a code runner, a retriever) and for test environments. The callable
takes the list of chat messages and returns a string or a `ChatResponse`; it may be async.
An exception it raises becomes a `WorkerError` of kind `other`; a `WorkerError` it raises keeps
its kind (so a test environment can inject an outage or a rejected key). So does anything else
it returns (None, a number, a list): a tool's broken result is the tool's failure, recorded
on the step, never text made up from it.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import time
from collections.abc import Callable
from typing import Any

from podium.config import ModelSpec
from podium.errors import ConfigError, WorkerError
from podium.llm.base import ChatResponse, Message, NoGrammar, Sampling


def import_callable(path: str) -> Callable[..., Any]:
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"function = {path!r} must look like 'package.module:callable'.")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"Cannot import module {module_name!r} for function = {path!r}: {e}. "
                          "Check the name and that the module is on PYTHONPATH.") from None
    target: Any = module
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise ConfigError(f"Module {module_name!r} has no attribute {attr!r} "
                              f"(from function = {path!r}).")
    if not callable(target):
        raise ConfigError(f"function = {path!r} does not name a callable.")
    return target


class FunctionClient(NoGrammar):
    def __init__(self, spec: ModelSpec, fn: Callable[..., Any] | None = None) -> None:
        self.spec = spec
        self.name = spec.name
        self._fn = fn or import_callable(spec.function or "")

    async def chat(self, messages: list[Message], *, grammar: str | None = None,
                   sample_id: int | str = 0, sampling: Sampling | None = None) -> ChatResponse:
        """A function is a tool, not a sampler: `sampling` does not apply to it."""
        self.refuse_grammar(grammar)
        start = time.perf_counter()
        try:
            if inspect.iscoroutinefunction(self._fn) or inspect.iscoroutinefunction(
                type(self._fn).__call__  # an object with `async def __call__`
            ):
                out = await self._fn(messages)
            else:
                out = await asyncio.to_thread(self._fn, messages)
                if inspect.isawaitable(out):  # a sync callable that returned an awaitable
                    out = await out
        except WorkerError:  # the callable says how it failed (a test environment's faults)
            raise
        except Exception as exc:  # a tool's failure is data, recorded on the step
            raise WorkerError(self.name, "other", f"{type(exc).__name__}: {exc}") from None
        latency = time.perf_counter() - start
        if isinstance(out, ChatResponse):
            return out
        if not isinstance(out, str):
            raise WorkerError(self.name, "other", f"the function returned "
                              f"{type(out).__name__}, not a string or a ChatResponse")
        return ChatResponse(text=out, latency_s=latency, model=self.spec.function or "",
                            finish_reason="stop")

    async def aclose(self) -> None:
        return None
