"""A prefill continued by a real server: `prefill = "completions"` on `python -m llama_cpp.server`.

That server's chat endpoint always closes a trailing assistant message and opens a new turn
(its request model has no continuation field and ignores unknown ones), so podium renders the
model's chat template itself and continues the prefill on /v1/completions. These tests would
fail if the server started a new turn: the count would restart, and the prompt would carry the
end-of-turn and new-turn tokens after the prefill.
"""

from __future__ import annotations

import asyncio
import json
import re
import urllib.request

from podium.conductor.parse import parse_workflow
from podium.config import pool_from_dict
from podium.llm.chat_template import load_chat_template
from podium.llm.openai_compat import OpenAICompatClient
from podium.pipeline import Pipeline

PREFILL = "Sure: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,"
COUNT = [{"role": "user", "content": "Count from 1 to 30, separated by commas."},
         {"role": "assistant", "content": PREFILL}]


def worker(base_url: str, **kw) -> dict:
    return {"name": "w", "backend": "openai", "model": "smollm2", "base_url": base_url,
            "temperature": 0.0, "seed": 7, "max_tokens": 24, **kw}


def chat(base_url: str, messages: list[dict], **kw):
    spec = pool_from_dict({"conductor": {"backend": "embedded"},
                           "workers": [worker(base_url, **kw)]}).workers[0]
    client = OpenAICompatClient(spec)

    async def go():
        try:
            return await client.chat(messages)
        finally:
            await client.aclose()

    return asyncio.run(go())


def count_tokens(base_url: str, text: str) -> int:
    """Tokens of `text` by the server's own tokenizer (llama_cpp.server's /extras/tokenize)."""
    req = urllib.request.Request(base_url.removesuffix("/v1") + "/extras/tokenize",
                                 data=json.dumps({"input": text}).encode(),
                                 headers={"Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(req, timeout=30) as resp:
        return len(json.load(resp)["tokens"])


def test_completions_prefill_is_continued(llama_server, gguf_path):
    resp = chat(llama_server, COUNT, prefill="completions", chat_template=str(gguf_path))
    assert resp.prefill == "continued" and resp.completion_tokens > 0
    # greedy decoding carries the count on from the prefill; a new assistant turn would
    # start over (a new answer begins at 1, or restates the question), never at 11
    numbers = [int(n) for n in re.findall(r"\d+", resp.text)]
    assert numbers[:2] == [11, 12], resp.text
    assert not resp.text.lstrip()[:1].isalpha()  # no new sentence ("Sure", "Here are", ...)


def test_the_server_saw_a_prompt_ending_with_the_prefill(llama_server, gguf_path):
    template = load_chat_template(str(gguf_path))
    prompt = template.render(COUNT)
    assert prompt.endswith("assistant\n" + PREFILL)
    continued = chat(llama_server, COUNT, prefill="completions", chat_template=str(gguf_path))
    assert continued.prompt_tokens == count_tokens(llama_server, prompt)
    # as an ordinary message the server closes the prefill and opens another turn after it
    as_message = chat(llama_server, COUNT)
    assert as_message.prefill == "as_message"
    assert as_message.prompt_tokens > continued.prompt_tokens


def test_conductor_continues_its_prefill_over_http(llama_server, gguf_path):
    common = {"backend": "openai", "model": "smollm2", "base_url": llama_server}
    pool = pool_from_dict({
        "conductor": {**common, "temperature": 0.0, "seed": 3, "max_tokens": 320,
                      "grammar_style": "llama_cpp", "constrained": True,
                      "prefill": "completions", "chat_template": str(gguf_path)},
        "workers": [{**common, "name": "precise", "temperature": 0.1, "max_tokens": 32},
                    {**common, "name": "creative", "temperature": 0.9, "max_tokens": 32}],
        # a short plan: the short few-shots, one line of reasoning (the grammar's bound)
        "run": {"max_steps": 2, "cache": False, "fewshots": "short", "max_reason_lines": 1,
                "max_reason_chars": 80},
    })

    async def go():
        async with Pipeline(pool) as pipe:
            return await pipe.ask("What is 6 times 7?")

    result = asyncio.run(go())
    turn = result.rounds[0].conductor
    assert turn.error is None and turn.to_json()["prefill"] == "continued"  # in the trace
    assert turn.messages[-1]["role"] == "assistant"  # the prompt ended with the prefill
    assert turn.parse_reason is None and not turn.fallback
    assert parse_workflow(turn.completion, num_workers=2) == turn.workflow
    assert all(s.status == "ok" for s in result.rounds[0].execution.steps)
