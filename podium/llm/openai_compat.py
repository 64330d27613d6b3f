"""Any OpenAI-compatible chat endpoint: OpenAI, vLLM, SGLang, llama.cpp, Ollama, OpenRouter.

Providers are data: a pool entry gives the base URL, model name, the environment variable that
holds the key, and sampling settings. The key is sent only to that entry's base URL and never
appears in an error message.

**Transport** (`transport` in the pool entry). A call is one POST of a JSON body and one JSON
reply, made one of two ways:

- `aiohttp` (the default): podium posts the body itself, over one aiohttp connection pool per
  model (made on first use, in the running event loop). An error status becomes `HTTPError`.
- `openai-sdk`: through the openai SDK's `AsyncOpenAI` (over its httpx client), which raises
  its own exceptions.

Both send the same request: the same body and headers (the key as a bearer token;
`OPENAI_ORG_ID` / `OPENAI_PROJECT_ID`, when set, as the SDK sends them), the same connect and
read timeouts (with `timeout_s` over the whole call, see below), proxies and CA bundle from
the environment. They read the same reply, as plain JSON. The SDK's layers (request options,
its HTTP client's hooks, its response models) cost about ten times the CPU of the aiohttp
path a call; with fast workers that was about half of a busy `podium serve`'s CPU
(benchmarks/README.md).

**Streaming.** The step whose reply is the answer may be streamed (`on_text`, see
`podium.llm.base.ChatClient`): that call goes through the openai SDK's streaming (`stream:
true` with `stream_options.include_usage`, its SSE parser) on either transport, and each text
delta is passed on as it arrives; the usage comes from the stream's last chunk.

**Tools.** `tools`, `tool_choice` and `parallel_tool_calls` are sent as Chat Completions
fields, and the conversation as it is (an assistant message with `tool_calls`, `tool`
messages). The reply's `message.tool_calls` become `ToolCall`s, arguments as the model wrote
them; streamed, the calls' deltas are joined by their `index` (the id and name from the first,
the arguments piece by piece; only text goes to `on_text`).

**A hostile or broken endpoint** is the worker's fault, never podium's: `timeout_s` bounds
the whole call (connecting, sending, and the whole reply however slowly it drips in, streamed
or not); a reply is read up to `max_reply_bytes` once decoded (a streamed one: its text and
tool-call arguments), and past it is a `WorkerError`; a reply is read as strict JSON (NaN,
Infinity and nesting too deep to read are bad JSON); and what it holds must be a reply
(`checked_reply`: text that is a string, token counts that are non-negative integers, tool
calls with string ids, names and arguments). Each is a `WorkerError` of kind `server`
(or `transport` for the deadline), retried. The error bodies the openai SDK reads itself (an
error status on transport `openai-sdk`) are bounded by `timeout_s` only.

Either way, errors become `WorkerError` in `worker_error` (the message is written by
`podium.llm.errors`), with the HTTP status and the server's Retry-After when there are any.
Neither retries: `podium.llm.reliable.ReliableClient` retries, and records every attempt.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

import aiohttp
import httpx2
import openai

from podium.config import ModelSpec
from podium.errors import ConfigError, WorkerError
from podium.files import strict_loads
from podium.llm.base import (
    ChatResponse,
    Message,
    PrefillMode,
    Sampling,
    TextSink,
    applied,
    checked_reply,
    retry_after,
    split_prefill,
)
from podium.llm.chat_template import load_chat_template
from podium.llm.errors import deadline_error, provider_error, sdk_error_kind, status_kind
from podium.llm.tools import Tool, ToolCall, ToolChoice, tools_openai
from podium.redact import clip, safe_url, url_credentials

# headers the openai SDK adds from the environment, sent the same way here
_ENV_HEADERS = (("OPENAI_ORG_ID", "OpenAI-Organization"), ("OPENAI_PROJECT_ID", "OpenAI-Project"))
KEEPALIVE_S = 5.0  # how long an idle connection is kept (the openai SDK's default too)


class HTTPError(Exception):
    """An error status from the endpoint (transport `aiohttp`): the status, the endpoint's
    message (the JSON body's `error.message`, else the body's text) and the reply's headers."""

    def __init__(self, status: int, body: bytes, headers: Any) -> None:
        self.status_code = status
        self.headers = headers
        super().__init__(_error_message(body))


