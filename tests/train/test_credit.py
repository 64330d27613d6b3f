"""Live-step credit: which tokens of a grammar-held completion stay in the loss."""

from __future__ import annotations

import pytest

from podium.train.credit import dead_steps, live_mask, step_spans, token_ends


def test_dead_steps_follow_the_access_lists():
    from podium.workflow.types import Workflow

    def dead(*access):
        return dead_steps(Workflow.of([(0, "Do it", a) for a in access]).dependencies())

    assert dead(()) == set()
    assert dead((), ()) == {0}  # the last step sees nothing: step 0 is dead
    assert dead((), "all") == set()
    assert dead((), (), "all") == set()  # "all" sees both
    assert dead((), "all", ()) == {0, 1}
    assert dead((), (), (), "all") == set()
    assert dead((), (), (1,)) == {0}  # seen through an index list: step 1 only
    assert dead((), (0,), (1,)) == set()  # step 0 through step 1


def test_step_spans_read_the_grammar_shape():
    text = '2, 0]\nsubtasks = ["Count it", "Add things"]\naccess_list = [[], "all"]'
    spans, dependencies = step_spans(text)
    assert dependencies == [(), (0,)]
    assert [[text[a:b] for a, b in step] for step in spans] == [
        ["2", '"Count it"', "[]"], ["0", '"Add things"', '"all"']]
    reasoned = 'reverse it\nmodel_id = [1]\nsubtasks = ["Reverse it"]\naccess_list = [[]]'
    spans, _ = step_spans(reasoned)
    assert [reasoned[a:b] for a, b in spans[0]] == ["1", '"Reverse it"', "[]"]
    assert step_spans("no lists here") is None
    assert step_spans('1, 2]\nsubtasks = ["One only"]\naccess_list = [[]]') is None


def test_the_mask_leaves_out_exactly_the_dead_step(tokenizer):
    text = '2, 0]\nsubtasks = ["Count letters", "Add numbers"]\naccess_list = [[], []]'
    ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    mask = live_mask(tokenizer, ids)
    assert len(mask) == len(ids)
    dropped = tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if not m])
    kept = tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m], skip_special_tokens=True)
    assert "2" in dropped and "Count" in dropped and "Count" not in kept
    assert "Add numbers" in kept and "0]" in kept and "access_list" in kept
    seen = text.replace("[[], []]", '[[], "all"]')  # now step 0 feeds the answer
    ids = tokenizer(seen, add_special_tokens=False)["input_ids"]
    assert live_mask(tokenizer, ids) == [1] * len(ids)
    ids = tokenizer("not a workflow", add_special_tokens=False)["input_ids"]
    assert live_mask(tokenizer, ids) == [1] * len(ids)  # unreadable: left whole


def test_plan_credit_also_leaves_out_every_subtask(tokenizer):
    text = '2, 0]\nsubtasks = ["Count letters", "Add numbers"]\naccess_list = [[], "all"]'
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    mask = live_mask(tokenizer, ids, 0)
    kept = tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m])
    assert "Count" not in kept and "numbers" not in kept
    assert kept.startswith("2, 0]") and 'access_list = [[], "all"]' in kept
    dead_step = text.replace('"all"]', "[]]")  # step 0 is dead: its id goes too
    ids = tokenizer(dead_step, add_special_tokens=False)["input_ids"]
    kept = tokenizer.decode([t for t, m in zip(ids, live_mask(tokenizer, ids, 0),
                                                  strict=True) if m])
    assert "2" not in kept and "Count" not in kept and "Add" not in kept and "0]" in kept


def test_a_subtask_weight_scales_only_the_live_subtasks(tokenizer):
    text = '2, 0]\nsubtasks = ["Count letters", "Add numbers"]\naccess_list = [[], []]'
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    mask = live_mask(tokenizer, ids, 0.25)
    by_weight = {w: tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m == w])
                 for w in set(mask)}
    assert set(by_weight) == {0, 0.25, 1}
    assert "Count" in by_weight[0] and "2" in by_weight[0]  # the dead first step
    assert "numbers" in by_weight[0.25] and "Count" not in by_weight[0.25]
    assert "0]" in by_weight[1] and "access_list" in by_weight[1]


