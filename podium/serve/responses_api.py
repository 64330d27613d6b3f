"""The Responses API wire format (`POST /v1/responses`): text in, text out, streamed events.

Enough of OpenAI's newer API for clients that speak only it: `input` is a string or a list of
messages (`{"role", "content"}` with a string or `input_text` / `output_text` parts, with or
without `"type": "message"`), `instructions` is a system message before them, and the
conversation becomes one question exactly as for chat completions (`protocol.question_of`).
podium's per-request options (`workers`, `recursion`, `max_calls`, `max_cost`,
`return_trace_id`) are read the same way, from the top level (`extra_body`) or `metadata`.
Tools, `previous_response_id`, `store: true` (no Response is kept to fetch again; the trace is)
and non-text input are refused with a 400 naming the field.

The response holds one `message` output item with one `output_text` part (the team's answer,
as the pipeline gives it; `response.output_text` in the openai client), `usage` as
`input_tokens` / `output_tokens` / `total_tokens` over every call the run made, and the same
`podium` field as chat completions.

Streaming sends the standard events, each with its `sequence_number`:

    response.created, response.in_progress
    response.output_item.added            a `reasoning` item (output 0)
    response.reasoning_text.delta  ...    the progress lines (workflow, steps), one per event
    response.reasoning_text.done, response.output_item.done
    response.output_item.added            the `message` item (output 1)
    response.content_part.added
    response.output_text.delta     ...    the answer, as the worker writing it produces it
    response.output_text.done, response.content_part.done, response.output_item.done
    response.completed                    the whole response, usage included

The reasoning item closes when the answer begins (progress after that is in the trace only).
Where the answer's worker cannot stream (or its reply is cached) the answer comes whole once
its step is done, in pieces. A run without an answer ends the stream with an `error` event
(and `response.failed`). A
client that reads only `response.output_text.delta` gets a clean answer.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

from pydantic import Field, StrictBool, StrictInt, ValidationError

from podium.llm.base import Sampling
from podium.serve.chat_completions import answer_pieces, podium_json
from podium.serve.errors import ApiError, bad_request
from podium.serve.protocol import (
    ChatMessage,
    Options,
    SampledRequest,
    options_of,
    question_of,
    refuse_unhonoured,
    sampling,
    validated,
    validation_error,
)
from podium.serve.runs import CLIENT_GONE, Run, finished, replaced_answer, rest_of, run_events
from podium.workflow.execute import AnswerText

TEXT_TYPES = ("input_text", "output_text", "text")


class ResponsesRequest(SampledRequest):
    model: str
    input: str | list[Any]
    instructions: str | None = None
    stream: StrictBool = False
    max_output_tokens: StrictInt | None = Field(None, gt=0)
    metadata: dict[str, Any] | None = None

    def sampling(self) -> Sampling | None:
        """temperature, top_p and max_output_tokens, for the answer step (see
        podium.serve.protocol)."""
        refuse_unhonoured(self)
        return sampling(self.temperature, self.top_p, None, (), self.max_output_tokens)


def parse_responses_body(raw: bytes) -> tuple[ResponsesRequest, Options, list[ChatMessage]]:
    """The request, its podium options and its conversation as chat messages (or a 400)."""
    req, data = validated(raw, ResponsesRequest)
    for key in ("tools", "tool_choice", "previous_response_id", "conversation", "prompt"):
        if data.get(key) not in (None, [], "none", "auto"):
            raise bad_request(f"'{key}' is not supported by the podium model: it answers the "
                              "conversation it is sent with text. Leave it out.", param=key,
                              code="unsupported_parameter")
    if data.get("store") not in (None, False):
        raise bad_request("'store' can only be false for the podium model: it keeps no "
                          "Response objects to fetch again (GET /v1/responses/{id}). Its "
                          "trace is kept instead: pass return_trace_id and read GET "
                          "/v1/traces/{id}. Leave 'store' out or set it to false.",
                          param="store", code="unsupported_value")
    return req, options_of(data, req.metadata or {}), _messages(req)


def _messages(req: ResponsesRequest) -> list[ChatMessage]:
    messages = [ChatMessage(role="system", content=req.instructions)] if req.instructions \
        else []
    if isinstance(req.input, str):
        return [*messages, ChatMessage(role="user", content=req.input)]
    if not req.input:
        raise bad_request("input is empty. Send the question as a string, or a list of "
                          "messages ending with the user's.", param="input")
    for i, item in enumerate(req.input):
        where = f"input.{i}"
        if not isinstance(item, dict) or item.get("type", "message") != "message" \
                or "role" not in item:
            kind = item.get("type") if isinstance(item, dict) else type(item).__name__
            raise bad_request(f"{where} is a {kind!r} item; the podium model reads messages "
                              '({"role": "user", "content": "..."}) only.', param=where)
        content = item.get("content")
        if isinstance(content, list):
            parts = []
            for j, part in enumerate(content):
                if not isinstance(part, dict) or part.get("type") not in TEXT_TYPES:
                    kind = part.get("type") if isinstance(part, dict) else part
                    raise bad_request(f"Content part of type {kind!r} is not supported: the "
                                      "team reads text only (input_text parts or a string).",
                                      param=f"{where}.content.{j}.type")
                parts.append({"type": "text", "text": str(part.get("text") or "")})
            content = parts
        try:
            messages.append(ChatMessage(role=item["role"], content=content))
        except ValidationError as exc:
            raise validation_error(exc, prefix=f"{where}.") from None
    return messages


def question(messages: list[ChatMessage]) -> str:
    try:
        return question_of(messages)
    except ApiError as exc:  # name the Responses field, not the chat one
        exc.param = (exc.param or "").replace("messages", "input", 1) or None
        raise


def usage_json(result) -> dict[str, Any]:
    used = result.outcome.used
    return {"input_tokens": used.prompt_tokens, "output_tokens": used.completion_tokens,
            "total_tokens": used.total_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0}}


def new_ids() -> tuple[str, str, str]:
    """(response id, reasoning item id, message item id)."""
    hexa = uuid.uuid4().hex
    return f"resp_{hexa}", f"rs_{hexa}", f"msg_{hexa}"


def message_item(mid: str, text: str | None, status: str = "completed") -> dict[str, Any]:
    content = [] if text is None else [{"type": "output_text", "text": text,
                                        "annotations": []}]
    return {"type": "message", "id": mid, "status": status, "role": "assistant",
            "content": content}


def response_json(rid: str, created: int, model: str, req: ResponsesRequest, *,
                  status: str = "completed", output: list | None = None, result=None,
                  trace_id: str | None = None, error: dict | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": rid, "object": "response", "created_at": created, "status": status,
        "model": model, "output": output or [], "error": error, "incomplete_details": None,
        "instructions": req.instructions, "metadata": req.metadata or {},
        "max_output_tokens": req.max_output_tokens, "parallel_tool_calls": False,
        "temperature": req.temperature, "top_p": req.top_p, "tool_choice": "none", "tools": [],
        "usage": usage_json(result) if result is not None else None,
    }
    if result is not None:
        body["podium"] = podium_json(result)
    if trace_id:
        body["podium_trace_id"] = trace_id
    return body


class EventStream:
    """Numbers and frames the SSE events of one streamed response."""

    def __init__(self) -> None:
        self.sequence = 0

    def event(self, kind: str, **fields: Any) -> str:
        body = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return f"event: {kind}\ndata: {json.dumps(body, ensure_ascii=False)}\n\n"

    def open_answer(self, mid: str) -> list[str]:
        """The message item's opening events."""
        return [self.event("response.output_item.added", output_index=1,
                           item=message_item(mid, None, "in_progress")),
                self.event("response.content_part.added", item_id=mid, output_index=1,
                           content_index=0,
                           part={"type": "output_text", "text": "", "annotations": []})]

    def delta(self, mid: str, piece: str) -> str:
        return self.event("response.output_text.delta", item_id=mid, output_index=1,
                          content_index=0, delta=piece, logprobs=[])

    def close_answer(self, mid: str, text: str) -> list[str]:
        """The message item's closing events, with the whole answer."""
        return [self.event("response.output_text.done", item_id=mid, output_index=1,
                           content_index=0, text=text, logprobs=[]),
                self.event("response.content_part.done", item_id=mid, output_index=1,
                           content_index=0,
                           part={"type": "output_text", "text": text, "annotations": []}),
                self.event("response.output_item.done", output_index=1,
                           item=message_item(mid, text))]


