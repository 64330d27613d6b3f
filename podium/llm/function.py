"""A worker that is a Python callable, named in the pool file as `function = "module:callable"`.

For tools (a calculator, a code runner, a retriever) and for test environments. The callable
takes the list of chat messages and returns a string or a `ChatResponse`; it may be async.

A function may act with the caller's tools: one that takes a `tools` keyword (or `**kwargs`)
is called as `fn(messages, tools=[Tool, ...], tool_choice=..., parallel_tool_calls=...)` when
a call has tools (each keyword only when set; see `podium.llm.tools`), and answers with calls
by returning a `ChatResponse` with `tool_calls`, or a dict in Chat Completions' message shape:

    {"content": "Checking the weather." | None,
     "tool_calls": [{"id": "call_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]}

(`ToolCall` objects may stand in the list for the dicts). The tool results come back in the
next call's messages (`tool` messages). A callable without the `tools` keyword cannot take
tools (`supports_tools` is false; given them, it is a `ConfigError`).
An exception it raises becomes a `WorkerError` of kind `other`; a `WorkerError` it raises keeps
its kind (so a test environment can inject an outage or a rejected key). So does anything else
it returns (None, a number, a list): a tool's broken result is the tool's failure, recorded
on the step, never text made up from it.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
import time
from collections.abc import Callable, Sequence
from typing import Any

from podium.config import ModelSpec
from podium.errors import ConfigError, WorkerError
from podium.llm.base import ChatResponse, Message, NoGrammar, Sampling
from podium.llm.tools import Tool, ToolCall, ToolChoice, refuse_tools, tools_kw


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


def _takes_tools(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature
        return False
    return any(p.name == "tools" or p.kind is p.VAR_KEYWORD for p in params)


def _dict_reply(out: dict[str, Any], worker: str, model: str, latency: float) -> ChatResponse:
    """The reply of a function's dict (text and tool calls; see the module)."""
    if "content" not in out and "tool_calls" not in out:
        raise WorkerError(worker, "other", "the function returned a dict with neither content "
                          "nor tool_calls, not a reply")
    try:
        calls = tuple(call if isinstance(call, ToolCall) else ToolCall.from_openai(call)
                      for call in out.get("tool_calls") or [])
        text = out.get("content")
        return ChatResponse(text="" if text is None else text, tool_calls=calls,
                            latency_s=latency, model=model,
                            finish_reason="tool_calls" if calls else "stop")
    except (ValueError, TypeError, AttributeError) as exc:  # InvalidReply is a ValueError
        raise WorkerError(worker, "other", f"the function returned a dict that is not a reply "
                          f"(content and tool_calls): {exc}") from None


class FunctionClient(NoGrammar):
    def __init__(self, spec: ModelSpec, fn: Callable[..., Any] | None = None) -> None:
        self.spec = spec
        self.name = spec.name
        self._fn = fn or import_callable(spec.function or "")

    @property
    def supports_tools(self) -> bool:
        return _takes_tools(self._fn)

    async def chat(self, messages: list[Message], *, grammar: str | None = None,
                   sample_id: int | str = 0, sampling: Sampling | None = None,
                   tools: Sequence[Tool] | None = None, tool_choice: ToolChoice | None = None,
                   parallel_tool_calls: bool | None = None) -> ChatResponse:
        """A function is a tool, not a sampler: `sampling` does not apply to it."""
        self.refuse_grammar(grammar)
        given = tools_kw(tools, tool_choice, parallel_tool_calls)
        if given and not self.supports_tools:
            refuse_tools(self.name, self.spec.backend, f"its function {self.spec.function!r} "
                         "takes no `tools` keyword")
        start = time.perf_counter()
        try:
            if inspect.iscoroutinefunction(self._fn) or inspect.iscoroutinefunction(
                type(self._fn).__call__  # an object with `async def __call__`
            ):
                out = await self._fn(messages, **given)
            else:
                out = await asyncio.to_thread(functools.partial(self._fn, messages, **given))
                if inspect.isawaitable(out):  # a sync callable that returned an awaitable
                    out = await out
        except WorkerError:  # the callable says how it failed (a test environment's faults)
            raise
        except Exception as exc:  # a tool's failure is data, recorded on the step
            raise WorkerError(self.name, "other", f"{type(exc).__name__}: {exc}") from None
        latency = time.perf_counter() - start
        if isinstance(out, ChatResponse):
            return out
        if isinstance(out, dict):
            return _dict_reply(out, self.name, self.spec.function or "", latency)
        if not isinstance(out, str):
            raise WorkerError(self.name, "other", f"the function returned "
                              f"{type(out).__name__}, not a string, a dict or a ChatResponse")
        return ChatResponse(text=out, latency_s=latency, model=self.spec.function or "",
                            finish_reason="stop")

    async def aclose(self) -> None:
        return None
