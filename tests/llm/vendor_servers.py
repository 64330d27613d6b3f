"""Small real HTTP servers that speak Anthropic's and Google's wire formats, for adapter tests.

Each server runs starlette under uvicorn in a background thread, bound to 127.0.0.1 on a free
port, and checks each request the way the real API would before answering it:

`AnthropicServer`, `POST /v1/messages` (Messages API):
    the key in `x-api-key`, or `Authorization: Bearer` (what SDK 2.x sends), and an
    `anthropic-version` header; a body with `model`, `max_tokens`, `messages` (roles user and
    assistant, non-empty contents except a final assistant prefill, which must not end in
    whitespace), `system` as a string or a list of text blocks, `stop_sequences`, `thinking`
    (`budget_tokens` >= 1024 and below `max_tokens`; no assistant prefill with thinking on).
    Under `anthropic-version` 2026-10-21 or later, `temperature`, `top_p` and `top_k` are
    rejected, as the API does. Tools: `tools` entries (`name`, `input_schema` of type object),
    `tool_choice` (auto, any, none, or a declared tool), `tool_use` blocks in assistant turns
    and `tool_result` blocks in the next user turn answering them. Answers a `message` object
    (a `thinking` block first when thinking is on), with a `request-id` header; given tools,
    and unless the conversation ends with tool results or `tool_choice` is none, a `tool_use`
    block calling the chosen tool (the first, or the named one) with `tool_input`; after tool
    results, text echoing them.

`GeminiServer`, `POST /{version}/models/{model}:generateContent`:
    the key in `x-goog-api-key` (or `?key=`); a body with `contents` (roles user and model,
    text parts, ending on a user turn), optional `systemInstruction` and `generationConfig`
    (only known fields, `thinkingConfig.thinkingBudget`), `tools` (function declarations)
    and `toolConfig`; `functionCall` parts in model turns and `functionResponse` parts in user
    turns; unknown fields are rejected as the API does ("Invalid JSON payload received. Unknown name ..."). Like the API (proto3 JSON),
    it takes field names in lowerCamelCase or in the proto's snake_case (google-genai 3.x
    sends `thinkingConfig` contents as `thinking_budget`, `include_thoughts`); the recorded
    `body` is normalised to lowerCamelCase and `raw_body` is what was sent. Answers
    `candidates`, `usageMetadata` (with `thoughtsTokenCount` when thinking) and `responseId`;
    given function declarations (mode not NONE) and no function responses at the end, a
    `functionCall` part (no id, as the API sends; with `thoughtSignature` when
    `thought_signature` is set, which a later request must then send back with the call).

Error modes are chosen by the model name's suffix:

    -401   authentication error (its message echoes the key, as a careless server might)
    -403   permission error
    -429   rate limit; Anthropic: `retry-after: 7`; Gemini: RetryInfo `retryDelay: "7s"`
    -429h  Gemini only: rate limit with a `Retry-After: 3` header instead
    -500   internal server error
    -529   Anthropic only: `overloaded_error`
    -long  400, the prompt is longer than the context
    -echo  400 whose message echoes the key (the adapter must scrub it)
    -slow  answers after 2 s (for client timeouts)
    -trunc HTTP 200, `application/json`, but only the first half of the body

Only request bodies, paths, query-parameter names and a few non-secret header values are
recorded, never the key: `auth` says which header carried it and `key_elsewhere` whether it
also appeared anywhere else (another header, the URL, the body).
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import uuid
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from support import InThreadServer

_DEFAULT_REPLY = "Hello from the fake server."


def _words(text: str) -> int:
    return len(text.split())


class _Server:
    """A starlette app served by uvicorn in a daemon thread."""

    def __init__(self, api_key: str, reply: str = _DEFAULT_REPLY) -> None:
        self.api_key = api_key
        self.reply = reply
        self.tool_input: dict[str, Any] = {"city": "Oslo", "unit": "celsius"}
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._running = InThreadServer(self.app(), name="vendor test server",
                                       log_level="warning", lifespan="off",
                                       timeout_graceful_shutdown=1)
        self.port: int = self._running.port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def app(self) -> Starlette:
        raise NotImplementedError

    def start(self) -> _Server:
        self._running.started(timeout=10)
        return self

    def stop(self) -> None:
        self._running.stop(timeout=5)

    def __enter__(self) -> _Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()

    def _record(self, request: Request, raw: bytes, auth: str | None,
                extra: dict[str, Any]) -> dict[str, Any]:
        key = self.api_key
        url = str(request.url)
        if auth == "query":
            url = url.replace(f"key={key}", "")
        elsewhere = key in url or key.encode() in raw or any(
            key in value for name, value in request.headers.items() if name != auth)
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        rec = {"path": request.url.path, "query": sorted(request.query_params.keys()),
               "body": body, "auth": auth, "key_elsewhere": elsewhere, **extra}
        with self._lock:
            self.requests.append(rec)
        return rec

    @property
    def last(self) -> dict[str, Any]:
        with self._lock:
            return self.requests[-1]


def _mode(model: str) -> str:
    match = re.search(r"-(401|403|429h|429|500|529|long|echo|slow|trunc)$", model)
    return match.group(1) if match else ""


# --------------------------------------------------------------------------- Anthropic


def _truncated(response: JSONResponse) -> Response:
    return Response(response.body[: len(response.body) // 2], media_type="application/json")


def _anthropic_error(status: int, kind: str, message: str,
                     headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"type": "error", "error": {"type": kind, "message": message}},
                        status_code=status,
                        headers={"request-id": f"req_{uuid.uuid4().hex[:16]}", **(headers or {})})


def _text_of(content: Any) -> str | None:
    """The text of a string or a list of text blocks; None when the shape is wrong."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
        for b in content
    ):
        return "".join(b["text"] for b in content)
    return None


