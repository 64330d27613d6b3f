"""Completions with no advantage skipped in the loss: the cut on small tensors, and in the gym
recipe's trainer the same gradient as TRL's own loss over the whole micro-batch (its policy a
tiny Llama with the bundled tokenizer: the loss is the point, not the model)."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from podium.train.zero_advantage import active_rows, take_rows  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def batch(advantages: list[float], lengths: list[int], width: int = 6) -> dict:
    n = len(advantages)
    return {"prompt_ids": torch.arange(n * 3).view(n, 3), "prompt_mask": torch.ones(n, 3),
            "completion_ids": torch.arange(n * width).view(n, width) + 100,
            "completion_mask": torch.tensor([[1] * k + [0] * (width - k) for k in lengths]),
            "advantages": torch.tensor(advantages),
            "num_items_in_batch": torch.tensor(float(sum(lengths)))}


def test_the_rows_with_an_advantage_and_the_loss_factor():
    inputs = batch([0.0, 1.5, 0.0, -1.5], [6, 2, 5, 3])
    rows, scale = active_rows(inputs, "bnpo")
    assert rows["completion_ids"].tolist() == [[106, 107, 108], [118, 119, 120]]
    assert rows["completion_mask"].tolist() == [[1, 1, 0], [1, 1, 1]]  # padding cut
    assert rows["prompt_ids"].tolist() == [[3, 4, 5], [9, 10, 11]]  # prompts whole
    assert rows["num_items_in_batch"] is inputs["num_items_in_batch"]
    assert scale == pytest.approx(5 / 16)  # bnpo: a mean over the micro-batch's tokens
    assert active_rows(inputs, "grpo")[1] == active_rows(inputs, "dr_grpo")[1] == 0.5
    assert active_rows(inputs, "dapo")[1] == 1.0  # its count spans the generation batch
    inputs["tool_mask"] = torch.tensor([[1] * 6, [1, 0, 1, 1, 1, 1], [1] * 6, [1] * 6])
    rows, scale = active_rows(inputs, "bnpo")
    assert scale == pytest.approx(4 / 15)  # the tokens the loss counts
    assert rows["tool_mask"].tolist() == [[1, 0, 1], [1, 1, 1]]


def test_what_goes_to_the_loss_unchanged_and_what_has_nothing_to_learn():
    assert active_rows(batch([1.0, -1.0], [2, 3]), "bnpo") is None  # every row counts
    assert active_rows(batch([0.0, 0.0], [2, 3]), "bnpo") == (None, 0.0)
    images = {**batch([0.0, 1.0], [2, 3]), "pixel_values": torch.zeros(2, 3)}
    assert active_rows(images, "bnpo") is None  # unknown inputs: TRL's own loss
    per_token = {**batch([0.0, 1.0], [2, 3]), "advantages": torch.zeros(2, 6)}
    assert active_rows(per_token, "bnpo") is None
    one = take_rows(batch([0.0, 0.0], [2, 3]), torch.tensor([True, False]))
    assert one["completion_ids"].shape == (1, 2)


@pytest.fixture(scope="module")
def trainer(tmp_path_factory, tokenizer):
    pytest.importorskip("trl")
    from support import tiny_llama

    import podium.train.model as model_module
    from podium.train.config import load_train_config
    from podium.train.trainer import build

    out = tmp_path_factory.mktemp("idle")
    config = load_train_config(ROOT / "configs" / "train" / "gym-cpu.toml",
                               [f"output.dir='{out}'"])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(model_module, "load_policy", lambda *a, **k: (tiny_llama(tokenizer), tokenizer))
        plan = build(config)
    plan.trainer.model.train()
    plan.trainer.current_gradient_accumulation_steps = 3  # set by each training step
    yield plan.trainer
    plan.close()


def grads_of(trainer, compute, inputs) -> list:
    model = trainer.model
    model.zero_grad()
    compute(model, inputs).backward()
    return [p.grad.clone() if p.grad is not None else torch.zeros_like(p)
            for p in model.parameters()]


def test_the_gradient_is_the_one_trl_computes_over_every_row(trainer, tokenizer, monkeypatch):
    """The gym recipe's trainer, real prompts and completions of different lengths, two of
    five completions with no advantage: the loss runs over three rows, and every parameter's
    gradient matches TRL's own loss over all five, for the token-mean (the recipe's) and the
    per-completion losses. On CPU the LM head projects those rows' completion tokens alone
    (`grpo.completions_only_on_cpu`)."""
    import trl.trainer.utils as trl_utils
    from trl import GRPOTrainer

    texts = ["model_id = [0]", "model_id = [1, 2]\nsubtasks = [\"Add\", \"Sum\"]", "x",
             "model_id = [2]\nsubtasks = [\"Reverse it\"]", "[1]"]
    prompts = [tokenizer("Question: what is 2 + 2?")["input_ids"],
               tokenizer("Question: reverse 'abc'.")["input_ids"]] * 3
    completions = [tokenizer(t)["input_ids"] for t in texts]
    p_width, c_width = max(map(len, prompts)), max(map(len, completions))
    pad = tokenizer.pad_token_id
    inputs = {
        "prompt_ids": torch.tensor([[pad] * (p_width - len(p)) + p for p in prompts[:5]]),
        "prompt_mask": torch.tensor([[0] * (p_width - len(p)) + [1] * len(p)
                                     for p in prompts[:5]]),
        "completion_ids": torch.tensor([c + [pad] * (c_width - len(c)) for c in completions]),
        "completion_mask": torch.tensor([[1] * len(c) + [0] * (c_width - len(c))
                                         for c in completions]),
        "advantages": torch.tensor([0.0, 1.2, -0.7, 0.0, 0.4]),
        "num_items_in_batch": torch.tensor(float(sum(map(len, completions)))),
    }
    projected: list[int] = []  # the rows each projection through the LM head was given
    apply = trl_utils._ChunkedLogProbFunction.apply
    monkeypatch.setattr(trl_utils._ChunkedLogProbFunction, "apply",
                        lambda hidden, *a: projected.append(hidden.shape[0]) or apply(hidden, *a))
    seen = []
    hook = trainer.model.register_forward_pre_hook(
        lambda _m, args, kwargs: seen.append(kwargs["input_ids"].shape), with_kwargs=True)
    try:
        for loss_type in ("bnpo", "grpo"):
            trainer.loss_type = loss_type
            seen.clear()
            projected.clear()
            ours = grads_of(trainer, trainer._compute_loss, inputs)
            assert [s[0] for s in seen] == [3]  # the rows with an advantage, once
            assert projected == [sum(len(completions[i]) for i in (1, 2, 4))]
            theirs = grads_of(trainer, lambda m, x: GRPOTrainer._compute_loss(trainer, m, x),
                              inputs)
            assert any(bool(g.abs().sum() > 0) for g in theirs)
            for a, b in zip(ours, theirs, strict=True):
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)
        trainer.loss_type = "bnpo"
        idle = {**inputs, "advantages": torch.zeros(5)}
        logged = {k: list(v) for k, v in trainer._metrics["train"].items()}
        seen.clear()
        grads = grads_of(trainer, trainer._compute_loss, idle)
        assert [s[0] for s in seen] == [1]  # one row, times 0
        assert all(bool((g == 0).all()) for g in grads)
        assert {k: list(v) for k, v in trainer._metrics["train"].items()} == logged
    finally:
        hook.remove()
        trainer.loss_type = "bnpo"
