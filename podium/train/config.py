"""The training configuration: one TOML file, every field typed and documented.

    [model]
    path = "smollm2"                  # a Hugging Face model directory or hub name, or "smollm2"

    [pool]
    file = "configs/pools/local.toml" # the workers the rewards run on (default: embedded)

    [[data.tasks]]
    name = "gsm8k"                    # any registered task, or "jsonl:FILE"
    n = 240
    seed = 42

    [reward]
    scheme = "paper"                  # {0 format error, 0.5 wrong, 1 right}

    [grpo]
    max_steps = 200
    questions_per_step = 4
    generations = 64

    [rollout]
    constrained = true                # every rollout held to the workflow grammar

`[grpo]` holds TRL's keys (the optimiser, the step's shape, sampling, checkpoints), `[rollout]`
podium's rollout features (the grammar, loss credit, drawn plans) and `[vllm]` generation by
vLLM; a rollout or vLLM key written under [grpo] is refused with its place named (`MOVED`).
Unknown keys are rejected with the key named, and every number is held to a range (sizes and
counts to an upper bound a run can be built with, floats finite); `podium train --set grpo.learning_rate=1e-5`
overrides any field (the value is read as TOML, else as text). Defaults are the paper's recipe
(PAPER.md §8.2) where it gives one: lr 1e-6 with cosine decay and 3% warm-up, no KL, clip 0.2,
Adam eps 1e-8, token-level `bnpo` loss (D7, D8), temperature 1.0, completions of up to 1,024
tokens, the paper reward (D1) and infrastructure failures dropped from the loss (D9).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from podium.config import RunSettings
from podium.errors import ConfigError
from podium.files import file_in_the_way
from podium.train.rollout.explore import explored_count

# Upper bounds on what a step, a run and a rollout may be: each far past any recipe (the paper's
# step is 4 questions x 64 rollouts of 1,024 tokens, 200 steps), each refused by name beyond.
MAX_STEPS = 1_000_000
MAX_GROUP = 1024  # questions a step, rollouts a question
MAX_COMPLETIONS = 65_536  # rollouts a step (questions_per_step x generations)
MAX_COMPLETION_TOKENS = 131_072
MAX_SEED = 2**32 - 1  # numpy's, which the trainer seeds
MAX_COLLECTIVE_TIMEOUT_S = 7 * 24 * 3600
MAX_STALENESS = 8  # steps generated ahead of the one training (each holds a batch in memory)


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class ModelSection(_Section):
    path: str = Field("smollm2", description="The policy: a Hugging Face model directory, a hub "
                      "name, or 'smollm2' (the bundled SmolLM2-135M-Instruct GGUF, converted once "
                      "to a trainable directory under the podium cache).")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="Weights' dtype: auto = float32 on CPU, bfloat16 on GPU.")


class PoolSection(_Section):
    file: str | None = Field(None, description="Pool file (TOML) whose workers run every "
                             "rollout's workflow; none = the embedded default.")


class TaskSpec(_Section):
    name: str = Field(description="A registered task (gsm8k, math500, ...) or 'jsonl:FILE'.")
    n: int | None = Field(None, ge=1, description="Items drawn from the split (seeded); "
                          "none = all.")
    seed: int = Field(0, description="Seed of this task's sample (the paper: MMLU 42, MATH 44, "
                      "RLPR 45, LCB 46).")
    split: str = Field("train", description="Training split; the reference splits never overlap "
                       "the test split that evaluation uses.")
    options: dict[str, Any] = Field(default_factory=dict, description="Task options, as "
                                    "get_task takes them (e.g. data_dir, path).")


class DataSection(_Section):
    tasks: tuple[TaskSpec, ...] = Field(description="The training mix: one entry per task.")
    shuffle_seed: int = Field(47, description="Seed of the shuffle of the concatenated mix "
                              "(the paper: 47).")
    balance: bool = Field(False, description="Interleave the shuffled rows so that consecutive "
                          "questions come from different tasks (and gym families): with "
                          "questions_per_step = their number, every step sees one of each.")


class RewardSection(_Section):
    scheme: Literal["paper", "code"] = Field(
        "paper", description="paper: {0 format error, 0.5 wrong, 1 right}; code: {0, 0.5, 1.5} "
        "(the reference code, D1).")
    on_infra_failure: Literal["drop", "zero"] = Field(
        "drop", description="A rollout touched by a worker or infrastructure failure: drop = "
        "unscorable (out of its group's baseline, advantage 0; D9); zero = reward 0 (the "
        "reference code).")
    cost_weight: float = Field(0.0, ge=0, description="Beyond the paper: reward -= cost_weight "
                               "x cost / cost_scale, cost being the rollout's list-price USD.")
    cost_scale: float = Field(0.001, gt=0, description="The cost that one unit of cost_weight "
                              "stands for (USD).")
    extra_call_penalty: float = Field(
        0.0, ge=0, lt=0.5, description="Beyond the paper: a right answer scores right - "
        "extra_call_penalty x (worker calls - 1); wrong answers and format errors are not "
        "penalised, so a longer plan loses only to a shorter plan that is also right "
        "(docs/gym.md: it stops the first step of a two-step plan free-riding on one-step "
        "questions).")
    over_budget: Literal["wrong", "zero"] = Field(
        "wrong", description="Beyond the paper, with a [budget]: a plan whose list price passes "
        "the row's budget scores as a wrong answer (wrong) or as a format error (zero), "
        "whatever its answer.")


class SubpoolSection(_Section):
    fraction: float = Field(0.0, ge=0, le=1, description="Share of rows shown a random "
                            "sub-pool (PAPER.md §9); the rest see the whole pool.")
    k_min: int = Field(1, ge=1, description="Smallest sub-pool.")
    k_max: int | None = Field(None, ge=1, description="Largest sub-pool (none: the pool).")
    groups: dict[str, tuple[int, ...]] = Field(
        default_factory=dict, description="Named sub-pools by pool index (e.g. closed = "
        "[0, 1, 2]) drawn with probability group_prob.")
    group_prob: float = Field(0.0, ge=0, le=1, description="Chance a sampled sub-pool is one "
                              "of the named groups.")
    seed: int = Field(0, description="Seed of the sub-pool draws.")


class BudgetSection(_Section):
    """Budget-conditioned training (podium.conductor.budget): each row draws a budget, and optionally a
    perturbed price list, shown to the policy with `run.show_budget`; the reward scores a plan
    over it as `[reward] over_budget` says."""

    amounts: tuple[float, ...] = Field((), description="Budgets (USD) a row draws from, "
                                       "uniformly; empty with no range: no budgets.")
    range: tuple[float, float] | None = Field(None, description="Or: a budget drawn "
                                              "log-uniformly between these two amounts (USD).")
    price_scale: tuple[float, float] = Field((1.0, 1.0), description="Each row's price list is "
                                             "the pool's times a factor drawn log-uniformly in "
                                             "this range (1, 1: the pool's prices).")
    price_shuffle: float = Field(0.0, ge=0, le=1, description="Chance a row's prices are "
                                 "also permuted among the workers (so that prices are read, "
                                 "not remembered by id).")
    keep_order: tuple[tuple[str, str], ...] = Field(
        (), description="Pairs of workers (by name) that a shuffled price list never puts "
        "out of order: the first costs at most what the second costs (keeps a price order "
        "unseen, to test on later).")
    seed: int = Field(0, description="Seed of the draws.")

    @model_validator(mode="after")
    def _check(self) -> BudgetSection:
        if self.amounts and self.range:
            raise ValueError("budget: give amounts or range, not both")
        if any(a < 0 for a in self.amounts) or (self.range and not 0 < self.range[0]
                                                 <= self.range[1]):
            raise ValueError("budget: amounts must be 0 or more, and a range two amounts "
                             "0 < low <= high (USD)")
        if not 0 < self.price_scale[0] <= self.price_scale[1]:
            raise ValueError("budget.price_scale must be two factors 0 < low <= high")
        return self

    @property
    def on(self) -> bool:
        return bool(self.amounts or self.range)


class RecursionSection(_Section):
    fraction: float = Field(0.0, ge=0, le=0.5, description="Share of each group's rollouts that "
                            "continue a round-0 rollout of the same group into a recursion "
                            "round (PAPER.md §10: 0.5); 0 = no recursion fine-tune.")
    discount: float = Field(0.25, ge=0, le=1, description="A continued round-0 rollout scores "
                            "(1 - d) r0 + d r1 (D13: the paper's 0.25).")
    normalisation: Literal["joint", "per_round"] = Field(
        "joint", description="Advantages normalised over both rounds of a group together "
        "(D14, the reference default) or within each round.")


class GRPOSection(_Section):
    max_steps: int = Field(200, ge=1, le=MAX_STEPS, description="Optimizer steps (the paper: "
                           "200).")
    questions_per_step: int = Field(4, ge=1, le=MAX_GROUP, description="Questions per step (the "
                                    "paper: 4); questions_per_step x generations is at most "
                                    "65,536.")
    generations: int = Field(64, ge=2, le=MAX_GROUP, description="Rollouts per question (the "
                             "paper: 64).")
    per_device_batch: int | None = Field(None, ge=1, le=MAX_COMPLETIONS, description="Completions "
                                         "per forward/backward pass; none = generations "
                                         "(gradient accumulation fills the step).")
    processes: int | None = Field(None, ge=1, le=MAX_COMPLETIONS, description="Training processes the recipe is "
                                  "laid out for (all nodes together); a launch that starts "
                                  "another number is refused, and --dry-run lays it out. "
                                  "none = whatever the launch starts.")
    learning_rate: float = Field(1e-6, gt=0, le=1, description="Peak learning rate (the paper: 1e-6).")
    lr_scheduler: str = Field("cosine", description="transformers scheduler name.")
    warmup_ratio: float = Field(0.03, ge=0, le=1, description="Share of the steps spent "
                                "warming up the learning rate (the paper: 0.03).")
    warmup_steps: int | None = Field(None, ge=0, le=MAX_STEPS, description="Warm-up steps; set, it replaces "
                                     "warmup_ratio (for runs stopped by the clock, not by "
                                     "max_steps).")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay (the paper: 0).")
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient clipping norm.")
    adam_epsilon: float = Field(1e-8, gt=0, le=1, description="Adam's eps (D7: the paper's 0.2 is "
                                "the clip).")
    beta: float = Field(0.0, ge=0, description="KL coefficient; 0 loads no reference model.")
    epsilon: float = Field(0.2, gt=0, description="GRPO clip range (D7).")
    loss_type: Literal["bnpo", "grpo", "dr_grpo", "dapo"] = Field(
        "bnpo", description="Loss aggregation: bnpo = token level (the reference code, D8); "
        "grpo = per completion (the paper's eq. 1).")
    scale_rewards: Literal["group", "batch", "none"] = Field(
        "group", description="Divide advantages by the group's reward std (the paper), the "
        "batch's, or not at all.")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature of the rollouts.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling of the rollouts.")
    max_completion_tokens: int = Field(1024, ge=1, le=MAX_COMPLETION_TOKENS, description="Longest completion sampled "
                                       "(the paper: 1,024).")
    mask_truncated_completions: bool = Field(False, description="Leave completions cut at "
                                             "the length limit out of the loss.")
    entropy_coef: float = Field(0.0, ge=0, description="Entropy bonus (0: none).")
    seed: int = Field(42, ge=0, le=MAX_SEED, description="Seed of sampling and of the trainer.")
    save_steps: int = Field(20, ge=1, description="Checkpoint every N steps (and at the "
                            "last step): a run killed between two loses at most N-1 steps.")
    save_total_limit: int | None = Field(1, ge=1, description="Keep only the newest N "
                                         "checkpoint-N folders, each resumable (weights and "
                                         "optimizer state: 1.6 GB for the 135M policy, "
                                         "~100 GB for a ZeRO-3 7B); --resume needs only the "
                                         "newest complete one. none: keep all. final/ and "
                                         "best/ hold the model alone.")
    collective_timeout_s: int = Field(7200, ge=60, le=MAX_COLLECTIVE_TIMEOUT_S, description="How long a process waits at "
                                      "a collective for the others (torch.distributed's "
                                      "timeout): the slowest process's workflows of a step "
                                      "must finish within it.")
    logging_steps: int = Field(1, ge=1, description="Log metrics every N steps.")
    bf16: bool | None = Field(None, description="none = on with a GPU, off on CPU.")
    gradient_checkpointing: bool | None = Field(None, description="Recompute activations in "
                                                "the backward pass; none = on with a GPU.")
    report_to: tuple[str, ...] = Field(
        ("tensorboard",), description="Where metrics go besides metrics.jsonl: 'tensorboard' "
        "(logs in OUTPUT/runs: tensorboard --logdir OUTPUT), 'wandb', 'trackio', ...; [] "
        "for none.")
    overlap: bool = Field(False, description="Run the workflows of the next step's rollouts "
                          "while this step trains (podium.train.overlap): the policy trains on "
                          "rollouts generated max_staleness updates earlier, weighed by the "
                          "generating policy's log-probabilities (overlap_loss). Off: each "
                          "step waits for its own workflows (the paper).")
    max_staleness: int = Field(1, ge=1, le=MAX_STALENESS, description="With overlap, how many "
                               "updates old a trained rollout may be: the steps generated "
                               "ahead of the one training.")
    overlap_loss: Literal["decoupled", "clipped"] = Field(
        "decoupled", description="With overlap, how a stale rollout is weighed: 'decoupled' "
        "(AReaL's): the ratio clipped around the policy the update starts from, each token "
        "times min(that policy's probability / the generating policy's, "
        "overlap_weight_cap); 'clipped': the ratio taken against the generating policy and "
        "clipped by epsilon.")
    overlap_weight_cap: float = Field(3.0, gt=0, description="With overlap_loss = "
                                      "'decoupled', the most one token's importance weight "
                                      "may be.")


class RolloutSection(_Section):
    """How podium samples a step's rollouts and weighs their tokens (podium.train.rollout)."""

    constrained: bool = Field(False, description="Sample every rollout under the Conductor's "
                              "grammar (valid workflows only; transformers generation with "
                              "xgrammar), as a constrained Conductor runs at inference.")
    credit: Literal["all", "live", "plan"] = Field(
        "all", description="all: every completion token takes the rollout's advantage (the "
        "paper); live: the tokens writing a step the final answer cannot depend on (not the "
        "last step, not seen by it) are left out of the loss; plan: live, and every subtask's "
        "text too, for workers that read the question, not the subtask (podium.train.credit; "
        "needs constrained = true).")
    subtask_weight: float = Field(
        1.0, ge=0, le=1, description="With credit = live: the weight in the loss of a live "
        "step's subtask tokens against the plan's tokens (1: equal; 0: as credit = plan).")
    explore: float = Field(
        0.0, ge=0, le=1, description="Share of each group's rollouts whose plan skeleton (worker "
        "ids and access values) is drawn uniformly at random, distinct within the group; the "
        "subtasks stay the policy's unless explore_subtasks says otherwise "
        "(podium.train.rollout.explore; needs constrained = true).")
    explore_plans: Literal["live", "all"] = Field(
        "live", description="Which skeletons explore draws: live = only plans whose every step "
        "reaches the answer (a plan of two steps or more ends with \"all\"); all = every "
        "skeleton, a last step that sees nothing included.")
    explore_subtasks: Literal["policy", "question"] = Field(
        "policy", description="The subtasks of the rollouts explore draws: policy = the "
        "policy's own; question = the question itself at every step (for workers that read "
        "only their subtask, podium.train.rollout.explore).")
    explore_wrong: Literal["keep", "drop"] = Field(
        "drop", description="An explored rollout whose answer is wrong: keep = scored like "
        "any other; drop = unscorable, left out of its group's baseline and the loss, so "
        "drawn plans teach only by succeeding (pushing down a plan the policy would rarely "
        "write moves its probability onto the plan it already favours).")


