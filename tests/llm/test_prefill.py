"""`prefill`: how an OpenAI-compatible server is asked to continue a trailing assistant message.

The request body for each value (`message`, `continue`, `completions`), the mode each reports,
the fields on the wire, the client-side chat template (`chat_template`: inline, Jinja file,
tokenizer_config.json, GGUF) and the response-cache key. The real continuation on a real server
is tested in tests/integration/test_prefill_continuation.py.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from podium.config import pool_from_dict
from podium.llm.cache import cache_key
from podium.llm.chat_template import ChatTemplate, gguf_metadata, load_chat_template
from podium.llm.openai_compat import OpenAICompatClient

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
          "{% if enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}"
          "{% endif %}")
ASK = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Count to 5."}]
PREFILLED = [*ASK, {"role": "assistant", "content": "1, 2,"}]
RENDERED = ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nCount to 5.<|im_end|>\n"
            "<|im_start|>assistant\n1, 2,")


def spec(**kw):
    entry = {"name": "w", "backend": "openai", "model": "m", "base_url": "http://127.0.0.1:9/v1",
             "temperature": 0.0, "max_tokens": 16, **kw}
    return pool_from_dict({"conductor": {"backend": "embedded"}, "workers": [entry]}).workers[0]


def request(messages, grammar=None, **kw):
    client = OpenAICompatClient(spec(**kw))
    return client._request(messages, grammar), client._prefill_mode(messages)


def test_message_sends_the_prefill_as_an_ordinary_message():
    body, mode = request(PREFILLED)
    assert body["messages"] == PREFILLED and mode == "as_message"
    assert not {"continue_final_message", "add_generation_prompt", "prompt"} & body.keys()
    assert request(PREFILLED, extra_body={"continue_final_message": True})[1] == "continued"


def test_continue_adds_the_vllm_fields_only_after_a_prefill():
    body, mode = request(PREFILLED, prefill="continue", thinking=False)
    assert body["messages"] == PREFILLED and mode == "continued"
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    body, mode = request(ASK, prefill="continue")
    assert mode == "none" and body["messages"] == ASK
    assert not {"continue_final_message", "add_generation_prompt"} & body.keys()


def test_completions_renders_the_template_and_continues_the_prefill():
    body, mode = request(PREFILLED, 'root ::= "3"', prefill="completions",
                         chat_template=CHATML, grammar_style="llama_cpp", stop=["\n\n"],
                         extra_body={"top_k": 1})
    assert mode == "continued" and "messages" not in body
    assert body["prompt"] == RENDERED  # ends with the prefill: no end of turn, no new turn
    assert body["grammar"] == 'root ::= "3"' and body["top_k"] == 1
    assert body["stop"] == ["\n\n"] and body["max_tokens"] == 16 and body["model"] == "m"
    # template variables are rendered here, not sent
    body, _ = request(PREFILLED, prefill="completions", chat_template=CHATML, thinking=False)
    assert body["prompt"] == RENDERED.replace("assistant\n1, 2,", "assistant\n<think></think>1, 2,")
    assert "chat_template_kwargs" not in body
    # without a prefill it is an ordinary chat request
    body, mode = request(ASK, prefill="completions", chat_template=CHATML)
    assert mode == "none" and body["messages"] == ASK and "prompt" not in body


def test_completions_stops_at_the_templates_end_of_turn(tmp_path):
    config = tmp_path / "tokenizer_config.json"
    config.write_text(json.dumps({"chat_template": CHATML, "bos_token": "<s>",
                                  "eos_token": {"content": "<|im_end|>", "lstrip": False}}))
    body, _ = request(PREFILLED, prefill="completions", chat_template=str(config), stop=["X"])
    assert body["prompt"] == RENDERED and body["stop"] == ["X", "<|im_end|>"]


def test_continue_fields_reach_the_server():
    from podium.testing import ScriptedServer

    with ScriptedServer(latency=0.0) as server:
        client = OpenAICompatClient(spec(base_url=server.base_url, prefill="continue"))

        async def go():
            first = await client.chat(PREFILLED)
            second = await client.chat(ASK)
            await client.aclose()
            return first, second

        first, second = asyncio.run(go())
        sent = [e["params"] for e in server.stats()["log"]]
    assert (first.prefill, second.prefill) == ("continued", "none")
    assert sent[0]["continue_final_message"] is True and sent[0]["add_generation_prompt"] is False
    assert "continue_final_message" not in sent[1] and "add_generation_prompt" not in sent[1]


def test_chat_template_sources(tmp_path):
    jinja = tmp_path / "t.jinja"
    jinja.write_text(CHATML)
    named = tmp_path / "tokenizer_config.json"
    named.write_text(json.dumps({"chat_template": [{"name": "tool_use", "template": "x"},
                                                   {"name": "default", "template": CHATML}]}))
    for source in (CHATML, str(jinja), str(named)):
        assert load_chat_template(source).render(PREFILLED) == RENDERED
    # no prefill: the prompt opens an assistant turn
    assert ChatTemplate(CHATML).render(ASK) == RENDERED.removesuffix("1, 2,")


def test_gguf_template_matches_the_embedded_rendering(gguf_path):
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    template = load_chat_template(str(gguf_path))
    meta = gguf_metadata(gguf_path)
    assert template.text == meta["tokenizer.chat_template"] and template.eos_token
    reference = Jinja2ChatFormatter(template=template.text, eos_token=template.eos_token,
                                    bos_token=template.bos_token)
    assert template.render(PREFILLED) == reference(messages=ASK).prompt + "1, 2,"


def test_cache_key_follows_the_prefill_setting():
    base = cache_key(spec(), PREFILLED, grammar=None, sample_id=0)
    assert cache_key(spec(prefill="message"), PREFILLED, grammar=None, sample_id=0) == base
    keys = {cache_key(spec(prefill="continue"), PREFILLED, grammar=None, sample_id=0),
            cache_key(spec(prefill="completions", chat_template=CHATML), PREFILLED, grammar=None,
                      sample_id=0)}
    assert len(keys) == 2 and base not in keys


@pytest.mark.parametrize(
    ("entry", "needle"),
    [
        ({"prefill": "continue_final_message"}, "is not a prefill mode; use one of message, "
         "continue, completions"),
        ({"prefill": "completions"}, "has no chat_template"),
        ({"prefill": "completions", "chat_template": "/no/such/model.gguf"},
         "neither Jinja text nor an existing file"),
        ({"chat_template": CHATML}, "only with prefill = \"completions\""),
        ({"backend": "embedded", "prefill": "continue"}, "only an 'openai' backend takes"),
    ],
)
def test_bad_prefill_settings_name_the_fix(entry, needle):
    from podium.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        spec(**entry)
    assert needle in str(err.value)
