"""On CPU, TRL's fused LM head under `completions_only_on_cpu` projects only the positions
it scores, and gives the log-probabilities and gradients TRL's every-position scoring gives
(a tiny Llama with the bundled tokenizer's vocabulary)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

import trl.trainer.utils as trl_utils  # noqa: E402
from support import tiny_llama  # noqa: E402

from podium.train.grpo import completions_only_on_cpu  # noqa: E402


def scored(model, ids, mask, labels, monkeypatch) -> tuple[torch.Tensor, dict, list[int]]:
    """(per-token log-probabilities, every parameter's gradient, the rows each projection
    through the LM head was given)."""
    rows: list[int] = []
    apply = trl_utils._ChunkedLogProbFunction.apply

    def counted(hidden, *args):
        rows.append(hidden.shape[0])
        return apply(hidden, *args)

    monkeypatch.setattr(trl_utils._ChunkedLogProbFunction, "apply", counted)
    model.zero_grad()
    out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
    (out.log_probs * torch.linspace(0.5, 1.5, out.log_probs.numel()).view_as(out.log_probs)
     ).sum().backward()
    monkeypatch.undo()
    return (out.log_probs.detach(), {n: p.grad.clone() for n, p in model.named_parameters()},
            rows)


def test_only_the_completions_are_projected_and_nothing_else_changes(tokenizer, monkeypatch):
    model = tiny_llama(tokenizer)
    trl_utils.add_fused_lm_head(model)
    torch.manual_seed(0)
    ids = torch.randint(0, len(tokenizer), (3, 40))
    mask = torch.ones_like(ids)
    mask[0, :5] = 0  # a left-padded prompt
    mask[2, -4:] = 0  # a completion shorter than the longest
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :-12] = -100  # the last 12 positions are the completions
    every, every_grads, every_rows = scored(model, ids, mask, labels, monkeypatch)
    with completions_only_on_cpu():
        only, only_grads, only_rows = scored(model, ids, mask, labels, monkeypatch)
    assert every_rows == [3 * 39]  # TRL on CPU: every position after the first
    assert only_rows == [12 + 12 + 8]  # the positions with a label
    torch.testing.assert_close(only, every)
    for name, grad in every_grads.items():
        torch.testing.assert_close(only_grads[name], grad, msg=name)
    assert trl_utils._use_triton(torch.device("cpu")) is False  # put back as it was