def _blocks_text(message: dict[str, Any], where: str, previous: Any,
                 problems: list[str]) -> str | None:
    """A message's text, its tool blocks checked (`tool_use` in assistant turns, `tool_result`
    in the user turn after, answering them); None when the content has the wrong shape."""
    content = message.get("content")
    if not isinstance(content, list):
        return _text_of(content)
    asked = {b.get("id") for b in previous.get("content") or [] if isinstance(b, dict)
             and b.get("type") == "tool_use"} if isinstance(previous, dict) \
        and isinstance(previous.get("content"), list) else set()
    texts: list[str] = []
    for j, block in enumerate(content):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "tool_use" and message["role"] == "assistant":
            if not (isinstance(block.get("id"), str) and isinstance(block.get("name"), str)
                    and isinstance(block.get("input"), dict)):
                problems.append(f"{where}.content.{j}: tool_use needs id, name and an input "
                                "object")
            texts.append("[tool_use]")
        elif kind == "tool_result" and message["role"] == "user":
            if block.get("tool_use_id") not in asked:
                problems.append(f"{where}.content.{j}: unexpected `tool_use_id` found in "
                                "`tool_result` blocks: each tool_result block must have a "
                                "corresponding `tool_use` block in the previous message")
            if _text_of(block.get("content", "")) is None:
                problems.append(f"{where}.content.{j}.content: must be a string or text "
                                "blocks")
            texts.append("[tool_result]")
        else:
            return None
    return "".join(texts)


