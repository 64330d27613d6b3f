"""Gemini through Google's own API (google-genai SDK, `generateContent`).

Install with `pip install 'podium[gemini]'`. A pool entry is written like the one in
`podium.llm.anthropic_native`, with `backend = "gemini"`, a model such as "gemini-2.5-flash",
`api_key_env` (required, e.g. "GEMINI_API_KEY") and optionally `thinking_budget`.

The SDK posts to `{base_url}/{api_version}/models/{model}:generateContent` with the key in the
`x-goog-api-key` header. `base_url` is the host root (unset: GOOGLE_GEMINI_BASE_URL, else
`https://generativelanguage.googleapis.com/`); the API version is the SDK's default (`v1` for
google-genai 3.x) unless GOOGLE_GENAI_API_VERSION says otherwise. The Vertex AI / Enterprise
mode is never used, whatever the environment says.

How podium's messages and settings map onto the API:

- System messages are joined (blank line between) into `system_instruction`; user messages
  become role "user" turns and assistant messages role "model" turns.
- A trailing assistant message (prefill) cannot be continued: some Gemini versions reject a
  conversation that ends on a model turn. As in the reference implementation, its text is
  appended (after a blank line) to the last user turn, and the model answers in a new turn
  (`prefill="as_message"`).
- `temperature`, `top_p`, `max_tokens` (max_output_tokens), `stop` (stop_sequences) and `seed`
  are sent when set. Thinking: `thinking = false` sends `thinking_budget = 0`; a
  `thinking_budget` sends that budget; `thinking = true` without a budget sends -1 (dynamic);
  thoughts are never included in the reply (`include_thoughts = false`). The thought-token
  count is `reasoning_tokens` and is counted in `completion_tokens` too (Google bills it as
  output), so `reasoning_tokens <= completion_tokens` as for the other backends.
- Tools: each `Tool` becomes a function declaration (`parameters_json_schema`; `strict`
  has no Gemini counterpart); `tool_choice` auto, none, required and a named tool become
  `function_calling_config` mode AUTO, NONE, ANY and ANY with that name allowed;
  `parallel_tool_calls` has no Gemini counterpart and is not sent. An assistant message's
  `tool_calls` become `functionCall` parts after its text (arguments parsed: the API takes an
  object), and each run of `tool` messages one user turn of `functionResponse` parts
  (`{"output": content}`, named after the call they answer). The reply's `functionCall` parts
  come back as `ToolCall`s (`args` written as JSON text), with Gemini's call id or, when it
  sends none, a new one; a part's thought signature, which Gemini needs back with the call,
  travels in the id after `~sig~` and is sent back with it.
- `extra_body` is deep-merged into the JSON request body by the SDK
  (`HttpOptions.extra_body`), so its keys use the wire format, e.g.
  `extra_body = { generationConfig = { topK = 40 } }`.
- The SDK's retries are off (podium retries); `timeout_s` is the SDK's per-request timeout
  (`connect_timeout_s` has no separate SDK setting). Provider exceptions become `WorkerError`
  in `worker_error` below, as for Anthropic (the message rules are in `podium.llm.errors`).
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import sys
import time
import uuid
from collections.abc import Sequence
from typing import Any

from podium.config import ModelSpec
from podium.errors import ConfigError, WorkerError
from podium.llm.base import (
    ChatResponse,
    Message,
    NoGrammar,
    Sampling,
    applied,
    checked_reply,
    retry_after,
    split_prefill,
    split_system,
)
from podium.llm.errors import deadline_error, provider_error
from podium.llm.tools import Named, Tool, ToolCall, ToolChoice, arguments_object, call_names

DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com"

_CONTEXT_PATTERNS = ("exceeds the maximum number of tokens", "context length",
                     "context window", "too many tokens")


def _import_sdk() -> tuple[Any, Any, Any]:
    try:
        from google import genai
        from google.genai import errors, types
    except ImportError:
        raise ConfigError(
            "backend 'gemini' needs the google-genai SDK: pip install 'podium[gemini]'"
        ) from None
    return genai, types, errors


def _transport_errors() -> tuple[type[BaseException], ...]:
    """Connection and timeout errors of whichever HTTP stack the SDK used (httpx2, httpx,
    aiohttp), without importing any of them."""
    found: list[type[BaseException]] = [TimeoutError, ConnectionError]
    for module, name in (("httpx2", "TransportError"), ("httpx", "TransportError"),
                         ("aiohttp", "ClientError")):
        cls = getattr(sys.modules.get(module), name, None)
        if isinstance(cls, type):
            found.append(cls)
    return tuple(found)


def _retry_delay(details: Any) -> float | None:
    """`retryDelay` ("37s", "1.5s") from a google.rpc.RetryInfo entry of an error body."""
    try:
        entries = details["error"]["details"]
    except (KeyError, TypeError):
        return None
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and str(entry.get("@type", "")).endswith("RetryInfo"):
            match = re.fullmatch(r"\s*([0-9.]+)s\s*", str(entry.get("retryDelay", "")))
            if match:
                return float(match.group(1))
    return None


def _error_kind(errors: Any, exc: BaseException) -> str:
    if isinstance(exc, ValueError | RecursionError):  # a reply cut off, nested too deep or
        return "server"  # not the expected record (pydantic's ValidationError): ask again
    if isinstance(exc, errors.APIError):
        code = exc.code or 0
        if code in (401, 403):
            return "auth"
        if code == 429:
            return "rate_limit"
        if code >= 500 or code == 408:
            return "server"
        if 400 <= code < 500:
            text = f"{exc.message or ''} {exc}".lower()
            too_long = any(p in text for p in _CONTEXT_PATTERNS)
            return "context_length" if too_long else "bad_request"
        return "other"
    if isinstance(exc, _transport_errors()):
        return "transport"
    return "other"


def worker_error(spec: ModelSpec, exc: BaseException, secret: str | None) -> WorkerError:
    """Convert a google-genai (or transport) exception (`podium.llm.errors` writes the
    message). The wait a server asks for comes from a Retry-After header, else from the
    RetryInfo entry of the error body."""
    _, _, errors = _import_sdk()
    kind = _error_kind(errors, exc)
    url = spec.base_url or DEFAULT_BASE_URL
    if not isinstance(exc, errors.APIError):
        return provider_error(spec.name, kind, exc, vendor="Gemini", url=url, secret=secret,
                              timeout_s=spec.timeout_s)
    wait = None
    if kind in ("rate_limit", "server"):
        wait = retry_after(getattr(getattr(exc, "response", None), "headers", None))
        if wait is None:
            wait = _retry_delay(exc.details)
    return provider_error(spec.name, kind, exc, vendor="Gemini", url=url, secret=secret,
                          status=exc.code, retry_after=wait, raw=exc.message or str(exc))


SIGNATURE = "~sig~"  # in a call's id, before the thought signature (base64url)


def _call_id(call_id: str | None, signature: bytes | None) -> str:
    """A call's id as podium carries it: Gemini's (or a new one), with its thought
    signature."""
    base = call_id or f"call_{uuid.uuid4().hex[:16]}"
    if not signature:
        return base
    return base + SIGNATURE + base64.urlsafe_b64encode(signature).decode()


def _split_id(call_id: str) -> tuple[str, bytes | None]:
    base, _, signature = call_id.partition(SIGNATURE)
    return base, base64.urlsafe_b64decode(signature) if signature else None


def _call_part(call: dict[str, Any]) -> dict[str, Any]:
    call_id, signature = _split_id(call.get("id") or "")
    part: dict[str, Any] = {"function_call": {"id": call_id, "name": call["function"]["name"],
                                              "args": arguments_object(call)}}
    if signature:
        part["thought_signature"] = signature
    return part


def _turn(message: Message, names: dict[str, str]) -> dict[str, Any]:
    """One message as a Gemini content (a `tool` message: one functionResponse part)."""
    if message.get("role") == "tool":
        call_id = message.get("tool_call_id") or ""
        return {"role": "user", "parts": [{"function_response": {
            "id": _split_id(call_id)[0], "name": names.get(call_id) or message.get("name", ""),
            "response": {"output": message.get("content") or ""}}}]}
    role = "model" if message.get("role") == "assistant" else "user"
    calls = message.get("tool_calls") or []
    parts = [{"text": message.get("content") or ""}] if message.get("content") or not calls \
        else []
    return {"role": role, "parts": parts + [_call_part(call) for call in calls]}


def _contents(messages: list[Message]) -> tuple[list[dict[str, Any]], str | None, bool]:
    """Gemini `contents`, the system instruction, and whether a prefill was folded in."""
    system, turns = split_system(messages)
    rest, prefill = split_prefill(turns)
    names = call_names(rest)
    contents: list[dict[str, Any]] = []
    for message in rest:
        content = _turn(message, names)
        last = contents[-1] if contents else None
        if message.get("role") == "tool" and last is not None and last["role"] == "user" \
                and "function_response" in last["parts"][-1]:
            last["parts"] += content["parts"]  # one turn answers all of a turn's calls
        else:
            contents.append(content)
    if prefill:  # an empty prefill is no prefill
        if contents and contents[-1]["role"] == "user" and "text" in contents[-1]["parts"][0]:
            last = contents[-1]["parts"][0]
            last["text"] = f"{last['text']}\n\n{prefill}" if last["text"] else prefill
        else:
            contents.append({"role": "user", "parts": [{"text": prefill}]})
    return contents, system or None, bool(prefill)


def tool_config(types: Any, tools: Sequence[Tool] | None,
                choice: ToolChoice | None) -> dict[str, Any]:
    """The config's `tools` and `tool_config` (see the module's mapping)."""
    fields: dict[str, Any] = {}
    if tools is not None:
        fields["tools"] = [types.Tool(function_declarations=[
            types.FunctionDeclaration(name=t.name, description=t.description or None,
                                      parameters_json_schema=t.parameters) for t in tools])]
    if choice is not None:
        mode = "ANY" if isinstance(choice, Named) else {"auto": "AUTO", "none": "NONE",
                                                        "required": "ANY"}[choice]
        names = [choice.name] if isinstance(choice, Named) else None
        fields["tool_config"] = types.ToolConfig(function_calling_config=(
            types.FunctionCallingConfig(mode=mode, allowed_function_names=names)))
    return fields


def _tool_call(part: Any) -> ToolCall:
    call = part.function_call
    args = call.args if call.args is not None else {}
    return ToolCall(id=_call_id(call.id, part.thought_signature), name=call.name,
                    arguments=json.dumps(args, ensure_ascii=False))


class GeminiClient(NoGrammar):
    """A worker or Conductor served by the Gemini API."""

    def __init__(self, spec: ModelSpec) -> None:
        genai, types, errors = _import_sdk()
        self.spec = spec
        self.name = spec.name
        self._key = spec.required_api_key("GEMINI_API_KEY")
        self._types, self._errors = types, errors
        try:
            http_options = types.HttpOptions(
                base_url=spec.base_url or None,
                timeout=int(spec.timeout_s * 1000),
                retry_options=types.HttpRetryOptions(attempts=1),  # podium retries
                extra_body=dict(spec.extra_body) or None,
            )
            self._config = types.GenerateContentConfig(**self._config_fields(types))
            self._client = genai.Client(vertexai=False, api_key=self._key,
                                        http_options=http_options)
        except (ValueError, TypeError) as exc:  # pydantic's ValidationError is a ValueError
            raise ConfigError(f"Model {spec.name!r} (backend 'gemini'): invalid settings: "
                              f"{exc}. Fix them in the pool file.") from None

    def _config_fields(self, types: Any, sampling: Sampling | None = None) -> dict[str, Any]:
        s = applied(self.spec, sampling)
        fields: dict[str, Any] = {}
        for ours, theirs in (("temperature", "temperature"), ("top_p", "top_p"),
                             ("max_tokens", "max_output_tokens"), ("seed", "seed")):
            if getattr(s, ours) is not None:
                fields[theirs] = getattr(s, ours)
        if s.stop:
            fields["stop_sequences"] = list(s.stop)
        budget: int | None = None
        if s.thinking is False:
            budget = 0
        elif s.thinking_budget is not None:
            budget = s.thinking_budget
        elif s.thinking:
            budget = -1  # dynamic: the model decides
        if budget is not None:
            fields["thinking_config"] = types.ThinkingConfig(thinking_budget=budget,
                                                             include_thoughts=False)
        return fields

    @property
    def supports_tools(self) -> bool:
        return True

    async def chat(self, messages: list[Message], *, grammar: str | None = None,
                   sample_id: int | str = 0, sampling: Sampling | None = None,
                   tools: Sequence[Tool] | None = None, tool_choice: ToolChoice | None = None,
                   parallel_tool_calls: bool | None = None) -> ChatResponse:
        self.refuse_grammar(grammar)
        contents, system, prefilled = _contents(messages)
        config = self._config
        if sampling is not None:
            config = config.model_copy(update=self._config_fields(self._types, sampling))
        if tools is not None or tool_choice is not None:
            config = config.model_copy(update=tool_config(self._types, tools, tool_choice))
        if system is not None:
            config = config.model_copy(update={"system_instruction": system})
        start = time.perf_counter()
        try:
            async with asyncio.timeout(self.spec.timeout_s):  # the whole call (see timeout_s)
                resp = await self._client.aio.models.generate_content(
                    model=self.spec.model, contents=contents, config=config)
        except TimeoutError:
            raise deadline_error(self.name, "Gemini", self.spec.base_url or DEFAULT_BASE_URL,
                                 self.spec.timeout_s) from None
        except (self._errors.APIError, ValueError, RecursionError, *_transport_errors()) as exc:
            raise worker_error(self.spec, exc, self._key) from None
        latency = time.perf_counter() - start
        if not resp.candidates:
            feedback = getattr(resp, "prompt_feedback", None)
            reason = getattr(feedback, "block_reason", None)
            if reason:
                raise WorkerError(self.name, "bad_request",
                                  f"Gemini blocked the prompt ({_enum_text(reason)}); "
                                  "rephrase it or adjust safety settings via extra_body")
            raise WorkerError(self.name, "empty", "Gemini returned no candidates")
        candidate = resp.candidates[0]
        parts = candidate.content.parts if candidate.content and candidate.content.parts else []
        text = "".join(p.text for p in parts if p.text and not p.thought)
        calls = tuple(_tool_call(p) for p in parts if p.function_call is not None)
        usage = resp.usage_metadata
        thoughts = usage.thoughts_token_count if usage else None
        return checked_reply(
            self.name, "Gemini",
            text=text,
            tool_calls=calls,
            prompt_tokens=(usage.prompt_token_count or 0) if usage else 0,
            completion_tokens=((usage.candidates_token_count or 0) + (thoughts or 0))
            if usage else 0,
            reasoning_tokens=thoughts,
            finish_reason=_enum_text(candidate.finish_reason),
            latency_s=latency,
            model=resp.model_version or self.spec.model,
            request_id=resp.response_id,
            prefill="as_message" if prefilled else "none",
        )

    async def aclose(self) -> None:
        await self._client.aio.aclose()


def _enum_text(value: Any) -> str | None:
    if value is None:
        return None
    return str(getattr(value, "value", value))
