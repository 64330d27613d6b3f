"""`[grpo] overlap` for real: a tiny Llama trains on fixed completions (`distributed_step.py`),
overlapped (with each `overlap_loss`) and synchronously, through `podium train`'s own build.

The maths: the batch the second update trains was generated while the first update had not
yet been taken (the overlapped runs keep two steps' batches in flight, `max_staleness = 2`),
so the log-probabilities the untrained policy gave it must enter its loss: as the ratio's
denominator ("clipped"), or as each token's importance weight beside a ratio taken around the
policy the update starts from ("decoupled"). Each RIGHT completion is an explored plan, whose
plan tokens its draw chose, not the policy: those are weighed as a synchronous step weighs them
(the ratio around the policy the update starts from, no weight). The tests recompute that
update's gradient by hand from the weights before each update and compare it with the
trainer's; the same computation on-policy (the ratio against the current policy, no weight),
or with the drawn tokens weighed like the sampled ones, gives another gradient, which the
trainer's must not be. The order: both runs train the same questions at
the same steps. A kill while a batch's workflows are in flight, then `--resume`: every step
is trained and logged once.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from distributed_step import RIGHT, WRONG, FixedRollout  # noqa: E402
from support import tiny_llama  # noqa: E402
from transformers import TrainerCallback  # noqa: E402

import podium.train.trainer as trainer_module  # noqa: E402
from podium.checkpoint import CARD  # noqa: E402
from podium.testing.recipe import sums_recipe  # noqa: E402
from podium.train.config import load_train_config  # noqa: E402
from podium.train.rollout.explore import drawn_tokens  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
GRPO = """max_steps = {steps}
questions_per_step = 1
generations = 4
max_completion_tokens = 32
learning_rate = 1e-2
lr_scheduler = "constant"
warmup_ratio = 0.0
max_grad_norm = 1e9
save_steps = {save}
overlap = {overlap}
overlap_loss = "{loss}"
overlap_weight_cap = 3.0"""
RUN = 'prompt = "compact"\nfewshots = "none"\nmax_steps = 1'


class Capture(TrainerCallback):
    """The weights before each update and the gradient of the second."""

    def __init__(self) -> None:
        self.weights: dict[int, dict] = {}
        self.grads: dict[str, torch.Tensor] = {}

    def on_step_begin(self, args, state, control, model=None, **kwargs):
        self.weights[state.global_step] = {k: v.detach().clone()
                                           for k, v in model.state_dict().items()}

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        if state.global_step == 1:
            self.grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()
                          if p.grad is not None}


def train(root: Path, tokenizer, overlap: bool, config: Path | None = None,
          resume: bool = False, loss: str = "clipped") -> tuple[Capture, dict[int, dict], Path]:
    """A 3-step run (or `config`'s, with `resume`); (its capture, the batch each update
    trained, its output folder)."""
    if not (root / "tiny").exists():
        tiny_llama(tokenizer).save_pretrained(root / "tiny")
        tokenizer.save_pretrained(root / "tiny")
    name = f"overlapped-{loss}" if overlap else "synchronous"
    # overlapped two updates deep: the batches of steps 2 and 3 are generated at step 1
    config = config or sums_recipe(
        root, 6, model=root / "tiny", out=root / name, name=f"{name}.toml",
        grpo=GRPO.format(steps=3, save=10, overlap=str(overlap).lower(), loss=loss)
        + ("\nmax_staleness = 2" if overlap else ""), run=RUN)
    capture, batches = Capture(), {}
    build = trainer_module.build

    def fixed(*args, **kwargs):
        job = build(*args, **kwargs)
        trainer = job.trainer
        trainer.rollout_func = FixedRollout([RIGHT, WRONG], trainer.processing_class,
                                            drawn=True)
        trainer.add_callback(capture)
        loss = trainer._compute_loss

        def kept(model, inputs):
            batches[trainer.state.global_step] = {k: v for k, v in inputs.items()}
            return loss(model, inputs)

        trainer._compute_loss = kept
        return job

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(trainer_module, "build", fixed)
        trainer_module.train(load_train_config(config), resume=resume)
    return capture, batches, root / name


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tokenizer):
    root = tmp_path_factory.mktemp("overlap")
    return (train(root, tokenizer, True), train(root, tokenizer, False), tokenizer,
            train(root, tokenizer, True, loss="decoupled"))


def logps(weights: dict, tokenizer, batch: dict, grad: bool = False):
    """The per-token log-probabilities of `batch`'s completions under `weights` (the model
    with them, for a backward pass)."""
    model = tiny_llama(tokenizer)
    model.load_state_dict(weights)
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
    width = batch["completion_ids"].size(1)
    with torch.set_grad_enabled(grad):
        logits = model(input_ids=ids, attention_mask=mask).logits[:, -width - 1:-1] / 1.0
        out = torch.log_softmax(logits.float(), -1).gather(
            -1, batch["completion_ids"].unsqueeze(-1)).squeeze(-1)
    return out, model


def drawn_in(batch: dict, tokenizer) -> torch.Tensor:
    """(rows, tokens): the tokens of `batch`'s completions an explored plan's draw chose (the
    RIGHT completions' plan tokens)."""
    out = torch.zeros_like(batch["completion_mask"], dtype=torch.bool)
    for i, row in enumerate(batch["completion_ids"]):
        ids = row[batch["completion_mask"][i].bool()].tolist()
        if tokenizer.decode(ids, skip_special_tokens=True) == RIGHT:
            out[i, :len(ids)] = torch.tensor(drawn_tokens(tokenizer, ids, False))
    return out


def hand_gradient(batch: dict, new, old, model, weight=None) -> dict[str, torch.Tensor]:
    """GRPO's clipped token-level (bnpo) loss of `batch`, by hand (each token's advantage
    times `weight` when given), and its gradient."""
    mask = batch["completion_mask"].float()
    advantages = batch["advantages"].unsqueeze(1) * (1.0 if weight is None else weight)
    ratio = torch.exp(new - old)
    per_token = -torch.min(ratio * advantages, torch.clamp(ratio, 0.8, 1.2) * advantages)
    ((per_token * mask).sum() / mask.sum()).backward()
    return {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


def test_the_second_update_takes_its_ratio_against_the_policy_that_generated_it(runs):
    """Clipped: the ratio is taken against the untrained policy's log-probabilities, but for
    the drawn tokens against the policy the update starts from."""
    (capture, batches, _), _, tokenizer, _ = runs
    batch = batches[1]  # the second update's batch, generated before the first update
    mask = batch["completion_mask"].bool()
    drawn = drawn_in(batch, tokenizer)
    assert (batch["advantages"] != 0).all() and drawn.any() and (mask & ~drawn).any()
    untrained, _ = logps(capture.weights[0], tokenizer, batch)
    new, model = logps(capture.weights[1], tokenizer, batch, grad=True)
    old = torch.where(drawn, new.detach(), untrained)
    torch.testing.assert_close(batch["old_per_token_logps"][mask], old[mask],
                               rtol=1e-4, atol=1e-5)
    assert not torch.allclose(new.detach()[mask], untrained[mask], atol=1e-3)  # it trained
    right = hand_gradient(batch, new, old, model)
    assert right.keys() == capture.grads.keys()
    for name, grad in right.items():
        torch.testing.assert_close(capture.grads[name], grad, rtol=1e-3, atol=1e-7, msg=name)
    for against in ("current", "untrained"):  # on-policy; the drawn tokens taken as sampled
        new, model = logps(capture.weights[1], tokenizer, batch, grad=True)
        wrong = hand_gradient(batch, new, new.detach() if against == "current" else untrained,
                              model)
        assert any(not torch.allclose(capture.grads[n], g, rtol=1e-3, atol=1e-7)
                   for n, g in wrong.items()), against


def steps(out: Path) -> list[dict]:
    return [m for m in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
            if "reward" in m]


def test_the_decoupled_second_update_weighs_each_token_by_the_generating_policy(runs):
    """Decoupled: the ratio is taken around the policy the update starts from (1 at the
    update's only pass), and each token's advantage is weighed by min(pi_start / pi_generating,
    3), but by 1 for a drawn token (kept as NaN); the weights of the sampled tokens are
    logged, 1 for the batch the untrained policy both generated and trains."""
    _, _, tokenizer, (capture, batches, out) = runs
    batch = batches[1]  # the second update's batch, generated before the first update
    mask = batch["completion_mask"].bool()
    drawn = drawn_in(batch, tokenizer)
    sampled = mask & ~drawn
    assert "old_per_token_logps" not in batch  # TRL's ratio: around the current policy
    untrained, _ = logps(capture.weights[0], tokenizer, batch)
    generating = batch["podium_generating_logps"]
    assert generating[drawn].isnan().all() and not generating[sampled].isnan().any()
    torch.testing.assert_close(generating[sampled], untrained[sampled], rtol=1e-4, atol=1e-5)
    new, model = logps(capture.weights[1], tokenizer, batch, grad=True)
    stale = torch.exp(new.detach() - untrained).clamp(max=3.0)
    weight = torch.where(drawn, 1.0, stale)
    assert not torch.allclose(weight[sampled], torch.ones_like(weight[sampled]), atol=1e-3)
    assert not torch.allclose(stale[drawn], torch.ones_like(stale[drawn]), atol=1e-3)
    right = hand_gradient(batch, new, new.detach(), model, weight)
    assert right.keys() == capture.grads.keys()
    for name, grad in right.items():  # (summed in another order: a few 1e-7s apart)
        torch.testing.assert_close(capture.grads[name], grad, rtol=1e-3, atol=1e-6, msg=name)
    # clipped; on-policy; the drawn tokens weighed like the sampled ones
    for old, w in ((untrained, None), (None, None), (None, stale)):
        new, model = logps(capture.weights[1], tokenizer, batch, grad=True)
        wrong = hand_gradient(batch, new, new.detach() if old is None else old, model, w)
        assert any(not torch.allclose(capture.grads[n], g, rtol=1e-3, atol=1e-6)
                   for n, g in wrong.items())
    logged = steps(out)
    assert logged[0]["podium/stale_weight_mean"] == pytest.approx(1.0, abs=1e-4)
    assert logged[1]["podium/stale_weight_mean"] == pytest.approx(
        float(weight[sampled].mean()), rel=1e-3)
    assert 0 <= logged[1]["podium/stale_weight_capped"] <= 1


def test_both_runs_train_the_same_questions_in_the_same_order_one_update_apart(runs):
    (_, overlapped, out), (_, synchronous, sync_out), _, _ = runs
    assert sorted(overlapped) == sorted(synchronous) == [0, 1, 2]
    for step in range(3):
        assert torch.equal(overlapped[step]["prompt_ids"], synchronous[step]["prompt_ids"])
        assert torch.equal(overlapped[step]["completion_ids"],
                           synchronous[step]["completion_ids"])
    assert "old_per_token_logps" not in synchronous[1]  # TRL's ratio: 1, on-policy
    a, b = steps(out), steps(sync_out)
    assert [m["podium/staleness"] for m in a] == [0, 1, 2]  # up to max_staleness old
    assert [m["podium/staleness"] for m in b] == [0, 0, 0]
    for m in a + b:
        assert {"time/step_s", "time/generation_s", "time/workers_wait_s", "time/training_s",
                "time/workers_s", "time/workers_hidden"} <= m.keys()
        assert 0 <= m["time/workers_hidden"] <= 1
        assert m["podium/correct"] == 0.5 and "completions/mean_length" in m
    assert all(m["time/workers_hidden"] == 0 for m in b)  # synchronous: nothing hidden
    assert a[-1]["time/generation_s"] == 0  # nothing is generated for a step past the last


def test_only_the_rows_generation_did_not_record_take_a_forward_pass(tmp_path, tokenizer):
    """A batch's sampled rows keep the log-probabilities recorded while sampling; the rows
    nothing recorded alone get them from a forward pass, the policy's own; the tokens an
    explored plan's draw chose are NaN (weighed as in a synchronous step), and a row the draw
    wrote whole (a plan and subtasks both held) takes no forward pass."""
    tiny_llama(tokenizer).save_pretrained(tmp_path / "tiny")
    tokenizer.save_pretrained(tmp_path / "tiny")
    config = sums_recipe(tmp_path, 6, model=tmp_path / "tiny", out=tmp_path / "out",
                         grpo=GRPO.format(steps=1, save=10, overlap="true", loss="clipped"),
                         run=RUN)
    job = trainer_module.build(load_train_config(config))
    try:
        trainer = job.trainer
        prompt = tokenizer("What is 2 + 5?")["input_ids"]
        completions = [tokenizer(text)["input_ids"] for text in (RIGHT, WRONG, RIGHT, RIGHT)]
        recorded = [[-1.0] * len(completions[0]), None, [-2.0] * len(completions[2]), None]
        plan = drawn_tokens(tokenizer, completions[0], False)
        assert any(plan) and not all(plan)
        drawn = [plan, None, None, [True] * len(completions[3])]
        forwarded = []
        forward = trainer._logps_now
        trainer._logps_now = lambda p, c: forwarded.append(c) or forward(p, c)
        old = trainer._generating_logps([prompt] * 4, completions, recorded, drawn)
        assert old[2] == recorded[2]  # kept as recorded
        assert [math.isnan(x) for x in old[0]] == plan  # the draw's tokens NaN, the rest kept
        assert [x for x, d in zip(old[0], plan, strict=True) if not d] == [
            -1.0] * plan.count(False)
        assert all(math.isnan(x) for x in old[3])  # written whole: no policy's choice in it
        assert forwarded == [[completions[1]]]  # one forward pass, of the row not recorded
        ids = torch.tensor([prompt + completions[1]])
        with torch.no_grad():
            logits = trainer.model(input_ids=ids).logits[0, len(prompt) - 1:-1]
        expected = torch.log_softmax(logits / trainer.temperature, -1).gather(
            -1, ids[0, len(prompt):].unsqueeze(-1)).squeeze(-1)
        torch.testing.assert_close(torch.tensor(old[1]), expected, rtol=1e-4, atol=1e-5)
    finally:
        job.close()


def test_overlap_is_refused_for_the_recursion_fine_tune():
    from podium.errors import ConfigError
    from podium.train.config import train_config_from_dict

    with pytest.raises(ConfigError, match="set grpo.overlap = false or recursion.fraction = 0"):
        train_config_from_dict({"data": {"tasks": [{"name": "gym"}]},
                                "grpo": {"overlap": True}, "recursion": {"fraction": 0.5}})


def test_a_kill_with_a_batch_in_flight_then_resume_trains_every_step_once(tmp_path, tokenizer):
    tiny_llama(tokenizer).save_pretrained(tmp_path / "tiny")
    tokenizer.save_pretrained(tmp_path / "tiny")
    out = tmp_path / "out"
    config = sums_recipe(tmp_path, 6, model=tmp_path / "tiny", out=out, adder="late",
                         grpo=GRPO.format(steps=4, save=1, overlap="true", loss="decoupled"),
                         run=RUN)
    (tmp_path / "completions.json").write_text(json.dumps([RIGHT, WRONG]))
    command = [sys.executable, str(HERE / "distributed_step.py"), str(config),
               str(tmp_path / "completions.json"), str(tmp_path / "grads")]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PODIUM_TEST_LATE_S": "2.5"}
    run = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    # checkpoint-2 is written right after step 2 trains; batch 3's workflows started at the
    # beginning of step 2 and take 2.5 s, so they are in flight when it is killed
    state = out / "checkpoint-2" / "trainer_state.json"
    deadline = time.monotonic() + 300
    while not state.exists() and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    run.kill()
    printed = run.communicate()[0]
    assert state.exists(), printed[-4000:]
    assert [m["step"] for m in steps(out)] == [1, 2]
    with pytest.MonkeyPatch.context() as mp:  # resumed here, the workers a little late
        mp.setenv("PODIUM_TEST_LATE_S", "0.5")
        _, trained, _ = train(tmp_path, tokenizer, True, config, resume=True)
    assert sorted(trained) == [2, 3]  # the steps after checkpoint-2, from its state
    logged = steps(out)
    assert [m["step"] for m in logged] == [1, 2, 3, 4]  # none lost, none twice
    assert [m["podium/staleness"] for m in logged] == [0, 1, 0, 1]  # batch 3 generated again
    transcripts = [json.loads(x)["step"] for x in
                   (out / "transcripts.jsonl").read_text().splitlines()]
    assert sorted(set(transcripts)) == [1, 2, 3, 4]
    assert transcripts == sorted(transcripts)
    card = json.loads((out / "final" / CARD).read_text())
    assert card["steps"] == 4


def test_generation_records_the_policys_own_log_probabilities_under_a_mask(tokenizer):
    """What transformers' generation records for a grammar-held rollout is what TRL's loss
    computes for its tokens: log softmax of the logits over the temperature, unmasked."""
    from transformers import LogitsProcessorList

    from podium.train.grpo import PolicyLogprobs

    model = tiny_llama(tokenizer, seed=3)
    allowed = torch.zeros(len(tokenizer), dtype=torch.bool)
    allowed[torch.randperm(len(tokenizer), generator=torch.Generator().manual_seed(0))[:500]] = 1

    def grammar(input_ids, scores):  # a mask, as a grammar's processor applies one
        return scores.masked_fill(~allowed, float("-inf"))

    prompt = torch.tensor([tokenizer("What is 2 + 5?")["input_ids"]] * 3)
    recorder = PolicyLogprobs(0.7)
    torch.manual_seed(0)
    out = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt),
                         do_sample=True, temperature=0.7, max_new_tokens=12, min_new_tokens=12,
                         logits_processor=LogitsProcessorList([recorder, grammar]),
                         pad_token_id=tokenizer.pad_token_id)
    recorded = recorder.finish(out)
    width = prompt.size(1)
    generated = out[:, width:]
    assert recorded.shape == generated.shape and allowed[generated].all()
    with torch.no_grad():
        logits = model(input_ids=out).logits[:, width - 1:-1] / 0.7
    expected = torch.log_softmax(logits, -1).gather(-1, generated.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(recorded, expected, rtol=1e-4, atol=1e-4)
    masked = torch.log_softmax(logits.masked_fill(~allowed, float("-inf")), -1)
    assert (masked.gather(-1, generated.unsqueeze(-1)).squeeze(-1) - expected).min() > 0.1