@pytest.mark.parametrize(("mask_value", "moves"), [(0, False), (1, True), (0.5, True)])
def test_trl_leaves_masked_tokens_out_of_the_loss(tmp_path, monkeypatch, tokenizer, mask_value,
                                                  moves):
    """The contract credit = "live" relies on: an `env_mask` of 0 from the rollout function
    takes a token out of TRL's loss (all masked: nothing moves; none masked: the policy
    moves), and a fractional one (`subtask_weight`) is kept as a weight, not cast to 0. The
    policy is a tiny Llama with the bundled tokenizer: the contract is TRL's loss, not the
    model's."""
    import torch
    from datasets import Dataset
    from support import tiny_llama
    from trl import GRPOConfig, GRPOTrainer

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func: pinned TRL, as podium
    tok = tokenizer
    model = tiny_llama(tok)
    before = {k: v.clone() for k, v in model.state_dict().items()}

    def rollout(prompts, trainer):
        ids = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
        completions = [[tok.encode(str(i))[0], tok.eos_token_id] for i in range(len(prompts))]
        return {"prompt_ids": ids, "completion_ids": completions, "logprobs": None,
                "env_mask": [[mask_value] * len(c) for c in completions]}

    def reward(prompts, completions, **kwargs):
        return [float(i % 2) for i in range(len(completions))]

    args = GRPOConfig(output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=4,
                      num_generations=4, max_completion_length=4, learning_rate=1e-3,
                      beta=0.0, use_cpu=True, report_to="none", seed=0, save_strategy="no",
                      logging_steps=1)
    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=args,
                          train_dataset=Dataset.from_list([{"prompt": "Say a number."}] * 4),
                          processing_class=tok, rollout_func=rollout)
    trainer.train()
    moved = any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert moved is moves


@pytest.mark.parametrize("credit", ["live", "plan"])
def test_step_credit_needs_grammar_held_single_round_rollouts(credit):
    from podium.errors import ConfigError
    from podium.train.config import train_config_from_dict

    base = {"data": {"tasks": [{"name": "gsm8k"}]}}
    with pytest.raises(ConfigError, match="constrained = true"):
        train_config_from_dict({**base, "rollout": {"credit": credit}})
    with pytest.raises(ConfigError, match="recursion.fraction = 0"):
        train_config_from_dict({**base, "rollout": {"credit": credit, "constrained": True},
                                "recursion": {"fraction": 0.5}})
    ok = train_config_from_dict({**base, "rollout": {"credit": credit, "constrained": True}})
    assert ok.rollout.credit == credit


def test_a_subtask_weight_needs_live_credit():
    from podium.errors import ConfigError
    from podium.train.config import train_config_from_dict

    base = {"data": {"tasks": [{"name": "gsm8k"}]}}
    for credit in ("all", "plan"):
        with pytest.raises(ConfigError, match="rollout.credit = 'live'"):
            train_config_from_dict({**base, "rollout": {"credit": credit, "constrained": True,
                                                        "subtask_weight": 0.5}})
    ok = train_config_from_dict({**base, "rollout": {"credit": "live", "constrained": True,
                                                     "subtask_weight": 0.5}})
    assert ok.rollout.subtask_weight == 0.5


def every_prefix(tokenizer, ids):
    return [len(tokenizer.decode(ids[:k + 1], skip_special_tokens=True)) for k in range(len(ids))]


def test_token_ends_match_decoding_every_prefix(tokenizer):
    import random

    text = 'think… «so» ✓\nmodel_id = [1]\nsubtasks = ["Count 中文 letters 😀🎉 in café"]'
    ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    assert token_ends(tokenizer, ids) == every_prefix(tokenizer, ids)
    rng = random.Random(0)  # arbitrary ids: characters split across tokens, invalid bytes
    for _ in range(50):
        ids = [rng.randrange(tokenizer.vocab_size) for _ in range(24)]
        assert token_ends(tokenizer, ids) == every_prefix(tokenizer, ids)


def test_token_ends_fall_back_when_pieces_do_not_join_into_the_text(tokenizer):
    class LeadingSpaceDropped:  # as SentencePiece decoding drops a text's leading space
        def decode(self, ids, skip_special_tokens=False):
            return tokenizer.decode(ids, skip_special_tokens=skip_special_tokens).lstrip(" ")

    odd = LeadingSpaceDropped()
    ids = tokenizer("Add the numbers and say the sum", add_special_tokens=False)["input_ids"]
    assert token_ends(odd, ids) == every_prefix(odd, ids)
