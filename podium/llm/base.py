"""What every model backend speaks: chat messages in, one `ChatResponse` out.

The workflow executor and the Conductor see models only through `ChatClient`; the concrete
backends (OpenAI-compatible HTTP, the embedded llama.cpp model, Python functions) live beside
this module and are built from pool-file entries by `podium.llm.registry`.
"""

from __future__ import annotations

import email.utils
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from podium.errors import ConfigError, WorkerError
from podium.llm.tools import Tool, ToolCall, ToolChoice
from podium.redact import scrub, scrub_all

if TYPE_CHECKING:
    from podium.config import ModelSpec

# One chat message, in OpenAI Chat Completions' shape: {"role": "system" | "user" |
# "assistant", "content": str}; an assistant message may carry "tool_calls" (its content then
# may be None) and a {"role": "tool", "tool_call_id": str, "content": str} message answers
# one of them (see podium.llm.tools).
Message = dict[str, Any]

# How a backend treated a trailing assistant message ("prefill"):
#   continued   the model continued the text (a true prefill)
#   as_message  it was sent as an ordinary assistant message; the model answered in a new turn
#   none        there was no trailing assistant message
PrefillMode = Literal["continued", "as_message", "none"]


MAX_TOKEN_COUNT = 2**53  # no call uses more; past it a count is no longer exact in JSON


class InvalidReply(ValueError):
    """What a backend read breaks `ChatResponse`'s rules: the reply is not one (see
    `checked_reply`)."""


def _check_count(name: str, value: Any, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) \
            or not 0 <= value <= MAX_TOKEN_COUNT:
        raise InvalidReply(f"its {name} is {scrub(repr(value))[:40]}, not a token count (a "
                           "non-negative integer)")