class VllmSection(_Section):
    """Rollouts generated by TRL's vLLM (the `gpu` extra)."""

    enabled: bool = Field(False, description="Generate the rollouts with vLLM (GPU recipes).")
    mode: Literal["server", "colocate"] = Field(
        "server", description="server: a separate `trl vllm-serve` (the paper's setup); "
        "colocate: vLLM inside each training process.")
    server_base_url: str | None = Field(None, description="A running `trl vllm-serve`.")
    gpu_memory_utilization: float = Field(0.5, gt=0, le=1, description="GPU memory share "
                                          "vLLM may take in colocate mode.")
    importance_sampling_correction: bool = Field(
        False, description="TRL's importance-sampling correction for the gap between vLLM's "
        "and the trainer's log-probabilities (on by default in TRL 1.16; the paper's TRL had "
        "none, so off here; refused with constrained rollouts).")


# keys that [grpo] does not take, and where they are written
MOVED = {**{k: f"rollout.{k}" for k in ("constrained", "credit", "subtask_weight", "explore",
                                       "explore_plans", "explore_subtasks", "explore_wrong")},
         "use_vllm": "vllm.enabled", "vllm_mode": "vllm.mode",
         "vllm_server_base_url": "vllm.server_base_url",
         "vllm_gpu_memory_utilization": "vllm.gpu_memory_utilization",
         "importance_sampling_correction": "vllm.importance_sampling_correction"}


