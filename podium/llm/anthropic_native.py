"""Claude through Anthropic's own Messages API (`POST {base_url}/v1/messages`).

Install with `pip install 'podium[anthropic]'`. A pool entry:

    [[workers]]
    name = "claude"
    backend = "anthropic"
    model = "claude-sonnet-4-5"
    api_key_env = "ANTHROPIC_API_KEY"   # required: the key is read from this variable
    max_tokens = 4096                    # required by the API; 4096 when unset

How podium's messages and settings map onto the API:

- System messages are joined (blank line between) into the top-level `system` string; the
  other messages go, in order, as `messages`.
- A trailing assistant message is a true prefill: Claude continues it, and the returned text is
  the continuation only (`prefill="continued"`). Trailing whitespace is stripped from it, since
  the API rejects a final assistant turn that ends with whitespace. With extended thinking on,
  the API rejects a prefill, so the message is dropped (`prefill="none"`,
  `extra={"prefill_dropped": True}`).
- `thinking = true` (or a `thinking_budget` with `thinking` unset) sends
  `thinking = {type: "enabled", budget_tokens: thinking_budget or 1024}`; the budget must be
  below `max_tokens`. Thinking blocks are left out of the text; the thinking-token count, when
  the API reports it (`usage.output_tokens_details.thinking_tokens`), becomes
  `reasoning_tokens`.
- Tools: each `Tool` becomes a `tools` entry (`name`, `description`, `input_schema`, and
  `strict` when set); `tool_choice` auto, none, required and a named tool become `{type:
  auto}`, `{type: none}`, `{type: any}` and `{type: tool, name}`, and `parallel_tool_calls =
  false` adds `disable_parallel_tool_use`. An assistant message's `tool_calls` become
  `tool_use` blocks after its text (arguments parsed: the API takes an object), and each run
  of `tool` messages one user turn of `tool_result` blocks. The reply's `tool_use` blocks come
  back as `ToolCall`s (their `input` written as JSON text); its `stop_reason` (`tool_use`) is
  the finish reason.
- `stop` becomes `stop_sequences`; `extra_body` is merged into the request body verbatim.
- `temperature` and `top_p` are NOT sent. The installed SDK (2.x) pins API version
  2026-10-21, which answers 400 to `temperature`, `top_p` or `top_k` at any value (the SDK no
  longer has those parameters); extended thinking also required temperature 1 under the older
  version. A warning is logged when a pool entry sets them. A gateway that still takes them
  can be given them through `extra_body`. `seed`, `grammar_style` and `reasoning_effort` have
  no Anthropic counterpart and are ignored.
- `base_url` unset means the SDK's default, https://api.anthropic.com, or ANTHROPIC_BASE_URL
  when that is set. The key goes in an `Authorization: Bearer` header (SDK 2.x; older SDKs
  used `x-api-key`), with `anthropic-version` set by the SDK.
- The SDK's own retries are off (`max_retries=0`): podium retries. Provider exceptions become
  `WorkerError` in `worker_error` below; `podium.llm.errors` writes the message (an
  authentication error's text is never included, the key is scrubbed from every other one).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Sequence
from typing import Any

from podium.config import ModelSpec
from podium.errors import ConfigError, WorkerError
from podium.llm.base import (
    ChatResponse,
    Message,
    NoGrammar,
    PrefillMode,
    Sampling,
    applied,
    checked_reply,
    retry_after,
    split_prefill,
    split_system,
)
from podium.llm.errors import deadline_error, provider_error, sdk_error_kind
from podium.llm.tools import Named, Tool, ToolCall, ToolChoice, arguments_object

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.anthropic.com"
DEFAULT_MAX_TOKENS = 4096
DEFAULT_THINKING_BUDGET = 1024


def _import_sdk() -> Any:
    try:
        import anthropic
    except ImportError:
        raise ConfigError(
            "backend 'anthropic' needs the Anthropic SDK: pip install 'podium[anthropic]'"
        ) from None
    return anthropic


def _too_long(text: str) -> bool:
    return "prompt is too long" in text or "context" in text


def worker_error(spec: ModelSpec, exc: Exception, secret: str | None) -> WorkerError:
    """Convert an Anthropic SDK exception (`podium.llm.errors` writes the message)."""
    anthropic = _import_sdk()
    kind = sdk_error_kind(anthropic, exc, _too_long)
    status = getattr(exc, "status_code", None)
    response = getattr(exc, "response", None)
    wait = None
    if response is not None and kind in ("rate_limit", "server"):
        wait = retry_after(response.headers)
    return provider_error(spec.name, kind, exc, vendor="Anthropic",
                          url=spec.base_url or DEFAULT_BASE_URL, secret=secret,
                          status=status if isinstance(status, int) and status >= 400 else None,
                          retry_after=wait, timeout_s=spec.timeout_s)


def _tokens(usage: Any) -> dict[str, Any]:
    """The token counts of a reply's `usage` (none when it has none); thinking tokens only
    when the API reports them (`usage.output_tokens_details.thinking_tokens`)."""
    if usage is None:
        return {}
    details = getattr(usage, "output_tokens_details", None)
    return {"prompt_tokens": usage.input_tokens, "completion_tokens": usage.output_tokens,
            "reasoning_tokens": getattr(details, "thinking_tokens", None)}


def _label(value: Any) -> str | None:
    """A reply's label (its id, model, stop reason) when it is a string; else none (the SDK
    does not check what the API sent)."""
    return value if isinstance(value, str) else None


def _turns(messages: list[Message]) -> list[dict[str, Any]]:
    """The Messages API turns of podium's (system messages already taken out)."""
    turns: list[dict[str, Any]] = []
    for m in messages:
        if m.get("role") == "tool":
            block = {"type": "tool_result", "tool_use_id": m.get("tool_call_id") or "",
                     "content": m.get("content") or ""}
            last = turns[-1] if turns else None
            if last is not None and last["role"] == "user" and isinstance(
                    last["content"], list) and last["content"][-1]["type"] == "tool_result":
                last["content"].append(block)  # one user turn answers all of a turn's calls
            else:
                turns.append({"role": "user", "content": [block]})
        elif m.get("role") == "assistant" and m.get("tool_calls"):
            blocks: list[dict[str, Any]] = [{"type": "text", "text": m["content"]}] \
                if m.get("content") else []
            blocks += [{"type": "tool_use", "id": call["id"], "name": call["function"]["name"],
                        "input": arguments_object(call)} for call in m["tool_calls"]]
            turns.append({"role": "assistant", "content": blocks})
        else:
            turns.append({"role": m["role"], "content": m.get("content") or ""})
    return turns


