"""Exploration rollouts: which plans are drawn, and which rollouts of a group draw them."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from podium.train.rollout.explore import count_skeletons, draw_skeletons, explored_indices
from podium.train.rollout.layout import pieces_of


def test_every_skeleton_is_drawn_once_before_any_repeats():
    assert count_skeletons(3, 2) == [3, 18]  # 3 one-step plans, 9 id pairs x [] or "all"
    drawn = draw_skeletons(random.Random(0), [2, 0, 1], 2, 21)
    assert len(set(drawn)) == 21
    assert all(1 <= len(ids) <= 2 and len(ids) == len(acc) and acc[0] == "[]"
               for ids, acc in drawn)
    assert ((2, 0), ("[]", "all")) in drawn and ((1,), ("[]",)) in drawn
    assert len(draw_skeletons(random.Random(0), [0], 1, 3)) == 3  # one plan only: repeats


def test_live_plans_leave_out_steps_the_answer_cannot_see():
    assert count_skeletons(3, 2, live=True) == [3, 9]  # the second step sees the first
    assert count_skeletons(2, 3, live=True) == [2, 4, 16]
    drawn = draw_skeletons(random.Random(0), [0, 1, 2], 2, 12, live=True)
    assert len(set(drawn)) == 12
    assert all(acc == ("[]",) or acc == ("[]", "all") for _, acc in drawn)
    assert ((2, 0), ("[]", "all")) in drawn
    three = draw_skeletons(random.Random(1), [0, 1], 3, 200, live=True)
    assert {acc[-1] for _, acc in three if len(acc) > 1} == {"all"}
    assert {acc[1] for _, acc in three if len(acc) == 3} == {"[]", "all"}  # a middle step: free


def test_skeletons_are_uniform_over_plans():
    rng = random.Random(1)
    lengths = Counter(len(draw_skeletons(rng, [0, 1, 2], 2, 1)[0][0]) for _ in range(4200))
    assert abs(lengths[1] / 4200 - 3 / 21) < 0.03  # a one-step plan is 3 of the 21
    again = draw_skeletons(random.Random(5), [0, 1, 2], 3, 6)
    assert again == draw_skeletons(random.Random(5), [0, 1, 2], 3, 6)  # seeded


def test_each_group_explores_its_share():
    prompts = ["a"] * 6 + ["b"] * 6
    assert explored_indices(pieces_of(prompts, 6), 0.5) == [[0, 1, 2], [6, 7, 8]]
    assert explored_indices(pieces_of(prompts, 6), 0.0) == [[], []]
    assert explored_indices(pieces_of(["a"] * 2, 2), 0.25) == [[0]]  # half a rollout rounds up
    # the second of two processes holding 3 rollouts each of one group of 6: its own piece
    assert explored_indices(pieces_of(["a"] * 3, 6, offset=3), 0.5) == [[0, 1]]


def test_exploring_needs_grammar_held_single_round_rollouts():
    from podium.errors import ConfigError
    from podium.train.config import train_config_from_dict

    base = {"data": {"tasks": [{"name": "gsm8k"}]}}
    with pytest.raises(ConfigError, match="constrained = true"):
        train_config_from_dict({**base, "rollout": {"explore": 0.5}})
    with pytest.raises(ConfigError, match="recursion.fraction = 0"):
        train_config_from_dict({**base, "rollout": {"explore": 0.5, "constrained": True},
                                "recursion": {"fraction": 0.5}})
    with pytest.raises(ConfigError, match="at least 1/8"):
        train_config_from_dict({**base, "rollout": {"explore": 0.05, "constrained": True},
                                "grpo": {"generations": 8}})
    for share in (1 / 8, 0.0625):  # a half rounds up: 0.0625 x 8 is one exploring rollout
        train_config_from_dict({**base, "rollout": {"explore": share, "constrained": True},
                                "grpo": {"generations": 8}})
    ok = train_config_from_dict({**base, "rollout": {"explore": 0.5, "constrained": True}})
    assert ok.rollout.explore == 0.5 and ok.rollout.explore_subtasks == "policy"
    # a rollout key under [grpo] is refused, naming where it is written
    with pytest.raises(ConfigError, match=r"grpo.explore is not a \[grpo\] key: write it as "
                                          r"rollout.explore \(in the \[rollout\] section\)"):
        train_config_from_dict({**base, "grpo": {"explore": 0.5, "constrained": True}})
    with pytest.raises(ConfigError, match="set rollout.explore"):
        train_config_from_dict({**base, "rollout": {"explore_subtasks": "question"}})


def test_a_drawn_plan_with_the_question_as_subtasks_is_written_as_its_grammar_admits(tokenizer):
    """With `explore_subtasks = "question"` and a prefill that opens the lists, a drawn plan's
    grammar admits one text: the rollout writes it (the tokenizer's split, the end token)
    instead of sampling it, and the real grammar, compiled for the real tokenizer, accepts
    exactly those tokens; a cut at the length limit drops the end token, as sampling would;
    the policy's own rollouts, and any rollout under a prompt that leaves reasoning free, are
    sampled."""
    from types import SimpleNamespace

    xgr = pytest.importorskip("xgrammar")
    from podium.conductor import grammar_for
    from podium.config import RunSettings
    from podium.train.rollout.constrained import ConstrainedRollout
    from podium.train.rollout.explore import question_subtask
    from podium.train.rollout.row import Row
    from podium.train.rollout.settings import RolloutSettings

    question = "Reverse the word 'eauog'.\nGive the final answer inside <answer></answer>."
    settings = RunSettings(prompt="compact-defined", max_steps=2, max_subtask_chars=72)
    rows = [Row([], question, "gym", "0", (0, 1, 2), prompt="P")]
    rollout = ConstrainedRollout(SimpleNamespace(settings=settings), tokenizer, rows,
                                 RolloutSettings(group=0, credit="live", explore=0.5,
                                                 explore_subtasks="question"))
    skeleton = ((2, 0), ("[]", "all"))
    written = rollout.written("P", skeleton, 128)
    assert written[-1] == tokenizer.eos_token_id
    held = question_subtask(question, 72)
    assert tokenizer.decode(written[:-1]) == (
        f'2, 0]\nsubtasks = ["{held}", "{held}"]\naccess_list = [[], "all"]')
    view = SimpleNamespace(shown_ids=[0, 1, 2])
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=len(tokenizer))
    matcher = xgr.GrammarMatcher(xgr.GrammarCompiler(info).compile_grammar(
        grammar_for(view, settings, False, skeleton, (held, held))))
    assert all(matcher.accept_token(t) for t in written) and matcher.is_terminated()
    assert rollout.written("P", skeleton, 5) == written[:5]
    assert rollout.written("P", None, 128) is None  # the policy's own: sampled
    free = RunSettings(prompt="compact-reason", max_steps=2, max_subtask_chars=72)
    rollout.grammars = SimpleNamespace(settings=free)
    assert rollout.written("P", skeleton, 128) is None  # reasoning first: sampled


def test_an_explored_rollout_says_which_tokens_its_draw_chose(tokenizer):
    """An explored rollout's plan (ids, access values, the lists around them, the end token)
    is its draw's; its subtask strings are the policy's, and a rollout of the policy's own
    has no drawn tokens at all (`drawn` None)."""
    from types import SimpleNamespace

    from podium.config import RunSettings
    from podium.train.rollout.constrained import ConstrainedRollout
    from podium.train.rollout.row import Row
    from podium.train.rollout.settings import RolloutSettings

    subtask = "Add them up"

    def text(skeleton) -> str:
        ids, access = skeleton if skeleton is not None else ((1,), ("[]",))
        return (", ".join(map(str, ids)) + "]\nsubtasks = ["
                + ", ".join([f'"{subtask}"'] * len(ids)) + "]\naccess_list = ["
                + ", ".join(access) + "]")

    def sample(prompt_ids, specs):  # the sampler, writing the plan each row's grammar holds
        made = [tokenizer(text(s.skeleton), add_special_tokens=False)["input_ids"]
                + [tokenizer.eos_token_id] for s in specs]
        return made, [[-0.5] * len(c) for c in made]

    settings = RunSettings(prompt="compact-defined", max_steps=2, max_subtask_chars=24)
    grammars = SimpleNamespace(settings=settings, shown_ids=lambda workers: [0, 1, 2],
                               fits=lambda workers, budget: None, held=lambda row: None,
                               processor=lambda specs: specs)
    rows = [Row([], "What is 2 + 5?", "gym", "0", prompt="P")]
    rollout = ConstrainedRollout(grammars, tokenizer, rows, RolloutSettings(
        group=8, credit="plan", explore=0.5))
    trl = SimpleNamespace(uses_vllm=False, max_completion_tokens=64, sample=sample)
    out = rollout(["P"] * 8, trl)
    assert out.drawn is not None and out.info is not None
    assert [d is not None for d in out.drawn] == [i.explored for i in out.info]
    assert sum(i.explored for i in out.info) == 4
    for ids, drawn in zip(out.completion_ids, out.drawn, strict=True):
        if drawn is None:
            continue
        steps = tokenizer.decode(ids, skip_special_tokens=True).count(subtask)
        mine = "".join(tokenizer.decode([t]) for t, d in zip(ids, drawn, strict=True) if not d)
        assert mine.strip() == "[" + ", ".join([f'"{subtask}"'] * steps) + "]"
        assert drawn[-1] and ids[-1] == tokenizer.eos_token_id


def test_reasoning_before_the_plan_is_the_policys_and_held_subtasks_are_the_draws(tokenizer):
    from podium.train.rollout.explore import drawn_tokens

    text = 'Think first.\nmodel_id = [2, 0]\nsubtasks = ["Reverse it", "Count them"]' \
           '\naccess_list = [[], "all"]'
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    for held in (False, True):
        drawn = drawn_tokens(tokenizer, ids, held)
        mine = "".join(tokenizer.decode([t]) for t, d in zip(ids, drawn, strict=True) if not d)
        assert mine.startswith("Think first.\nmodel_id = [")
        assert ("Reverse it" in mine) != held and ("Count them" in mine) != held
        assert "all" not in mine.removeprefix("Think first.\nmodel_id = [")
    cut = ids[:ids.index(tokenizer("Reverse", add_special_tokens=False)["input_ids"][0]) + 1]
    drawn = drawn_tokens(tokenizer, cut, False)  # cut inside its first subtask
    assert not drawn[-1] and drawn[cut.index(tokenizer("2", add_special_tokens=False)
                                               ["input_ids"][0])]
