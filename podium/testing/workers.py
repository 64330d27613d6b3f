"""Exact function workers for tests and small training runs (`backend = "function"`).

`adder` solves "What is A + B?" (the overall task's first such question) and answers in
`<answer>` tags; `zero` always answers 0, in the same shape; `down` fails like an unreachable
endpoint; `slow` is `adder` one second late, `late` is `adder` `PODIUM_TEST_LATE_S` seconds
late (default 3: a workflow still in flight after a short training step); `one_step` is a
Conductor that sends every question to worker 0 alone, `one_step_async` the same as a coroutine (a sync function
runs in a thread for each call, a coroutine on the event loop: benchmarks/serve.py), and
`one_step_counted` the same reporting token usage as a model does.
Together they make a pool in which the worker choice decides the reward.
"""

from __future__ import annotations

import re

_SUM = re.compile(r"What is (-?\d+) \+ (-?\d+)\?")


def _task(messages: list[dict]) -> str:
    """The step's own task: its last user message (earlier turns of a conversation come
    before it)."""
    text = next(m["content"] for m in reversed(messages) if m["role"] == "user")
    start = text.find("<overall_task>")
    return text[start:] if start >= 0 else text


def adder(messages: list[dict]) -> str:
    match = _SUM.search(_task(messages))
    if match is None:
        return "I cannot find a sum to do. <answer>0</answer>"
    return f"<answer>{int(match[1]) + int(match[2])}</answer>"


def zero(messages: list[dict]) -> str:
    return "<answer>0</answer>"


def down(messages: list[dict]) -> str:
    """An endpoint that cannot be reached (a worker outage)."""
    from podium.errors import WorkerError

    raise WorkerError("down", "transport", "could not reach the endpoint (a test outage)")


def one_step(messages: list[dict]) -> str:
    """A Conductor that always sends the question to worker 0 alone."""
    return 'model_id = [0]\nsubtasks = ["Answer the question."]\naccess_list = [[]]'


async def one_step_async(messages: list[dict]) -> str:
    """`one_step` on the event loop: no thread, so no GIL hand-over per call."""
    return one_step(messages)


def one_step_counted(messages: list[dict]):
    """`one_step` reporting token usage as a model does (a token per 4 characters read,
    one per word written), for tests of token budgets."""
    from podium.llm.base import ChatResponse

    text = one_step(messages)
    read = sum(len(str(m.get("content") or "")) for m in messages) // 4
    return ChatResponse(text=text, prompt_tokens=read, completion_tokens=len(text.split()),
                        model="one_step_counted")


async def slow(messages: list[dict]) -> str:
    """`adder`, one second late (for tests of concurrency limits and graceful shutdown)."""
    import asyncio

    await asyncio.sleep(1.0)
    return adder(messages)


async def late(messages: list[dict]) -> str:
    """`adder`, `PODIUM_TEST_LATE_S` seconds late (default 3)."""
    import asyncio
    import os

    await asyncio.sleep(float(os.environ.get("PODIUM_TEST_LATE_S", "3")))
    return adder(messages)