def _anthropic_tools(body: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    tools = body.get("tools")
    names = set()
    for i, tool in enumerate(tools if isinstance(tools, list) else []):
        schema = tool.get("input_schema") if isinstance(tool, dict) else None
        if not (isinstance(tool.get("name"), str)
                and re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", tool["name"])):
            problems.append(f"tools.{i}.name: String should match pattern")
        elif not isinstance(schema, dict) or schema.get("type") != "object":
            problems.append(f"tools.{i}.input_schema.type: Input should be 'object'")
        else:
            names.add(tool["name"])
    if tools is not None and not isinstance(tools, list):
        problems.append("tools: Input should be a valid list")
    choice = body.get("tool_choice")
    if choice is not None:
        kind = choice.get("type") if isinstance(choice, dict) else None
        if kind not in ("auto", "any", "tool", "none"):
            problems.append("tool_choice.type: must be 'auto', 'any', 'tool' or 'none'")
        elif kind == "tool" and choice.get("name") not in names:
            problems.append(f"tool_choice.name: Tool '{choice.get('name')}' not found in tools")
        if set(choice) - {"type", "name", "disable_parallel_tool_use"}:
            problems.append("tool_choice: Extra inputs are not permitted")
    return problems


class AnthropicServer(_Server):
    """The Messages API: `POST /v1/messages`."""

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/messages", self._messages, methods=["POST"])])

    def _auth(self, request: Request) -> str | None:
        if request.headers.get("x-api-key") == self.api_key:
            return "x-api-key"
        if request.headers.get("authorization") == f"Bearer {self.api_key}":
            return "authorization"
        return None

    async def _messages(self, request: Request) -> Response:
        raw = await request.body()
        auth = self._auth(request)
        version = request.headers.get("anthropic-version")
        self._record(request, raw, auth, {"anthropic_version": version})
        if auth is None:
            return _anthropic_error(401, "authentication_error", "invalid x-api-key")
        try:
            body = json.loads(raw)
        except ValueError:
            return _anthropic_error(400, "invalid_request_error", "body is not JSON")
        problems = self._check(body, version)
        if problems:
            return _anthropic_error(400, "invalid_request_error", "; ".join(problems))
        mode = _mode(body["model"])
        if mode == "401":
            return _anthropic_error(401, "authentication_error",
                                    f"invalid x-api-key {self.api_key}")
        if mode == "403":
            return _anthropic_error(403, "permission_error",
                                    "Your API key does not have permission to use this model")
        if mode == "429":
            return _anthropic_error(429, "rate_limit_error", "Number of requests has exceeded "
                                    "your rate limit", headers={"retry-after": "7"})
        if mode == "500":
            return _anthropic_error(500, "api_error", "Internal server error")
        if mode == "529":
            return _anthropic_error(529, "overloaded_error", "Overloaded")
        if mode == "long":
            return _anthropic_error(400, "invalid_request_error",
                                    "prompt is too long: 210000 tokens > 200000 maximum")
        if mode == "echo":
            return _anthropic_error(400, "invalid_request_error",
                                    f"unexpected field near {self.api_key}")
        if mode == "slow":
            await asyncio.sleep(2)
        if mode == "trunc":
            return _truncated(self._answer(body))
        return self._answer(body)

    @staticmethod
    def _check(body: Any, version: str | None) -> list[str]:
        problems: list[str] = []
        if not version:
            problems.append("anthropic-version: header is required")
        if not isinstance(body, dict):
            return ["body: must be an object"]
        if not isinstance(body.get("model"), str) or not body.get("model"):
            problems.append("model: Field required")
        max_tokens = body.get("max_tokens")
        if not isinstance(max_tokens, int) or max_tokens < 1:
            problems.append("max_tokens: Field required")
            max_tokens = 0
        if version and version >= "2026-10-21":
            problems += [f"{k}: Extra inputs are not permitted"
                         for k in ("temperature", "top_p", "top_k") if k in body]
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            problems.append("messages: at least one message is required")
            messages = []
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
                problems.append(f"messages.{i}.role: must be 'user' or 'assistant'")
                continue
            previous = messages[i - 1] if i else None
            text = _blocks_text(m, f"messages.{i}", previous, problems)
            final = i == len(messages) - 1
            if text is None:
                problems.append(f"messages.{i}.content: must be a string or text blocks")
            elif not text and not (final and m["role"] == "assistant"):
                problems.append(f"messages.{i}: all messages must have non-empty content "
                                "except for the optional final assistant message")
            elif final and m["role"] == "assistant" and text != text.rstrip():
                problems.append("messages: final assistant content cannot end with trailing "
                                "whitespace")
        if messages and isinstance(messages[0], dict) and messages[0].get("role") != "user":
            problems.append("messages.0.role: the first message must use the user role")
        problems += _anthropic_tools(body)
        if "system" in body and _text_of(body["system"]) is None:
            problems.append("system: must be a string or a list of text blocks")
        stops = body.get("stop_sequences")
        if stops is not None and not (
            isinstance(stops, list) and all(isinstance(s, str) and s for s in stops)
        ):
            problems.append("stop_sequences: must be a list of non-empty strings")
        thinking = body.get("thinking")
        if thinking is not None:
            kind = thinking.get("type") if isinstance(thinking, dict) else None
            if kind == "enabled":
                budget = thinking.get("budget_tokens")
                if not isinstance(budget, int) or budget < 1024:
                    problems.append("thinking.enabled.budget_tokens: Input should be greater "
                                    "than or equal to 1024")
                elif budget >= max_tokens:
                    problems.append("`max_tokens` must be greater than "
                                    "`thinking.budget_tokens`")
                last = messages[-1] if messages else None
                if isinstance(last, dict) and last.get("role") == "assistant":
                    problems.append("This model does not support assistant message prefill "
                                    "when thinking is enabled")
            elif kind not in ("adaptive", "disabled"):
                problems.append("thinking.type: must be 'enabled', 'adaptive' or 'disabled'")
        return problems

    def _answer(self, body: dict[str, Any]) -> JSONResponse:
        text, stop_reason, stop_sequence = self.reply, "end_turn", None
        last = body["messages"][-1]["content"]
        results = [b for b in last if b.get("type") == "tool_result"] \
            if isinstance(last, list) else []
        choice = body.get("tool_choice") or {"type": "auto"}
        tool_use = None
        if results:
            text = "Tool said: " + " | ".join(_text_of(b.get("content")) or "" for b in results)
        elif body.get("tools") and choice["type"] != "none":
            name = choice["name"] if choice["type"] == "tool" else body["tools"][0]["name"]
            text, stop_reason = "Let me check.", "tool_use"
            tool_use = {"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:20]}",
                        "name": name, "input": self.tool_input}
        for seq in body.get("stop_sequences") or []:
            if seq in text:
                text, stop_reason, stop_sequence = text[: text.index(seq)], "stop_sequence", seq
        content: list[dict[str, Any]] = []
        usage: dict[str, Any] = {}
        thinking_tokens = 0
        if isinstance(body.get("thinking"), dict) and body["thinking"].get("type") == "enabled":
            thought = "Let me think about this carefully first."
            thinking_tokens = _words(thought) + 5
            content.append({"type": "thinking", "thinking": thought, "signature": "c2lnbmF0dXJl"})
            usage["output_tokens_details"] = {"thinking_tokens": thinking_tokens}
        content.append({"type": "text", "text": text, "citations": None})
        if tool_use is not None:
            content.append(tool_use)
        prompt = _text_of(body.get("system", "")) or ""
        prompt += " ".join(_text_of(m["content"]) or "" for m in body["messages"])
        usage.update({"input_tokens": _words(prompt), "output_tokens": _words(text)
                      + thinking_tokens, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0})
        message_id = f"msg_{uuid.uuid4().hex[:20]}"
        return JSONResponse(
            {"id": message_id, "type": "message", "role": "assistant", "model": body["model"],
             "content": content, "stop_reason": stop_reason, "stop_sequence": stop_sequence,
             "usage": usage},
            headers={"request-id": f"req_{message_id[4:]}"},
        )


# --------------------------------------------------------------------------- Gemini

_GEN_CONFIG_FIELDS = {
    "temperature", "topP", "topK", "candidateCount", "maxOutputTokens", "stopSequences",
    "seed", "presencePenalty", "frequencyPenalty", "responseMimeType", "responseSchema",
    "responseJsonSchema", "responseLogprobs", "logprobs", "thinkingConfig", "mediaResolution",
}
_TOP_FIELDS = {"contents", "systemInstruction", "generationConfig", "safetySettings", "tools",
               "toolConfig", "cachedContent", "model"}
_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
           404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL"}


def _google_error(code: int, message: str, details: list[dict[str, Any]] | None = None,
                  headers: dict[str, str] | None = None) -> JSONResponse:
    error: dict[str, Any] = {"code": code, "message": message, "status": _STATUS[code]}
    if details:
        error["details"] = details
    return JSONResponse({"error": error}, status_code=code, headers=headers)


def _camel(value: Any) -> Any:
    """Every object key in lowerCamelCase, as a proto3 JSON parser reads snake_case names."""
    if isinstance(value, dict):
        return {re.sub(r"_([a-z0-9])", lambda m: m.group(1).upper(), k): _camel(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_camel(v) for v in value]
    return value


def _parts_text(content: Any, where: str, problems: list[str]) -> str:
    parts = content.get("parts") if isinstance(content, dict) else None
    if not isinstance(parts, list) or not parts:
        problems.append(f"{where}.parts: must be a non-empty list")
        return ""
    texts = []
    role = content.get("role")
    for j, part in enumerate(parts):
        call = part.get("functionCall") if isinstance(part, dict) else None
        answer = part.get("functionResponse") if isinstance(part, dict) else None
        if role == "model" and isinstance(call, dict):
            if not isinstance(call.get("name"), str) or not isinstance(call.get("args"), dict):
                problems.append(f"{where}.parts[{j}].functionCall: needs a name and args")
        elif role == "user" and isinstance(answer, dict):
            if not isinstance(answer.get("name"), str) or not answer["name"] \
                    or not isinstance(answer.get("response"), dict):
                problems.append(f"{where}.parts[{j}].functionResponse: needs a name and a "
                                "response object")
            texts.append(json.dumps(answer.get("response")))
        elif not isinstance(part, dict) or not isinstance(part.get("text"), str):
            problems.append(f"{where}.parts[{j}]: only text and function parts are expected")
        else:
            texts.append(part["text"])
    return "".join(texts)


def _gemini_tools(body: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The problems of a request's `tools` and `toolConfig`, and the declared names."""
    problems: list[str] = []
    names: list[str] = []
    for i, tool in enumerate(body.get("tools") or []):
        for j, decl in enumerate(tool.get("functionDeclarations") or []):
            if not isinstance(decl.get("name"), str) or set(decl) - {
                    "name", "description", "parametersJsonSchema", "parameters"}:
                problems.append(f"tools[{i}].functionDeclarations[{j}]: unexpected shape")
            else:
                names.append(decl["name"])
    config = (body.get("toolConfig") or {}).get("functionCallingConfig")
    if config is not None:
        if config.get("mode") not in ("AUTO", "ANY", "NONE"):
            problems.append("toolConfig.functionCallingConfig.mode: unknown mode")
        allowed = config.get("allowedFunctionNames")
        if allowed is not None and (config.get("mode") != "ANY" or set(allowed) - set(names)):
            problems.append("toolConfig.functionCallingConfig.allowedFunctionNames: only with "
                            "mode ANY, naming declared functions")
    return problems, names


class GeminiServer(_Server):
    """The Gemini API: `POST /{version}/models/{model}:generateContent`."""

    def __init__(self, api_key: str, reply: str = _DEFAULT_REPLY) -> None:
        super().__init__(api_key, reply)
        self.thought_parts = False  # add a thought part to replies even without includeThoughts
        self.thought_signature: str | None = None  # base64, on the function calls it makes

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/{version}/models/{target:path}", self._generate,
                                       methods=["POST"])])

    async def _generate(self, request: Request) -> Response:
        raw = await request.body()
        version = request.path_params["version"]
        model, _, method = request.path_params["target"].partition(":")
        auth: str | None = None
        if request.headers.get("x-goog-api-key") == self.api_key:
            auth = "x-goog-api-key"
        elif request.query_params.get("key") == self.api_key:
            auth = "query"
        rec = self._record(request, raw, auth, {"version": version, "model": model,
                                                "method": method})
        rec["raw_body"], rec["body"] = rec["body"], _camel(rec["body"])
        if method != "generateContent":
            return _google_error(404, f"method {method!r} is not served here")
        if auth is None:
            return _google_error(401, "Request is missing a valid API key.")
        try:
            body = _camel(json.loads(raw))
        except ValueError:
            return _google_error(400, "Invalid JSON payload received.")
        problems, prompt = self._check(body)
        for i, content in enumerate(body.get("contents") or []):
            for part in content.get("parts") or [] if isinstance(content, dict) else []:
                if self.thought_signature and isinstance(part, dict) and "functionCall" in part \
                        and part.get("thoughtSignature") != self.thought_signature:
                    problems.append(f"Function call is missing a thought_signature in "
                                    f"functionCall parts (contents[{i}])")
        if problems:
            return _google_error(400, "; ".join(problems))
        mode = _mode(model)
        if mode == "401":
            return _google_error(401, f"API key {self.api_key} is not valid.")
        if mode == "403":
            return _google_error(403, "Permission denied: the API key cannot use this model.")
        if mode == "429":
            return _google_error(429, "Resource has been exhausted (e.g. check quota).", [
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7s"}])
        if mode == "429h":
            return _google_error(429, "Resource has been exhausted (e.g. check quota).",
                                 headers={"retry-after": "3"})
        if mode == "500":
            return _google_error(500, "An internal error has occurred.")
        if mode == "long":
            return _google_error(400, "The input token count (1200000) exceeds the maximum "
                                 "number of tokens allowed (1048576).")
        if mode == "echo":
            return _google_error(400, f"Invalid value near {self.api_key}")
        if mode == "slow":
            await asyncio.sleep(2)
        if mode == "trunc":
            return _truncated(self._answer(body, model, prompt))
        return self._answer(body, model, prompt)

    @staticmethod
    def _check(body: Any) -> tuple[list[str], str]:
        if not isinstance(body, dict):
            return ["Invalid JSON payload received: not an object"], ""
        problems = [f'Invalid JSON payload received. Unknown name "{k}": Cannot find field.'
                    for k in body if k not in _TOP_FIELDS]
        problems += _gemini_tools(body)[0]
        prompt = ""
        contents = body.get("contents")
        if not isinstance(contents, list) or not contents:
            problems.append("contents is not specified")
            contents = []
        for i, content in enumerate(contents):
            role = content.get("role") if isinstance(content, dict) else None
            if role not in ("user", "model"):
                problems.append(f"contents[{i}].role: must be 'user' or 'model'")
            prompt += _parts_text(content, f"contents[{i}]", problems) + " "
        if contents and isinstance(contents[-1], dict) and contents[-1].get("role") == "model":
            problems.append("Please ensure that the conversation ends with a user turn.")
        if "systemInstruction" in body:
            prompt += _parts_text(body["systemInstruction"], "systemInstruction", problems)
        config = body.get("generationConfig", {})
        if not isinstance(config, dict):
            problems.append("generationConfig: must be an object")
            config = {}
        problems += [f'Invalid JSON payload received. Unknown name "{k}" at '
                     f"'generation_config': Cannot find field." for k in config
                     if k not in _GEN_CONFIG_FIELDS]
        if "maxOutputTokens" in config and not isinstance(config["maxOutputTokens"], int):
            problems.append("generationConfig.maxOutputTokens: must be an integer")
        thinking = config.get("thinkingConfig")
        if thinking is not None and not (
            isinstance(thinking, dict)
            and set(thinking) <= {"thinkingBudget", "includeThoughts", "thinkingLevel"}
            and isinstance(thinking.get("thinkingBudget", 0), int)
        ):
            problems.append("generationConfig.thinkingConfig: unexpected shape")
        return problems, prompt

    def _answer(self, body: dict[str, Any], model: str, prompt: str) -> JSONResponse:
        config = body.get("generationConfig", {})
        text, finish = self.reply, "STOP"
        for seq in config.get("stopSequences") or []:
            if seq in text:
                text = text[: text.index(seq)]
        limit = config.get("maxOutputTokens")
        if isinstance(limit, int) and _words(text) > limit:
            text, finish = " ".join(text.split()[:limit]), "MAX_TOKENS"
        thinking = config.get("thinkingConfig") or {}
        budget = thinking.get("thinkingBudget", -1 if thinking else 0)
        thoughts_tokens = 0 if budget == 0 else 12
        parts: list[dict[str, Any]] = []
        if thoughts_tokens and (thinking.get("includeThoughts") or self.thought_parts):
            parts.append({"text": "**Thinking** about the question first.", "thought": True})
        last = body["contents"][-1]["parts"]
        answers = [p["functionResponse"] for p in last if "functionResponse" in p]
        names = _gemini_tools(body)[1]
        calling = (body.get("toolConfig") or {}).get("functionCallingConfig") or {}
        if answers:
            text = "Tool said: " + " | ".join(json.dumps(a["response"]) for a in answers)
        elif names and calling.get("mode") != "NONE":
            name = (calling.get("allowedFunctionNames") or names)[0]
            call: dict[str, Any] = {"functionCall": {"name": name, "args": self.tool_input}}
            if self.thought_signature:
                call["thoughtSignature"] = self.thought_signature
            parts.append(call)
            text = ""
        if text:
            parts.append({"text": text})
        usage = {"promptTokenCount": _words(prompt), "candidatesTokenCount": _words(text),
                 "totalTokenCount": _words(prompt) + _words(text) + thoughts_tokens}
        if thoughts_tokens:
            usage["thoughtsTokenCount"] = thoughts_tokens
        return JSONResponse({
            "candidates": [{"content": {"role": "model", "parts": parts},
                            "finishReason": finish, "index": 0}],
            "usageMetadata": usage,
            "modelVersion": model,
            "responseId": f"resp-{uuid.uuid4().hex[:16]}",
        })
