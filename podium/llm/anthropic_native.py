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
  `WorkerError` in `worker_error` below and nowhere else; an authentication error's text is
  never included (it may echo the key) and the key is scrubbed from every other message.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from podium.config import ModelSpec
from podium.errors import ConfigError, WorkerError
from podium.llm.base import ChatResponse, Message, PrefillMode, retry_after, split_prefill

log = logging.getLogger(__name__)

DEFAULT_MAX_TOKENS = 4096
DEFAULT_THINKING_BUDGET = 1024

_HINTS = {
    "auth": "Anthropic rejected the API key; check the variable named by api_key_env",
    "rate_limit": "Anthropic is rate-limiting; lower max_concurrency or rpm, or retry later",
    "transport": "could not reach {url}; check base_url and the network",
    "context_length": "the prompt is longer than the model's context; shorten it or lower "
    "max_tokens",
    "server": "Anthropic returned a server error or is overloaded; retry later",
    "bad_request": "Anthropic rejected the request; check model, max_tokens, thinking and "
    "extra_body",
    "other": "unexpected error from the Anthropic SDK",
}


def _import_sdk() -> Any:
    try:
        import anthropic
    except ImportError:
        raise ConfigError(
            "backend 'anthropic' needs the Anthropic SDK: pip install 'podium[anthropic]'"
        ) from None
    return anthropic


def _error_kind(anthropic: Any, exc: Exception) -> str:
    # A reply that is not valid JSON (e.g. cut off) or not a Message: asking again may work.
    if isinstance(exc, json.JSONDecodeError | anthropic.APIResponseValidationError):
        return "server"
    if isinstance(exc, anthropic.AuthenticationError | anthropic.PermissionDeniedError):
        return "auth"
    if isinstance(exc, anthropic.RateLimitError):
        return "rate_limit"
    if isinstance(exc, anthropic.APIConnectionError):  # APITimeoutError included
        return "transport"
    if isinstance(exc, anthropic.BadRequestError):
        text = str(exc).lower()
        too_long = "prompt is too long" in text or "context" in text
        return "context_length" if too_long else "bad_request"
    if isinstance(exc, anthropic.InternalServerError):  # 5xx, OverloadedError (529) included
        return "server"
    if isinstance(exc, anthropic.APIStatusError):
        return "server" if exc.status_code >= 500 or exc.status_code == 408 else "bad_request"
    return "other"


def worker_error(spec: ModelSpec, exc: Exception, secret: str | None) -> WorkerError:
    """Convert an Anthropic SDK exception. The key (if any) is scrubbed from the message."""
    anthropic = _import_sdk()
    kind = _error_kind(anthropic, exc)
    status = getattr(exc, "status_code", None)
    status = status if isinstance(status, int) and status >= 400 else None
    response = getattr(exc, "response", None)
    wait = None
    if response is not None and kind in ("rate_limit", "server"):
        wait = retry_after(response.headers)
    detail = _HINTS[kind].format(url=spec.base_url or "https://api.anthropic.com")
    if kind != "auth":  # auth messages may echo part of the key: never include them
        raw = str(exc)
        if secret:
            raw = raw.replace(secret, "***")
        detail = f"{detail} ({type(exc).__name__}{f' {status}' if status else ''}: {raw[:300]})"
    elif status:
        detail = f"{detail} (HTTP {status})"
    return WorkerError(spec.name, kind, detail, status=status,  # type: ignore[arg-type]
                       retry_after=wait)


class AnthropicClient:
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

    @property
    def supports_grammar(self) -> bool:
        return False

    def _request(self, messages: list[Message]) -> tuple[dict[str, Any], PrefillMode, bool]:
        """The keyword arguments for `messages.create`, the prefill mode, and whether a prefill
        was dropped."""
        s = self.spec
        system = "\n\n".join(m.get("content", "") for m in messages if m.get("role") == "system")
        turns = [{"role": m["role"], "content": m.get("content", "")}
                 for m in messages if m.get("role") != "system"]
        rest, prefill = split_prefill(turns)
        mode: PrefillMode = "none"
        dropped = False
        prefill = (prefill or "").rstrip()  # an empty prefill is no prefill
        if prefill:
            if self._thinking:  # the API rejects a prefill with extended thinking
                dropped = True
            else:
                rest = [*rest, {"role": "assistant", "content": prefill}]
                mode = "continued"
        body: dict[str, Any] = {"model": s.model, "max_tokens": self._max_tokens,
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

    async def chat(self, messages: list[Message], *, grammar: str | None = None,
                   sample_id: int | str = 0) -> ChatResponse:
        if grammar is not None:
            raise ConfigError(
                f"Model {self.name!r} (backend 'anthropic') cannot take a grammar. Set "
                "constrained = false for the Conductor, or use an OpenAI-compatible server "
                "with grammar_style."
            )
        body, mode, dropped = self._request(messages)
        start = time.perf_counter()
        try:
            resp = await self._client.messages.create(**body)
        except (self._sdk.AnthropicError, json.JSONDecodeError) as exc:
            raise worker_error(self.spec, exc, self._key) from None
        latency = time.perf_counter() - start
        text = "".join(getattr(block, "text", "") for block in resp.content
                       if getattr(block, "type", None) == "text")
        usage = resp.usage
        details = getattr(usage, "output_tokens_details", None)
        extra: dict[str, Any] = {"message_id": resp.id}
        if dropped:
            extra["prefill_dropped"] = True
        return ChatResponse(
            text=text,
            prompt_tokens=usage.input_tokens if usage else 0,
            completion_tokens=usage.output_tokens if usage else 0,
            reasoning_tokens=getattr(details, "thinking_tokens", None) if details else None,
            finish_reason=resp.stop_reason,
            latency_s=latency,
            model=resp.model or self.spec.model,
            request_id=getattr(resp, "_request_id", None) or resp.id,
            prefill=mode,
            extra=extra,
        )

    async def aclose(self) -> None:
        await self._client.close()