async def stream(run: Run, req, ids: tuple[str, str, str], created: int,
                 tid: str | None) -> AsyncIterator[str]:
    """The Responses API's events for one run (this module's docstring lists them)."""
    rid, rsid, mid = ids
    ev = EventStream()

    def whole(status: str, **more) -> dict:
        return response_json(rid, created, req.model, req, status=status, trace_id=tid, **more)

    try:
        yield ev.event("response.created", response=whole("in_progress"))
        yield ev.event("response.in_progress", response=whole("in_progress"))
        yield ev.event("response.output_item.added", output_index=0,
                       item={"type": "reasoning", "id": rsid, "summary": [], "content": [],
                             "status": "in_progress"})
        lines: list[str] = []
        sent: str | None = None  # the answer's text streamed so far (None: not begun)
        reasoning: dict = {}

        def close_reasoning() -> list[str]:
            thought = "".join(lines)
            reasoning.update({"type": "reasoning", "id": rsid, "summary": [],
                              "status": "completed",
                              "content": [{"type": "reasoning_text", "text": thought}]})
            return [ev.event("response.reasoning_text.done", item_id=rsid, output_index=0,
                             content_index=0, text=thought),
                    ev.event("response.output_item.done", output_index=0, item=reasoning)]

        async for item in run_events(run):
            if item is None:
                yield ": keep-alive\n\n"
            elif isinstance(item, AnswerText):
                if sent is None:
                    sent = ""
                    for event in [*close_reasoning(), *ev.open_answer(mid)]:
                        yield event
                sent += item.text
                yield ev.delta(mid, item.text)
            else:
                lines.append(item)
                yield ev.event("response.reasoning_text.delta", item_id=rsid, output_index=0,
                               content_index=0, delta=item)
        if sent is None:
            for event in close_reasoning():
                yield event
        result, error = finished(run)
        rest = rest_of(result.answer, sent or "") if error is None else None
        if rest is None:  # the run failed, or its answer is not the text already sent
            body = (error if error is not None else replaced_answer()).body()["error"]
            output = [reasoning] + ([message_item(mid, sent, "incomplete")] if sent else [])
            yield ev.event("error", code=body["code"], message=body["message"],
                           param=body["param"])
            yield ev.event("response.failed", response=whole(
                "failed", output=output, result=result,
                error={"code": body["code"] or "server_error", "message": body["message"]}))
            return
        if sent is None:
            for event in ev.open_answer(mid):
                yield event
        if rest or not sent:
            for piece in answer_pieces(rest):
                yield ev.delta(mid, piece)
        for event in ev.close_answer(mid, result.answer):
            yield event
        yield ev.event("response.completed", response=whole(
            "completed", output=[reasoning, message_item(mid, result.answer)],
            result=result))
    finally:
        run.stop(CLIENT_GONE)  # when still running, the client went away: stop paying