class HeldOutSection(_Section):
    task: str | None = Field(None, description="Evaluate the policy on this task's held-out "
                             "questions every `every` steps (greedy, under the grammar when the "
                             "rollouts are), logged as heldout/accuracy, the best step kept as "
                             "best/: a registered task or jsonl:FILE; a task of the training "
                             "mix keeps its options. None: no held-out evaluation.")
    split: str = Field("test", description="The split the questions come from (never the "
                       "training split).")
    n: int | None = Field(30, ge=1, description="Questions drawn from the split (seeded); "
                          "none = all.")
    seed: int = Field(0, description="Seed of the draw.")
    every: int = Field(5, ge=1, description="Evaluate every N steps (and after the last).")
    options: dict[str, Any] = Field(default_factory=dict, description="Task options (none: "
                                    "the training mix's, for a task in it).")


class OutputSection(_Section):
    dir: str = Field("runs/train/conductor", min_length=1, description="Checkpoints, "
                     "metrics.jsonl and transcripts.jsonl go here.")
    transcripts_per_step: int = Field(4, ge=0, description="Rollouts saved per step (one of "
                                      "each reward value first, the policy's own and the "
                                      "explored apart).")


class TrainConfig(_Section):
    """A training recipe (TOML), one section per table; docs/training.md ("Every key")
    lists every key with its default."""

    model: ModelSection = ModelSection()
    pool: PoolSection = PoolSection()
    data: DataSection
    reward: RewardSection = RewardSection()
    subpool: SubpoolSection = SubpoolSection()
    budget: BudgetSection = BudgetSection()
    recursion: RecursionSection = RecursionSection()
    grpo: GRPOSection = GRPOSection()
    rollout: RolloutSection = RolloutSection()
    vllm: VllmSection = VllmSection()
    heldout: HeldOutSection = HeldOutSection()
    run: RunSettings = Field(RunSettings(), description="Run settings ([run] keys of a pool "
                             "file) over the pool's own, e.g. max_steps, fewshots: only the "
                             "keys the config writes count (podium.settings).")
    output: OutputSection = OutputSection()
    source: str = "<dict>"

    @model_validator(mode="before")
    @classmethod
    def _moved(cls, data: Any) -> Any:
        grpo = data.get("grpo") if isinstance(data, dict) else None
        moved = [k for k in (grpo or {}) if k in MOVED] if isinstance(grpo, dict) else []
        if moved:
            raise ValueError("; ".join(
                f"grpo.{k} is not a [grpo] key: write it as {MOVED[k]} (in the "
                f"[{MOVED[k].split('.')[0]}] section)" for k in moved))
        return data

    @model_validator(mode="after")
    def _check(self) -> TrainConfig:
        h, r = self.heldout, self.rollout
        if any(s.name == h.task and s.split == h.split for s in self.data.tasks):
            raise ValueError(f"heldout: the {h.task} questions of split {h.split!r} are trained "
                             "on; hold out another split (e.g. heldout.split = 'test')")
        if self.grpo.questions_per_step * self.grpo.generations > MAX_COMPLETIONS:
            raise ValueError(f"grpo.questions_per_step x grpo.generations = "
                             f"{self.grpo.questions_per_step * self.grpo.generations:,} rollouts "
                             f"a step, more than the {MAX_COMPLETIONS:,} a step may have: lower "
                             "grpo.questions_per_step or grpo.generations")
        if self.subpool.k_max is not None and self.subpool.k_max < self.subpool.k_min:
            raise ValueError("subpool.k_max must be at least subpool.k_min")
        if self.recursion.fraction and int(self.grpo.generations * self.recursion.fraction) < 1:
            raise ValueError("recursion.fraction x grpo.generations must be at least 1")
        if r.credit != "all" and not r.constrained:
            raise ValueError(f"rollout.credit = {r.credit!r} reads the steps from "
                             "grammar-held rollouts: set rollout.constrained = true too")
        if r.credit != "all" and self.recursion.fraction:
            raise ValueError(f"rollout.credit = {r.credit!r} is for single-round training: "
                             "set recursion.fraction = 0 or rollout.credit = 'all'")
        if r.subtask_weight != 1 and r.credit != "live":
            raise ValueError(f"rollout.subtask_weight weighs the subtasks of live steps, which "
                             f"only credit = 'live' keeps apart (credit is {r.credit!r}): set "
                             "rollout.credit = 'live' or leave subtask_weight at 1")
        if r.constrained and self.vllm.enabled and self.vllm.importance_sampling_correction:
            raise ValueError("vllm.importance_sampling_correction weighs each rollout by the "
                             "trainer's over vLLM's log-probabilities, and under the grammar "
                             "vLLM reports those of the masked distribution: a 2-step gym run "
                             "measured sequence ratios near 1e-9, which leaves every rollout "
                             "out of the loss. Set vllm.importance_sampling_correction = false "
                             "(the default, as in the paper) or rollout.constrained = false")
        if self.run.hold_budget and not r.constrained:
            raise ValueError("run.hold_budget holds rollouts to their budget through the "
                             "Conductor's grammar: set rollout.constrained = true too")
        if r.explore and not r.constrained:
            raise ValueError("rollout.explore draws plans through the Conductor's grammar: set "
                             "rollout.constrained = true too")
        if r.explore_subtasks != "policy" and not r.explore:
            raise ValueError("rollout.explore_subtasks sets the subtasks of explored rollouts, "
                             "and rollout.explore is 0: set rollout.explore (e.g. 0.5) or leave "
                             "explore_subtasks at 'policy'")
        if r.explore and self.recursion.fraction:
            raise ValueError("rollout.explore is for single-round training: set "
                             "recursion.fraction = 0 or rollout.explore = 0")
        if self.grpo.overlap and self.recursion.fraction:
            raise ValueError("grpo.overlap runs a step's workflows while the step before "
                             "trains, and the recursion fine-tune cannot start round 1 until "
                             "round 0's workflows have answered (its generation waits for the "
                             "workers): set grpo.overlap = false or recursion.fraction = 0")
        blocker = file_in_the_way(self.output.dir)
        if blocker is not None:
            raise ValueError(f"output.dir {self.output.dir!r}: {blocker} is a file, not a "
                             "folder; set output.dir to a folder (it is made if missing)")
        if r.explore and explored_count(r.explore, self.grpo.generations) < 1:
            raise ValueError(f"rollout.explore x grpo.generations rounds to no exploring rollout "
                             f"({r.explore} x {self.grpo.generations}): raise "
                             f"rollout.explore to at least 1/{self.grpo.generations}, or set it "
                             "to 0")
        return self