def tool_fields(tools: Sequence[Tool] | None, choice: ToolChoice | None,
                parallel: bool | None) -> dict[str, Any]:
    """The request's `tools` and `tool_choice` (see the module's mapping)."""
    fields: dict[str, Any] = {}
    if tools is not None:
        fields["tools"] = [{"name": t.name, "input_schema": t.parameters,
                            **({"description": t.description} if t.description else {}),
                            **({"strict": t.strict} if t.strict is not None else {})}
                           for t in tools]
    picked: dict[str, Any] | None = None
    if isinstance(choice, Named):
        picked = {"type": "tool", "name": choice.name}
    elif choice is not None:
        picked = {"type": {"required": "any"}.get(choice, choice)}
    if parallel is False and (picked or {}).get("type") != "none":
        picked = {**(picked or {"type": "auto"}), "disable_parallel_tool_use": True}
    if picked is not None:
        fields["tool_choice"] = picked
    return fields


def _tool_call(block: Any) -> ToolCall:
    """A `tool_use` block as a call (a WorkerError, through `checked_reply`, when broken)."""
    arguments = getattr(block, "input", None)
    fields: dict[str, Any] = {"id": getattr(block, "id", None),
                              "name": getattr(block, "name", None),
                              "arguments": json.dumps(arguments, ensure_ascii=False)
                              if isinstance(arguments, dict) else arguments}
    return ToolCall(**fields)


