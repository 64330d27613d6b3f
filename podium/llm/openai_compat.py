"""Any OpenAI-compatible chat endpoint: OpenAI, vLLM, SGLang, llama.cpp, Ollama, OpenRouter.

Providers are data: a pool entry gives the base URL, model name, the environment variable that
holds the key, and sampling settings. The key is sent only to that entry's base URL and never
appears in an error message. Provider exceptions become `WorkerError` in `worker_error` (the
message is written by `podium.llm.errors`), with the HTTP status and the server's Retry-After
when there are any. The SDK's own retries are off: `podium.llm.reliable.ReliableClient`
retries, and records every attempt. Under the SDK, calls go through its aiohttp transport
(`http_client = "aiohttp"`, the default) or its own httpx client (`"httpx"`): the same
requests, the transport's errors mapped to the same SDK exceptions.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx2
import openai

from podium.config import ModelSpec
from podium.errors import ConfigError, WorkerError
from podium.llm.base import ChatResponse, Message, PrefillMode, retry_after
from podium.llm.chat_template import load_chat_template
from podium.llm.errors import provider_error, sdk_error_kind


def _error_kind(exc: Exception) -> str:
    return sdk_error_kind(openai, exc, lambda text: "context" in text and "length" in text)


def worker_error(spec: ModelSpec, exc: Exception, secret: str | None) -> WorkerError:
    """Convert a provider exception (`podium.llm.errors` writes the message, key scrubbed)."""
    status = getattr(exc, "status_code", None)
    response = getattr(exc, "response", None)
    raw = None
    if isinstance(exc, openai.APIConnectionError):  # the SDK's text is only "Connection error."
        root = exc  # or "Request timed out." (the aiohttp transport's refused connections too):
        while root.__cause__ is not None:  # what the HTTP stack said is under it
            root = root.__cause__
        if root is not exc:
            raw = f"{exc} ({type(root).__name__}: {root})"
    return provider_error(spec.name, _error_kind(exc), exc, vendor="the endpoint",
                          url=spec.base_url, secret=secret, raw=raw,
                          status=status if isinstance(status, int) else None,
                          retry_after=retry_after(getattr(response, "headers", None)),
                          timeout_s=spec.timeout_s)


def _http_client(spec: ModelSpec) -> Any:
    """The HTTP client under the SDK (`http_client` in the pool): the SDK's aiohttp transport,
    or None for the SDK's own httpx client. With the aiohttp transport a call costs about a
    quarter less CPU (benchmarks/README.md), which is what bounds a busy `podium serve`."""
    if spec.http_client == "httpx":
        return None
    try:
        return openai.DefaultAioHttpClient()
    except (AttributeError, RuntimeError):  # an openai without the extra, or without aiohttp
        raise ConfigError(
            f"Model {spec.name!r} uses the aiohttp HTTP client, which needs the openai SDK's "
            "aiohttp extra: pip install 'openai[aiohttp]>=3.57'. Or set http_client = "
            "\"httpx\" for it in the pool file.") from None


def _fields(value: Any) -> dict[str, Any]:
    """A JSON object of the reply, or {} where the endpoint left it out (or sent null)."""
    return value if isinstance(value, dict) else {}


def _first_choice(worker: str, data: Any, path: str) -> dict[str, Any]:
    """The reply's first choice; a WorkerError (retried: asking again may work) when the
    reply is not a completion or has no choices."""
    if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
        raise WorkerError(worker, "server", f"the endpoint's reply to {path} is not a "
                          f"completion (got {type(data).__name__}: {str(data)[:80]!r}); check "
                          "base_url")
    if not data["choices"]:
        raise WorkerError(worker, "empty", "the endpoint returned no choices")
    choice = data["choices"][0]
    if not isinstance(choice, dict):
        raise WorkerError(worker, "server", f"the endpoint's reply to {path} is not a "
                          f"completion (its first choice is {str(choice)[:80]!r})")
    return choice


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
            http_client=_http_client(spec),
        )

    @property
    def supports_grammar(self) -> bool:
        return self.spec.grammar_style is not None

    def _request(self, messages: list[Message], grammar: str | None) -> dict[str, Any]:
        """The request body. Provider quirks come from the pool entry's profile settings:
        `max_tokens_param` (max_completion_tokens for OpenAI reasoning models),
        `reasoning_effort`, `thinking` (Qwen3-style chat_template_kwargs.enable_thinking) and,
        when the last message is an assistant prefill, `prefill`: `continue` adds vLLM's
        continue_final_message/add_generation_prompt fields, `completions` makes it a
        `/v1/completions` body whose `prompt` is the rendered chat template plus the prefill."""
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
        prefilled = bool(messages) and messages[-1]["role"] == "assistant"
        if prefilled and s.prefill == "continue":
            extra["continue_final_message"] = True
            extra["add_generation_prompt"] = False
        elif prefilled and s.prefill == "completions":
            # rendered here: the chat template's variables are not request fields
            template = load_chat_template(s.chat_template or "")
            kwargs = extra.pop("chat_template_kwargs", None) or {}
            del body["messages"]
            body["prompt"] = template.render(messages, **kwargs)
            if template.eos_token:
                body["stop"] = [*(s.stop or []), template.eos_token]
        return {**body, **extra}  # the wire body: extra fields sit beside the standard ones

    def _prefill_mode(self, messages: list[Message]) -> PrefillMode:
        if not messages or messages[-1]["role"] != "assistant":
            return "none"
        if self.spec.prefill != "message" or self.spec.extra_body.get("continue_final_message"):
            return "continued"
        return "as_message"

    async def chat(self, messages: list[Message], *, grammar: str | None = None,
                   sample_id: int | str = 0) -> ChatResponse:
        body = self._request(messages, grammar)
        # a `prompt` body is a prefill to continue on /completions (`prefill = "completions"`)
        path = "/completions" if "prompt" in body else "/chat/completions"
        start = time.perf_counter()
        try:
            # the body is already in wire form: post it as is, skipping the SDK's per-call
            # parameter conversion; the reply comes back as the HTTP response (its body read,
            # an error status already raised as the SDK's exception) and is read here as plain
            # JSON, skipping the SDK's response models
            resp = await self._client.post(path, body=body, cast_to=httpx2.Response)
        except openai.OpenAIError as exc:
            raise worker_error(self.spec, exc, self._key) from None
        try:
            data = resp.json()  # whatever the content-type says, as the SDK reads it
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            kind = resp.headers.get("content-type", "")
            if "json" not in kind:  # a web page, say: base_url names something else
                raise WorkerError(self.name, "server", f"the endpoint's reply to {path} is "
                                  f"not JSON (content-type {kind or 'none'!r}); check "
                                  "base_url") from None
            raise worker_error(self.spec, exc, self._key) from None  # cut off: ask again
        latency = time.perf_counter() - start
        choice = _first_choice(self.name, data, path)
        usage = _fields(data.get("usage"))
        details = _fields(usage.get("completion_tokens_details"))
        text = choice.get("text") if "prompt" in body else _fields(choice.get("message")).get(
            "content")
        return ChatResponse(
            text=text or "",
            prompt_tokens=usage.get("prompt_tokens") or 0,
            completion_tokens=usage.get("completion_tokens") or 0,
            reasoning_tokens=details.get("reasoning_tokens"),
            finish_reason=choice.get("finish_reason"),
            latency_s=latency,
            model=data.get("model") or self.spec.model,
            request_id=resp.headers.get("x-request-id") or data.get("id"),
            prefill=self._prefill_mode(messages),
        )

    async def aclose(self) -> None:
        await self._client.close()
