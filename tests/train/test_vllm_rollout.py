"""Server-mode grammar-held rollouts: rows grouped by grammar, one request each, put back in
order. (`make vllm-check` runs the same request against a real vLLM server, and trains with
colocated vLLM.)"""

from __future__ import annotations

import threading
from types import SimpleNamespace

from podium.train.grpo import vllm_sampling
from podium.train.rollout.vllm import by_grammar, request_all


class RecordingServer:
    """Answers like TRL's VLLMClient.generate: one completion per prompt, here the prompt's
    first id and the grammar's length, so the test can tell which request made which row."""

    def __init__(self) -> None:
        self.calls: list[dict] = []
        self.threads: set[int] = set()

    def generate(self, prompts, n, generation_kwargs, **fields):
        self.calls.append({"prompts": prompts, "n": n, **fields, **generation_kwargs})
        self.threads.add(threading.get_ident())
        grammar = generation_kwargs["structured_outputs"]["grammar"]
        return {"completion_ids": [[p[0], len(grammar)] for p in prompts],
                "logprobs": [[[-0.5], [-0.25]] for _ in prompts]}


BASE = {"n": 1, "repetition_penalty": 1.0, "temperature": 0.9, "top_p": 1.0, "top_k": 0,
        "min_p": 0.0, "max_tokens": 96, "logprobs": 0, "seed": 7}


def test_one_request_per_distinct_grammar_and_every_row_back_in_its_place():
    grammars = ["g-aa", "g-b", "g-aa", "g-cccc", "g-b"]
    server = RecordingServer()
    completions, logprobs = request_all(server, BASE, [[10], [11], [12], [13], [14]], grammars)
    assert sorted(c["structured_outputs"]["grammar"] for c in server.calls) == [
        "g-aa", "g-b", "g-cccc"]
    assert completions == [[10, 4], [11, 3], [12, 4], [13, 6], [14, 3]]
    assert logprobs == [[-0.5, -0.25]] * 5  # the sampled token's, one per token
    by = {c["structured_outputs"]["grammar"]: c for c in server.calls}
    assert by["g-aa"]["prompts"] == [[10], [12]]
    assert all(c["temperature"] == 0.9 and c["max_tokens"] == 96 and c["seed"] == 7
               and c["logprobs"] == 0 for c in server.calls)


def test_rows_that_share_a_grammar_are_one_request():
    server = RecordingServer()
    request_all(server, BASE, [[1], [2], [3], [4]], ["g"] * 4)
    assert len(server.calls) == 1 and server.calls[0]["prompts"] == [[1], [2], [3], [4]]
    assert by_grammar(["b", "a", "b"]) == {"b": [0, 2], "a": [1]}


def test_no_logprobs_from_the_server_is_none_for_every_row():
    class NoLogprobs(RecordingServer):
        def generate(self, **kw):
            return {**super().generate(**kw), "logprobs": None}

    completions, logprobs = request_all(NoLogprobs(), BASE, [[1], [2]], ["a", "b"])
    assert completions == [[1, 1], [2, 1]] and logprobs is None


def test_the_sampling_is_trls_with_its_extra_fields_but_never_its_batch_pattern():
    gen = SimpleNamespace(repetition_penalty=1.1, temperature=0.7, top_p=0.9, top_k=5,
                          min_p=None, max_completion_length=64, logprobs=0,
                          generation_kwargs={"seed": 3, "structured_outputs": {"regex": "x"}})
    assert vllm_sampling(gen) == {"n": 1, "repetition_penalty": 1.1, "temperature": 0.7,
                             "top_p": 0.9, "top_k": 5, "min_p": 0.0, "max_tokens": 64,
                             "logprobs": 0, "seed": 3}