class AnthropicClient(NoGrammar):
    """A worker or Conductor served by Anthropic's Messages API."""

    def __init__(self, spec: ModelSpec) -> None:
        anthropic = _import_sdk()
        self.spec = spec
        self.name = spec.name
        self._key = spec.required_api_key("ANTHROPIC_API_KEY")
        self._max_tokens = spec.max_tokens or DEFAULT_MAX_TOKENS
        self._thinking = bool(spec.thinking) or (
            spec.thinking is None and spec.thinking_budget is not None
        )
        self._budget = spec.thinking_budget or DEFAULT_THINKING_BUDGET
        if self._thinking and self._budget >= self._max_tokens:
            raise ConfigError(
                f"Model {spec.name!r}: thinking_budget ({self._budget}) must be below max_tokens "
                f"({self._max_tokens}) for Anthropic extended thinking. Raise max_tokens or lower "
                "thinking_budget in the pool file."
            )
        ignored = [k for k in ("temperature", "top_p") if getattr(spec, k) is not None]
        if ignored:
            log.warning(
                "Model %r (backend 'anthropic'): %s not sent; the API version the Anthropic SDK "
                "uses rejects sampling parameters (extra_body can carry them to a gateway that "
                "takes them).", spec.name, " and ".join(ignored))
        self._timeout = anthropic.Timeout(spec.timeout_s, connect=spec.connect_timeout_s)
        self._client = anthropic.AsyncAnthropic(
            api_key=self._key,
            base_url=spec.base_url or None,
            timeout=self._timeout,
            max_retries=0,  # podium retries (see podium.config.ModelSpec.retries)
        )
        self._sdk = anthropic

    def _request(self, messages: list[Message], sampling: Sampling | None = None
                 ) -> tuple[dict[str, Any], PrefillMode, bool]:
        """The keyword arguments for `messages.create`, the prefill mode, and whether a prefill
        was dropped. Of `sampling`, `stop` and `max_tokens` are sent (see above)."""
        s = applied(self.spec, sampling)
        system, others = split_system(messages)
        history, prefill = split_prefill(others)
        rest = _turns(history)
        mode: PrefillMode = "none"
        dropped = False
        prefill = (prefill or "").rstrip()  # an empty prefill is no prefill
        if prefill:
            if self._thinking:  # the API rejects a prefill with extended thinking
                dropped = True
            else:
                rest = [*rest, {"role": "assistant", "content": prefill}]
                mode = "continued"
        max_tokens = min(self._max_tokens, s.max_tokens or self._max_tokens)
        body: dict[str, Any] = {"model": s.model, "max_tokens": max_tokens,
                                "messages": rest, "timeout": self._timeout}
        if system:
            body["system"] = system
        if s.stop:
            body["stop_sequences"] = list(s.stop)
        if self._thinking:
            body["thinking"] = {"type": "enabled", "budget_tokens": self._budget}
        if s.extra_body:
            body["extra_body"] = dict(s.extra_body)
        return body, mode, dropped

    @property
    def supports_tools(self) -> bool:
        return True

    async def chat(self, messages: list[Message], *, grammar: str | None = None,
                   sample_id: int | str = 0, sampling: Sampling | None = None,
                   tools: Sequence[Tool] | None = None, tool_choice: ToolChoice | None = None,
                   parallel_tool_calls: bool | None = None) -> ChatResponse:
        self.refuse_grammar(grammar)
        body, mode, dropped = self._request(messages, sampling)
        body.update(tool_fields(tools, tool_choice, parallel_tool_calls))
        start = time.perf_counter()
        try:
            async with asyncio.timeout(self.spec.timeout_s):  # the whole call (see timeout_s)
                resp = await self._client.messages.create(**body)
        except TimeoutError:
            raise deadline_error(self.name, "Anthropic", self.spec.base_url or DEFAULT_BASE_URL,
                                 self.spec.timeout_s) from None
        except (self._sdk.AnthropicError, ValueError, RecursionError) as exc:
            raise worker_error(self.spec, exc, self._key) from None  # ValueError: bad JSON
        latency = time.perf_counter() - start
        texts = [getattr(block, "text", "") for block in resp.content or []
                 if getattr(block, "type", None) == "text"]
        calls = tuple(_tool_call(block) for block in resp.content or []
                      if getattr(block, "type", None) == "tool_use")
        extra: dict[str, Any] = {"message_id": _label(resp.id)}
        if dropped:
            extra["prefill_dropped"] = True
        return checked_reply(
            self.name, "Anthropic",
            text="".join(texts) if all(isinstance(t, str) for t in texts) else texts,
            tool_calls=calls,
            **_tokens(resp.usage),
            finish_reason=_label(resp.stop_reason),
            latency_s=latency,
            model=_label(resp.model) or self.spec.model,
            request_id=_label(getattr(resp, "_request_id", None)) or _label(resp.id),
            prefill=mode,
            extra=extra,
        )

    async def aclose(self) -> None:
        await self._client.close()