def _read_json(raw: bytes | str) -> Any:
    """A reply's JSON, strictly (`podium.files.strict_loads`); nesting too deep to read is a
    `ValueError`, as bad JSON is."""
    try:
        return strict_loads(raw)
    except RecursionError:
        raise ValueError("the JSON nests too deeply to read") from None


def _error_message(body: bytes) -> str:
    text = body.decode("utf-8", "replace")
    try:
        data = _read_json(text)
    except ValueError:
        return text.strip()
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return error["message"]
    return text.strip()


def _env_proxy(url: str) -> str | None:
    """The proxy the environment names for `url` (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY, and
    NO_PROXY to go direct), as the SDK's httpx client finds it; None to go direct."""
    parts = urllib.parse.urlsplit(url)
    # (in urllib.request since Python 3.2, though not in its documentation nor its stubs)
    if urllib.request.proxy_bypass_environment(parts.hostname or ""):  # type: ignore[attr-defined]
        return None
    proxies = urllib.request.getproxies_environment()
    return proxies.get(parts.scheme) or proxies.get("all")


def _too_long(text: str) -> bool:
    return "context" in text and "length" in text


def _error_kind(exc: Exception) -> str:
    if isinstance(exc, HTTPError):
        return status_kind(exc.status_code, str(exc), _too_long)
    if isinstance(exc, aiohttp.ClientError | httpx2.TransportError | TimeoutError | OSError):
        return "transport"
    if isinstance(exc, ValueError):  # a reply that is not JSON (cut off): asking again may work
        return "server"
    return sdk_error_kind(openai, exc, _too_long)


def worker_error(spec: ModelSpec, exc: Exception, secret: str | None) -> WorkerError:
    """Convert a transport's exception (`podium.llm.errors` writes the message, key
    scrubbed)."""
    status = getattr(exc, "status_code", None)
    headers = exc.headers if isinstance(exc, HTTPError) else getattr(
        getattr(exc, "response", None), "headers", None)
    raw = None
    if isinstance(exc, openai.APIConnectionError):  # the SDK's text is only "Connection error."
        root: BaseException = exc  # or "Request timed out.": what the HTTP stack said is under it
        while root.__cause__ is not None:
            root = root.__cause__
        if root is not exc:
            raw = f"{exc} ({type(root).__name__}: {root})"
    return provider_error(spec.name, _error_kind(exc), exc, vendor="the endpoint",
                          url=spec.base_url, secret=secret, raw=raw,
                          status=status if isinstance(status, int) else None,
                          retry_after=retry_after(headers), timeout_s=spec.timeout_s)


def _fields(value: Any) -> dict[str, Any]:
    """A JSON object of the reply, or {} where the endpoint left it out (or sent null)."""
    return value if isinstance(value, dict) else {}


def _label(value: Any) -> str | None:
    """A reply's label (its model, id, finish reason) when it is a string; else none."""
    return value if isinstance(value, str) else None


def _usage(usage: dict[str, Any]) -> dict[str, Any]:
    """The token counts of a reply's `usage` (left out: 0), as the endpoint wrote them: a
    count that is not a non-negative integer makes the reply broken (`checked_reply`)."""
    details = _fields(usage.get("completion_tokens_details"))
    counts = {k: 0 if usage.get(k) is None else usage[k]
              for k in ("prompt_tokens", "completion_tokens")}
    return {**counts, "reasoning_tokens": details.get("reasoning_tokens")}


def _first_choice(worker: str, data: Any, path: str) -> dict[str, Any]:
    """The reply's first choice; a WorkerError (retried: asking again may work) when the
    reply is not a completion or has no choices."""
    if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
        raise WorkerError(worker, "server", f"the endpoint's reply to {path} is not a "
                          f"completion (got {type(data).__name__}: {clip(str(data), 80)!r}); check "
                          "base_url")
    if not data["choices"]:
        raise WorkerError(worker, "empty", "the endpoint returned no choices")
    choice = data["choices"][0]
    if not isinstance(choice, dict):
        raise WorkerError(worker, "server", f"the endpoint's reply to {path} is not a "
                          f"completion (its first choice is {clip(str(choice), 80)!r})")
    return choice


def _tool_calls(worker: str, entries: Any) -> tuple[ToolCall, ...]:
    """The calls of a reply message's `tool_calls` (none when it has none); a WorkerError
    (retried) when they are not tool calls."""
    if entries is None:
        return ()
    try:
        if not isinstance(entries, list):
            raise ValueError(f"tool_calls is {type(entries).__name__}, not a list")
        return tuple(ToolCall.from_openai(entry) for entry in entries)
    except ValueError as exc:
        raise WorkerError(worker, "server", f"the endpoint sent broken tool calls: "
                          f"{clip(str(exc), 120)}") from None