def _errors(err: ValidationError) -> str:
    out = []
    for e in err.errors():
        where = ".".join(str(p) for p in e["loc"])
        if e["type"] == "extra_forbidden":
            out.append(f"unknown key '{where}'")
        elif not where:  # a check across keys: its message names them
            out.append(str(e["msg"]).removeprefix("Value error, "))
        else:
            out.append(f"'{where}': {e['msg']}")
    return "; ".join(out)


def _value(text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """`data` with each `section.key=value` of `overrides` set (values read as TOML)."""
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: write it as section.key=value, e.g. "
                              "--set grpo.learning_rate=1e-5")
        *path, last = key.strip().split(".")
        node = out
        for part in path:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {item!r}: {part!r} is not a section")
        node[last] = _value(text.strip())
    return out


def train_config_from_dict(data: dict[str, Any], source: str = "<dict>") -> TrainConfig:
    try:
        return TrainConfig(**{**data, "source": source})
    except ValidationError as e:
        raise ConfigError(f"Training config {source} is not valid: {_errors(e)}. Fix these keys "
                          "(docs/training.md lists every key).") from None


def load_train_config(path: str | Path, overrides: list[str] | None = None) -> TrainConfig:
    """Read a training config; `overrides` are `section.key=value` strings."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"Training config {p} does not exist. Pass a TOML file with --config "
                          "(configs/train/ has recipes).")
    try:
        data = tomllib.loads(p.read_text("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"Training config {p} is not valid TOML: {e}. Fix the syntax.") from None
    data = _resolve_paths(data, p.parent)
    return train_config_from_dict(apply_overrides(data, overrides or []), str(p))


def _resolve_paths(data: dict[str, Any], base: Path) -> dict[str, Any]:
    """A relative pool file is read relative to the working directory when it exists there,
    else relative to the config file (so recipes work from the repository root and beside
    their config)."""
    pool = data.get("pool") or {}
    file = pool.get("file")
    if file and not Path(file).is_absolute() and not Path(file).exists() \
            and (base / file).exists():
        data = {**data, "pool": {**pool, "file": str(base / file)}}
    return data
