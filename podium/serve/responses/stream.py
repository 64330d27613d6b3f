"""The Responses API's stream of one run: the standard events, each with its `sequence_number`.

    response.created, response.in_progress
    response.output_item.added            a `reasoning` item (output 0)
    response.reasoning_text.delta  ...    the progress lines (workflow, steps), one per event
    response.reasoning_text.done, response.output_item.done
    response.output_item.added            the `message` item (output 1)
    response.content_part.added
    response.output_text.delta     ...    the answer, as the worker writing it produces it
    response.output_text.done, response.content_part.done, response.output_item.done
    response.output_item.added            a `function_call` item per tool call the answer
    response.function_call_arguments.delta    step made (after the message item, which is
    response.function_call_arguments.done     left out when the step wrote no text): its
    response.output_item.done                 whole arguments in one delta
    response.completed                    the whole response, usage included

The reasoning item closes when the answer begins (progress after that is in the trace only).
Where the answer's worker cannot stream (or its reply is cached) the answer comes whole once
its step is done, in pieces. A run without an answer ends the stream with an `error` event
(and `response.failed`). A client that reads only `response.output_text.delta` gets a clean
answer.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from podium.llm.tools import ToolCall
from podium.serve.inflight import CLIENT_GONE, InFlight, finished
from podium.serve.reply import KEEPALIVE, answer_pieces, replaced_answer, rest_of, run_events
from podium.serve.responses.reply import call_item, message_item, response_json
from podium.serve.responses.request import ResponsesRequest
from podium.workflow.execute import AnswerText


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

    def call(self, index: int, item: dict) -> list[str]:
        """A `function_call` item's events: added, its arguments (whole, in one delta),
        done."""
        fid, arguments = item["id"], item["arguments"]
        return [self.event("response.output_item.added", output_index=index,
                           item={**item, "arguments": "", "status": "in_progress"}),
                self.event("response.function_call_arguments.delta", item_id=fid,
                           output_index=index, delta=arguments),
                self.event("response.function_call_arguments.done", item_id=fid,
                           output_index=index, name=item["name"], arguments=arguments),
                self.event("response.output_item.done", output_index=index, item=item)]

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


async def stream(flight: InFlight, req: ResponsesRequest, ids: tuple[str, str, str],
                 created: int, tid: str | None,
                 seal: Callable[[Any], Sequence[ToolCall]] = lambda result: ()
                 ) -> AsyncIterator[str]:
    """The Responses API's events for one run (this module's docstring lists them); `seal`
    gives a finished run's tool calls, their ids sealed."""
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

        async for item in run_events(flight):
            if item is None:
                yield KEEPALIVE
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
        result, error = finished(flight)
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
        calls = seal(result)
        output = [reasoning]
        if sent is not None or result.answer or not calls:
            if sent is None:
                for event in ev.open_answer(mid):
                    yield event
            if rest or not sent:
                for piece in answer_pieces(rest):
                    yield ev.delta(mid, piece)
            for event in ev.close_answer(mid, result.answer):
                yield event
            output.append(message_item(mid, result.answer))
        for call in calls:
            made = call_item(call)
            for event in ev.call(len(output), made):
                yield event
            output.append(made)
        yield ev.event("response.completed", response=whole(
            "completed", output=output, result=result))
    finally:
        flight.stop(CLIENT_GONE)  # when still running, the client went away: stop paying