class _StreamedCalls:
    """Tool calls as a stream sends them: deltas joined by their `index`."""

    def __init__(self, worker: str) -> None:
        self.worker = worker
        self._calls: dict[int, dict[str, Any]] = {}
        self.size = 0  # characters of arguments so far

    def add(self, deltas: Any) -> None:
        for delta in deltas if isinstance(deltas, list) else [deltas]:
            index = delta.get("index") if isinstance(delta, dict) else None
            if not isinstance(index, int):
                raise WorkerError(self.worker, "server", "the endpoint sent a broken stream: a "
                                  "tool call delta without an index")
            call = self._calls.setdefault(index, {"id": "", "name": "", "arguments": []})
            function = _fields(delta.get("function"))
            for key, value in (("id", delta.get("id")), ("name", function.get("name"))):
                if isinstance(value, str) and value:
                    call[key] = call[key] or value
            piece = function.get("arguments")
            if isinstance(piece, str):
                call["arguments"].append(piece)
                self.size += len(piece)

    def calls(self) -> tuple[ToolCall, ...]:
        return tuple(ToolCall(id=c["id"], name=c["name"], arguments="".join(c["arguments"]))
                     for _, c in sorted(self._calls.items()))


def _too_big(worker: str, limit: int) -> WorkerError:
    return WorkerError(worker, "server", f"the endpoint's reply is larger than max_reply_bytes "
                       f"= {limit} bytes (decoded); it was cut off there. Raise "
                       "max_reply_bytes for this model in the pool file if such replies are "
                       "expected")


async def _read_capped(chunks: Any, worker: str, limit: int) -> bytes:
    """The bytes of an async iterator of chunks, up to `limit`; past it a `WorkerError`."""
    body = bytearray()
    async for chunk in chunks:
        body += chunk
        if len(body) > limit:
            raise _too_big(worker, limit)
    return bytes(body)