@dataclass(frozen=True)
class ChatResponse:
    """One reply. It is where a backend's bytes become podium's: it holds a reply to its
    rules (`text` a string, token counts non-negative integers, `InvalidReply` otherwise),
    and no string in it, however deep, carries a registered secret on (`podium.redact`)."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int | None = None
    finish_reason: str | None = None
    latency_s: float = 0.0
    model: str = ""
    request_id: str | None = None
    prefill: PrefillMode = "none"
    retries: tuple[dict[str, Any], ...] = ()  # failed attempts before this one (kind, wait_s, ...)
    cache_hit: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    tool_calls: tuple[ToolCall, ...] = ()  # the tools the model called (`text` may be "")

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise InvalidReply(f"its text is {type(self.text).__name__}, not a string")
        calls = tuple(_checked_call(call) for call in self.tool_calls)
        for name in ("prompt_tokens", "completion_tokens", "reasoning_tokens"):
            _check_count(name, getattr(self, name), optional=name == "reasoning_tokens")
        for name in ("model", "finish_reason", "request_id"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise InvalidReply(f"its {name} is {type(value).__name__}, not a string")
        set_field = object.__setattr__
        set_field(self, "text", scrub(self.text))  # a reply never carries a registered key on
        set_field(self, "model", scrub(self.model))
        set_field(self, "tool_calls", tuple(
            replace(c, id=scrub(c.id), name=scrub(c.name), arguments=scrub(c.arguments))
            for c in calls))
        for name in ("finish_reason", "request_id"):
            if getattr(self, name) is not None:
                set_field(self, name, scrub(getattr(self, name)))
        if self.extra:
            set_field(self, "extra", scrub_all(self.extra))
        if self.retries:
            set_field(self, "retries", scrub_all(tuple(self.retries)))

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def _checked_call(call: Any) -> ToolCall:
    if not isinstance(call, ToolCall):
        raise InvalidReply(f"a tool call is {type(call).__name__}, not a ToolCall")
    for name in ("id", "name", "arguments"):
        if not isinstance(getattr(call, name), str):
            raise InvalidReply(f"a tool call's {name} is {type(getattr(call, name)).__name__}, "
                               "not a string")
    return call


def checked_reply(worker: str, vendor: str, **fields: Any) -> ChatResponse:
    """The `ChatResponse` of `fields`, read from `vendor`'s reply; a `WorkerError` of kind
    `server` (the worker's fault, retried) when they break its rules: text that is not a
    string, token counts that are negative, fractional, not finite or not numbers, tool
    calls whose id, name or arguments are not strings."""
    try:
        return ChatResponse(**fields)
    except InvalidReply as exc:
        raise WorkerError(worker, "server", f"{vendor} sent a broken reply: {exc}") from None


@dataclass(frozen=True)
class Sampling:
    """One call's sampling, over its model's own settings: what a request to `podium serve`
    asks of the step that writes the answer (`temperature`, `top_p`, `seed`, `stop`,
    `max_tokens`). None leaves the model's setting; `max_tokens` only lowers the model's
    own limit, and `stop` sequences are added to the model's."""

    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    max_tokens: int | None = None

    def over(self, spec: ModelSpec) -> ModelSpec:
        """`spec` with this sampling applied (the same object when nothing changes)."""
        update: dict[str, Any] = {k: getattr(self, k) for k in ("temperature", "top_p", "seed")
                                  if getattr(self, k) is not None}
        if self.max_tokens is not None:
            update["max_tokens"] = min(self.max_tokens, spec.max_tokens or self.max_tokens)
        if self.stop:
            update["stop"] = [*(spec.stop or []), *(x for x in self.stop
                                                     if x not in (spec.stop or []))]
        return spec.model_copy(update=update) if update else spec


def applied(spec: ModelSpec, sampling: Sampling | None) -> ModelSpec:
    return spec if sampling is None else sampling.over(spec)


TextSink = Callable[[str], None]  # gets a reply's text piece by piece as the model writes it


def stream_kw(client: Any, on_text: TextSink | None) -> dict[str, Any]:
    """`chat`'s keyword for streaming the reply into `on_text`: given only to a client that
    `streams` (a backend that cannot stream, or was written without it, is called as it
    expects; its reply arrives whole)."""
    return {"on_text": on_text} if on_text is not None and getattr(client, "streams",
                                                                   False) else {}


def sampling_kw(sampling: Sampling | None) -> dict[str, Any]:
    """`chat`'s keyword for `sampling`: given only when there is one, so that a ChatClient
    written without it is still called as it expects."""
    return {} if sampling is None else {"sampling": sampling}


@runtime_checkable
class ChatClient(Protocol):
    """One configured model. `name` is what traces and errors call it."""

    name: str

    async def chat(self, messages: list[Message], *, grammar: str | None = None,
                   sample_id: int | str = 0, sampling: Sampling | None = None,
                   tools: Sequence[Tool] | None = None, tool_choice: ToolChoice | None = None,
                   parallel_tool_calls: bool | None = None) -> ChatResponse:
        """Generate one reply. `grammar` is a GBNF grammar the reply must follow; backends
        that cannot constrain decoding raise `ConfigError` when one is given. `sample_id`
        tells repeated samples of the same request apart (the response cache keys on it);
        the executor passes "<sample>:<step>" so that identical steps of one workflow (k
        samples of one worker) stay distinct. `sampling` overrides the model's own sampling
        settings for this call (the executor passes it only when there is one, so a client
        written before it still works without it).

        A client whose `streams` attribute is true also takes `on_text`, a `TextSink` it
        calls with each piece of the reply's text as the model writes it (the returned
        response still holds the whole text); the executor passes it only to such clients,
        for the step whose reply is the answer.

        `tools` are the functions the model may call, `tool_choice` whether and which it
        must call, `parallel_tool_calls` whether it may make several calls at once; each is
        passed only when set (`podium.llm.tools.tools_kw`), and only to a client whose
        `supports_tools` is true: a backend that cannot take tools raises `ConfigError` when
        given them. The calls come back on the reply's `tool_calls`."""
        ...

    @property
    def supports_grammar(self) -> bool: ...

    @property
    def supports_tools(self) -> bool: ...


class ClientWrapper:
    """Base of the layers stacked on a backend (cache, reliability): delegates the name,
    grammar and tool support, streaming and closing to the wrapped client."""

    def __init__(self, inner: ChatClient) -> None:
        self.inner = inner
        self.name = inner.name

    @property
    def supports_grammar(self) -> bool:
        return self.inner.supports_grammar

    @property
    def supports_tools(self) -> bool:
        return bool(getattr(self.inner, "supports_tools", False))

    @property
    def streams(self) -> bool:
        return getattr(self.inner, "streams", False)

    async def aclose(self) -> None:
        close = getattr(self.inner, "aclose", None)
        if close is not None:
            await close()

    async def load(self) -> None:
        await load_client(self.inner)


async def load_client(client: object) -> None:
    """Do now what a client's first call would do first (the embedded model loads its GGUF):
    a server does it before it takes requests. A client with nothing to load has no `load`."""
    load = getattr(client, "load", None)
    if load is not None:
        await load()


class NoGrammar:
    """Base of the backends that cannot constrain decoding (the native vendor APIs, Python
    functions): `supports_grammar` is False, and `refuse_grammar` raises the error that says
    what to do instead when a grammar is asked for anyway."""

    spec: ModelSpec
    name: str

    @property
    def supports_grammar(self) -> bool:
        return False

    def refuse_grammar(self, grammar: str | None) -> None:
        if grammar is not None:
            raise ConfigError(
                f"Model {self.name!r} (backend {self.spec.backend!r}) cannot take a grammar. "
                "Set constrained = false for the Conductor, or use an OpenAI-compatible server "
                "with grammar_style."
            )


def split_system(messages: list[Message]) -> tuple[str, list[Message]]:
    """The system messages joined (blank line between) and the other messages, in order."""
    system = "\n\n".join(m.get("content", "") for m in messages if m.get("role") == "system")
    return system, [m for m in messages if m.get("role") != "system"]


def split_prefill(messages: list[Message]) -> tuple[list[Message], str | None]:
    """Separate a trailing assistant message (the prefill) from the rest (one with tool
    calls is no prefill)."""
    if messages and messages[-1].get("role") == "assistant" \
            and not messages[-1].get("tool_calls"):
        return messages[:-1], messages[-1].get("content") or ""
    return messages, None


def retry_after(headers: Any) -> float | None:
    """Seconds a response's `retry-after-ms` or `retry-after` header (seconds or an HTTP date)
    asks to wait; None when there is no usable header."""
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) / scale
        except (TypeError, ValueError):
            if name == "retry-after-ms":
                continue
            try:
                when = email.utils.parsedate_to_datetime(str(value))
            except (TypeError, ValueError, IndexError):
                continue
            if when.tzinfo is None:
                when = when.replace(tzinfo=UTC)
            seconds = (when - datetime.now(UTC)).total_seconds()
        if math.isfinite(seconds):
            return max(seconds, 0.0)
    return None
