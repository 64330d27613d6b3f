"""The small training recipe on sums and the free port that tests and scripts share."""

from __future__ import annotations

import json
import socket

from podium.config import load_pool
from podium.testing.ports import free_port
from podium.testing.recipe import sums_recipe
from podium.train.config import load_train_config


def test_the_recipe_is_a_training_config_on_its_pool_and_questions(tmp_path):
    config = sums_recipe(tmp_path / "run", 5, model=tmp_path / "tiny", zero="down",
                         run="""
                         prompt = "compact"
                         fewshots = "none"
                         """, grpo="""
                         max_steps = 3
                         generations = 4   # a comment stays a comment
                         """, output="transcripts_per_step = 1",
                         extra='[recursion]\nfraction = 0.5')
    loaded = load_train_config(config)
    assert (loaded.model.path, loaded.run.prompt) == (str(tmp_path / "tiny"), "compact")
    assert (loaded.grpo.max_steps, loaded.grpo.generations) == (3, 4)
    assert loaded.output.dir == str(tmp_path / "run" / "out")
    assert loaded.output.transcripts_per_step == 1
    assert loaded.recursion is not None and loaded.recursion.fraction == 0.5

    pool = load_pool(loaded.pool.file)
    assert [(w.name, w.function) for w in pool.workers] == [
        ("zero", "podium.testing.workers:down"), ("adder", "podium.testing.workers:adder")]
    assert pool.conductor.backend == "embedded" and not pool.run.cache
    rows = [json.loads(line) for line in (tmp_path / "run" / "sums.jsonl").read_text().splitlines()]
    assert rows[4] == {"question": "What is 4 + 7?", "answer": "11"} and len(rows) == 5


def test_a_recipe_without_a_model_leaves_the_default_policy(tmp_path):
    plain = load_train_config(sums_recipe(tmp_path, 2, run='prompt = "compact"',
                                          grpo="max_steps = 1", out=tmp_path / "elsewhere"))
    assert plain.model.path == load_train_config(
        sums_recipe(tmp_path, 2, run='prompt = "compact"', grpo="max_steps = 1",
                    name="other.toml")).model.path
    assert plain.output.dir == str(tmp_path / "elsewhere")


def test_free_port_is_a_port_nothing_listens_on():
    port = free_port()
    with socket.socket() as client:
        assert client.connect_ex(("127.0.0.1", port)) != 0
    with socket.socket() as server:  # and one a server can bind
        server.bind(("127.0.0.1", port))