class OpenAICompatClient:
    """A worker or Conductor behind an OpenAI-compatible `/chat/completions` endpoint."""

    streams = True  # `on_text`: see the module's Streaming

    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec
        self.name = spec.name
        self._key = spec.api_key()  # ConfigError now if the variable is unset
        self._base = (spec.base_url or "").rstrip("/")
        if self._key and url_credentials(self._base):
            raise ConfigError(
                f"Model {self.name!r}: base_url {safe_url(self._base)} carries credentials "
                "(user:password@) and api_key_env names a key, but a request carries one "
                "Authorization header. Remove the credentials from base_url, or api_key_env.")
        self._session: aiohttp.ClientSession | None = None  # transport aiohttp, on first use
        self._proxy: str | None = None
        self._sdk: openai.AsyncOpenAI | None = None
        if spec.transport == "aiohttp":
            # looked up once here; aiohttp's trust_env would look it up on every call
            self._proxy = _env_proxy(self._base)
            if self._proxy and not self._proxy.startswith(("http://", "https://")):
                raise ConfigError(
                    f"Model {self.name!r}: the environment's proxy for {self._base} is "
                    f"{urllib.parse.urlsplit(self._proxy).scheme}://..., and the aiohttp "
                    "transport takes HTTP proxies only. Set transport = \"openai-sdk\" for it "
                    "in the pool file (with httpx's SOCKS support installed), or an HTTP "
                    "proxy.")
        else:
            self._sdk = self._make_sdk()

    def _make_sdk(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            base_url=self.spec.base_url,
            api_key=self._key or "not-needed",
            timeout=openai.Timeout(self.spec.timeout_s, connect=self.spec.connect_timeout_s),
            max_retries=0,  # ReliableClient retries (and records each attempt)
        )

    def _open(self) -> aiohttp.ClientSession:
        """The model's connection pool (transport aiohttp), made in the running event loop:
        the SDK's headers, timeouts, keep-alive, and proxies and CA bundle from the
        environment."""
        headers = {"Content-Type": "application/json", "Accept": "application/json",
                   "User-Agent": "podium"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        for variable, header in _ENV_HEADERS:
            if os.environ.get(variable):
                headers[header] = os.environ[variable]
        ssl = httpx2.create_ssl_context() if self._base.startswith("https:") else False
        # not trust_env: it looks up the proxy and .netrc in a thread for every call (the
        # proxy is found once, in __init__)
        self._session = aiohttp.ClientSession(
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.spec.connect_timeout_s,
                                          sock_read=self.spec.timeout_s),
            connector=aiohttp.TCPConnector(limit=0, ssl=ssl, keepalive_timeout=KEEPALIVE_S))
        return self._session

    async def _post(self, path: str, body: dict[str, Any],
                    answered: list[bool]) -> tuple[bytes, Any]:
        """The reply's body and headers; a WorkerError for a transport failure or an error
        status. `answered` gets True once the reply's headers have come."""
        limit = self.spec.max_reply_bytes
        if self._sdk is not None:
            try:  # the body is already in wire form: posted as is, the reply read raw, capped
                stream = await self._sdk.post(path, body=body, cast_to=object, stream=True,
                                              stream_cls=openai.AsyncStream[object])
                answered.append(True)
                try:
                    raw = await _read_capped(stream.response.aiter_bytes(), self.name, limit)
                finally:
                    await stream.response.aclose()
            except (openai.OpenAIError, httpx2.TransportError) as exc:
                raise worker_error(self.spec, exc, self._key) from None
            return raw, stream.response.headers
        session = self._session or self._open()
        try:
            async with session.post(self._base + path, data=json.dumps(body).encode(),
                                    proxy=self._proxy) as resp:
                answered.append(True)
                raw = await _read_capped(resp.content.iter_chunked(1 << 16), self.name, limit)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise worker_error(self.spec, exc, self._key) from None
        if resp.status >= 400:
            raise worker_error(self.spec, HTTPError(resp.status, raw, resp.headers), self._key)
        return raw, resp.headers

    @property
    def supports_grammar(self) -> bool:
        return self.spec.grammar_style is not None

    @property
    def supports_tools(self) -> bool:
        return True

    def _request(self, messages: list[Message], grammar: str | None,
                 sampling: Sampling | None = None, tools: dict[str, Any] | None = None
                 ) -> dict[str, Any]:
        """The request body. Provider quirks come from the pool entry's profile settings:
        `max_tokens_param` (max_completion_tokens for OpenAI reasoning models),
        `reasoning_effort`, `thinking` (Qwen3-style chat_template_kwargs.enable_thinking) and,
        when the last message is an assistant prefill, `prefill`: `continue` adds vLLM's
        continue_final_message/add_generation_prompt fields, `completions` makes it a
        `/v1/completions` body whose `prompt` is the rendered chat template plus the prefill.
        `sampling` is this call's sampling over the pool entry's; `tools` the call's tool
        fields, in wire form."""
        s = applied(self.spec, sampling)
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
        body.update(tools or {})
        prefilled = split_prefill(messages)[1] is not None
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
        if split_prefill(messages)[1] is None:
            return "none"
        if self.spec.prefill != "message" or self.spec.extra_body.get("continue_final_message"):
            return "continued"
        return "as_message"

    async def chat(self, messages: list[Message], *, grammar: str | None = None,
                   sample_id: int | str = 0, sampling: Sampling | None = None,
                   on_text: TextSink | None = None, tools: Sequence[Tool] | None = None,
                   tool_choice: ToolChoice | None = None,
                   parallel_tool_calls: bool | None = None) -> ChatResponse:
        wire = tools_openai(tools, tool_choice, parallel_tool_calls)
        body = self._request(messages, grammar, sampling, wire)
        # a `prompt` body is a prefill to continue on /completions (`prefill = "completions"`)
        path = "/completions" if "prompt" in body else "/chat/completions"
        answered: list[bool] = []  # the reply's status and headers came
        try:  # timeout_s bounds the whole call, not only each wait for the next bytes
            async with asyncio.timeout(self.spec.timeout_s):
                if on_text is not None:
                    return await self._streamed(messages, path, body, on_text, answered)
                start = time.perf_counter()
                raw, headers = await self._post(path, body, answered)
        except TimeoutError:
            raise deadline_error(self.name, "the endpoint", self._base, self.spec.timeout_s,
                                 bool(answered)) from None
        return self._reply(messages, path, body, raw, headers, time.perf_counter() - start)

    def _reply(self, messages: list[Message], path: str, body: dict[str, Any], raw: bytes,
               headers: Any, latency: float) -> ChatResponse:
        """The ChatResponse of a whole (not streamed) reply."""
        try:
            data = _read_json(raw)  # whatever the content-type says, as the SDK reads it
        except ValueError as exc:
            kind = headers.get("content-type", "")
            if "json" not in kind:  # a web page, say: base_url names something else
                raise WorkerError(self.name, "server", f"the endpoint's reply to {path} is "
                                  f"not JSON (content-type {kind or 'none'!r}); check "
                                  "base_url") from None
            raise WorkerError(self.name, "server", f"the endpoint's reply to {path} is not "
                              f"valid JSON ({clip(str(exc), 120)}): cut off, or broken; asking "
                              "again may work") from None
        choice = _first_choice(self.name, data, path)
        message = _fields(choice.get("message"))
        text = choice.get("text") if "prompt" in body else message.get("content")
        return checked_reply(
            self.name, "the endpoint",
            text="" if text is None else text,
            tool_calls=_tool_calls(self.name, message.get("tool_calls")),
            **_usage(_fields(data.get("usage"))),
            finish_reason=_label(choice.get("finish_reason")),
            latency_s=latency,
            model=_label(data.get("model")) or self.spec.model,
            request_id=headers.get("x-request-id") or _label(data.get("id")),
            prefill=self._prefill_mode(messages),
        )

    async def _streamed(self, messages: list[Message], path: str, body: dict[str, Any],
                        on_text: TextSink, answered: list[bool]) -> ChatResponse:
        """The call streamed through the SDK, each text delta passed to `on_text`;
        `answered` gets True once the reply's headers have come."""
        self._sdk = self._sdk or self._make_sdk()
        body = {**body, "stream": True, "stream_options": {"include_usage": True}}
        start = time.perf_counter()
        pieces: list[str] = []
        calls = _StreamedCalls(self.name)
        usage: dict[str, Any] = {}
        finish = model = rid = None
        try:
            stream = await self._sdk.post(path, body=body, cast_to=object, stream=True,
                                          stream_cls=openai.AsyncStream[object])
            headers = stream.response.headers
            answered.append(True)
            if "text/event-stream" not in headers.get("content-type", ""):
                # a server that ignores `stream` (or a reply that is no completion at all)
                raw = await _read_capped(stream.response.aiter_bytes(), self.name,
                                        self.spec.max_reply_bytes)
                reply = self._reply(messages, path, body, raw, headers,
                                    time.perf_counter() - start)
                if reply.text:
                    on_text(reply.text)
                return reply
            rid = headers.get("x-request-id")
            size = 0
            async for chunk in stream:
                if not isinstance(chunk, dict):
                    continue
                model, rid = _label(chunk.get("model")) or model, rid or _label(chunk.get("id"))
                usage = _fields(chunk.get("usage")) or usage
                for choice in chunk.get("choices") or []:
                    if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                        continue
                    delta = _fields(choice.get("delta"))
                    text = choice.get("text") if "prompt" in body else delta.get("content")
                    if delta.get("tool_calls") is not None:
                        calls.add(delta["tool_calls"])
                    if text is not None and not isinstance(text, str):
                        raise WorkerError(self.name, "server", "the endpoint sent a broken "
                                          f"stream: a piece of text is {type(text).__name__}, "
                                          "not a string")
                    if text:
                        size += len(text)
                    if size + calls.size > self.spec.max_reply_bytes:
                        raise _too_big(self.name, self.spec.max_reply_bytes)
                    if text:
                        pieces.append(text)
                        on_text(text)
                    finish = _label(choice.get("finish_reason")) or finish
        except (openai.OpenAIError, httpx2.TransportError) as exc:
            raise worker_error(self.spec, exc, self._key) from None
        except (ValueError, RecursionError) as exc:  # an event whose data is not JSON
            raise WorkerError(self.name, "server", "the endpoint sent a broken stream (an "
                              f"event that is not JSON: {type(exc).__name__}: "
                              f"{clip(str(exc), 120)})") from None
        if finish is None:  # no last chunk: the connection ended mid-reply
            raise WorkerError(self.name, "server", "the endpoint's stream ended before the "
                              f"reply was complete ({len(''.join(pieces))} characters in)")
        return checked_reply(
            self.name, "the endpoint",
            text="".join(pieces),
            tool_calls=calls.calls(),
            **_usage(usage),
            finish_reason=finish,
            latency_s=time.perf_counter() - start,
            model=model or self.spec.model,
            request_id=rid,
            prefill=self._prefill_mode(messages),
        )

    async def aclose(self) -> None:
        if self._sdk is not None:
            await self._sdk.close()
        if self._session is not None:
            await self._session.close()
