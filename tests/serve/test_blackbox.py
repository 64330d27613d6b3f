"""The paper's out-of-domain protocol end to end: `podium eval --system openai:URL[:MODEL]`
asks any OpenAI-compatible model the bare question, one call per item — here `podium serve`
itself (the whole team as one model), next to a single model served the same way (a real
llama.cpp server)."""

from __future__ import annotations

import json

import pytest
from serve_helpers import KEY, eval_blackbox

from podium.baselines import parse_blackbox
from podium.errors import ConfigError


@pytest.mark.parametrize(("spec", "expect"), [
    ("openai:http://127.0.0.1:8000/v1:podium", ("http://127.0.0.1:8000/v1", "podium")),
    ("openai:http://127.0.0.1:8000/v1", ("http://127.0.0.1:8000/v1", "podium")),
    ("openai:http://127.0.0.1:8000", ("http://127.0.0.1:8000", "podium")),
    ("openai:https://api.example.com/v1#gpt-x", ("https://api.example.com/v1", "gpt-x")),
    ("openai:http://h:9/v1/:m-1.5", ("http://h:9/v1", "m-1.5")),
    ("conductor", None),
])
def test_blackbox_specs(spec, expect):
    assert parse_blackbox(spec) == expect


def test_a_blackbox_spec_needs_a_url():
    with pytest.raises(ConfigError, match="http"):
        parse_blackbox("openai:localhost:8000")



def test_eval_asks_podium_serve_as_one_model(server, tmp_path):
    data = tmp_path / "sums.jsonl"
    data.write_text("".join(json.dumps({"question": f"What is {i} + {i + 1}?",
                                        "answer": str(2 * i + 1)}) + "\n" for i in range(3)))
    out = tmp_path / "served"
    proc = eval_blackbox(f"openai:{server.base}/v1:podium", data, out,
                         env={"PODIUM_SYSTEM_API_KEY": KEY})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["accuracy"] == 1.0 and summary["graded"] == 3  # the team's adder answered
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert all(r["used"]["calls"] == 1 for r in records)  # one call per question, a black box
    assert KEY not in (out / "meta.json").read_text()  # only the variable's name is recorded


def test_without_the_key_every_item_is_an_error_not_a_wrong_answer(server, tmp_path):
    data = tmp_path / "sums.jsonl"
    data.write_text(json.dumps({"question": "What is 1 + 2?", "answer": "3"}) + "\n")
    proc = eval_blackbox(f"openai:{server.base}/v1:podium", data, tmp_path / "o",
                         env={"PODIUM_SYSTEM_API_KEY": ""})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["errors"] == 1 and summary["graded"] == 0


def test_a_single_model_served_alone(llama_server, tmp_path):
    data = tmp_path / "sums.jsonl"
    data.write_text(json.dumps({"question": "What is 1 + 2?", "answer": "3"}) + "\n")
    out = tmp_path / "single"
    proc = eval_blackbox(f"openai:{llama_server}:smollm2", data, out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    record = json.loads((out / "results.jsonl").read_text().splitlines()[0])
    assert record["status"] == "ok" and record["used"]["calls"] == 1
