"""Any OpenAI-compatible chat endpoint: OpenAI, vLLM, SGLang, llama.cpp, Ollama, OpenRouter.

Providers are data: a pool entry gives the base URL, model name, the environment variable that
holds the key, and sampling settings. The key is sent only to that entry's base URL and never
appears in an error message. Provider exceptions become `WorkerError` here and nowhere else,
with the HTTP status and the server's Retry-After when there are any. The SDK's own retries
are off: `podium.llm.reliable.ReliableClient` retries, and records every attempt.
"""

from __future__ import annotations

import json
import time
from typing import Any

import openai
from openai.types.chat import ChatCompletion

from podium.config import ModelSpec
from podium.errors import ConfigError, WorkerError
from podium.llm.base import ChatResponse, Message, PrefillMode, retry_after


def _error_kind(exc: Exception) -> str:
    # A reply that is not valid JSON (e.g. cut off): the SDK raises json.JSONDecodeError itself,
    # or APIResponseValidationError with strict validation. Asking again may well work.
    if isinstance(exc, json.JSONDecodeError | openai.APIResponseValidationError):
        return "server"
    if isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
        return "auth"
    if isinstance(exc, openai.RateLimitError):
        return "rate_limit"
    if isinstance(exc, openai.APITimeoutError | openai.APIConnectionError):
        return "transport"
    if isinstance(exc, openai.BadRequestError):
        text = str(exc).lower()
        return "context_length" if "context" in text and "length" in text else "bad_request"
    if isinstance(exc, openai.InternalServerError):
        return "server"
    if isinstance(exc, openai.APIStatusError):
        return "server" if exc.status_code >= 500 else "bad_request"
    return "other"


_HINTS = {
    "auth": "the endpoint rejected the API key; check the variable named by api_key_env",
    "rate_limit": "the endpoint is rate-limiting; lower max_concurrency or retry later",
    "transport": "could not reach {url}; check base_url and that the server is running",
    "context_length": "the prompt is longer than the model's context; lower max_tokens or "
    "use a model with a longer context",
    "server": "the endpoint returned a server error; retry later",
    "bad_request": "the endpoint rejected the request; check model and sampling settings",
    "other": "unexpected error",
}


def worker_error(spec: ModelSpec, exc: Exception, secret: str | None) -> WorkerError:
    """Convert a provider exception. The key (if any) is scrubbed from the message."""
    kind = _error_kind(exc)
    status = getattr(exc, "status_code", None)
    response = getattr(exc, "response", None)
    wait = retry_after(getattr(response, "headers", None))
    detail = _HINTS[kind].format(url=spec.base_url)
    if kind not in ("auth",):  # auth messages may echo part of the key: never include them
        raw = str(exc)
        if secret:
            raw = raw.replace(secret, "***")
        detail = f"{detail} ({type(exc).__name__}{f' {status}' if status else ''}: {raw[:300]})"
    elif status:
        detail = f"{detail} (HTTP {status})"
    return WorkerError(spec.name, kind, detail,  # type: ignore[arg-type]
                       status=status if isinstance(status, int) else None, retry_after=wait)


class OpenAICompatClient:
    """A worker or Conductor behind an OpenAI-compatible `/chat/completions` endpoint."""

    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec
        self.name = spec.name
        self._key = spec.api_key()  # ConfigError now if the variable is unset
        self._client = openai.AsyncOpenAI(
            base_url=spec.base_url,
            api_key=self._key or "not-needed",
            timeout=openai.Timeout(spec.timeout_s, connect=spec.connect_timeout_s),
            max_retries=0,  # ReliableClient retries (and records each attempt)
        )

    @property
    def supports_grammar(self) -> bool:
        return self.spec.grammar_style is not None

    def _request(self, messages: list[Message], grammar: str | None) -> dict[str, Any]:
        """The request body. Provider quirks come from the pool entry's profile settings:
        `max_tokens_param` (max_completion_tokens for OpenAI reasoning models),
        `reasoning_effort`, and `thinking` (Qwen3-style chat_template_kwargs.enable_thinking)."""
        s = self.spec
        body: dict[str, Any] = {"model": s.model, "messages": messages}
        for key in ("temperature", "top_p", "stop", "seed", "reasoning_effort"):
            value = getattr(s, key)
            if value is not None:
                body[key] = value
        if s.max_tokens is not None:
            body[s.max_tokens_param] = s.max_tokens
        extra = dict(s.extra_body)
        if s.thinking is not None:
            kwargs = dict(extra.get("chat_template_kwargs") or {})
            kwargs["enable_thinking"] = s.thinking
            extra["chat_template_kwargs"] = kwargs
        if grammar is not None:
            if s.grammar_style == "llama_cpp":
                extra["grammar"] = grammar
            elif s.grammar_style == "vllm":
                extra["structured_outputs"] = {"grammar": grammar}
            else:
                raise ConfigError(
                    f"Model {s.name!r} cannot take a grammar: set grammar_style = \"llama_cpp\" "
                    "or \"vllm\" for it in the pool file, or set constrained = false."
                )
        return {**body, **extra}  # the wire body: extra fields sit beside the standard ones

    def _prefill_mode(self, messages: list[Message]) -> PrefillMode:
        if not messages or messages[-1]["role"] != "assistant":
            return "none"
        return "continued" if self.spec.extra_body.get("continue_final_message") else "as_message"

    async def chat(self, messages: list[Message], *, grammar: str | None = None,
                   sample_id: int | str = 0) -> ChatResponse:
        body = self._request(messages, grammar)
        start = time.perf_counter()
        try:
            # the body is already in wire form: post it as is, skipping the SDK's per-call
            # parameter conversion (a quarter of the client's CPU per call under load)
            resp = await self._client.post("/chat/completions", body=body,
                                           cast_to=ChatCompletion)
        except (openai.OpenAIError, json.JSONDecodeError) as exc:
            raise worker_error(self.spec, exc, self._key) from None
        latency = time.perf_counter() - start
        if not hasattr(resp, "choices"):  # a non-JSON content type comes back as text
            raise WorkerError(self.name, "server", "the endpoint's reply is not a chat "
                              f"completion (got {type(resp).__name__}); check base_url")
        if not resp.choices:
            raise WorkerError(self.name, "empty", "the endpoint returned no choices")
        choice = resp.choices[0]
        usage = resp.usage
        details = getattr(usage, "completion_tokens_details", None) if usage else None
        return ChatResponse(
            text=choice.message.content or "",
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
            reasoning_tokens=getattr(details, "reasoning_tokens", None) if details else None,
            finish_reason=choice.finish_reason,
            latency_s=latency,
            model=resp.model or self.spec.model,
            request_id=getattr(resp, "_request_id", None) or resp.id,
            prefill=self._prefill_mode(messages),
        )

    async def aclose(self) -> None:
        await self._client.close()
