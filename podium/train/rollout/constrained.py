"""Rollouts held to valid workflows: the Conductor's grammar applied while the policy samples.

A small policy (SmolLM2-135M) rarely writes three parseable, equal-length lists at temperature
1.0, so most rollouts score the format-error 0 and a step carries little signal about which
worker or topology was right. With `[rollout] constrained = true`, each rollout is sampled under
the same GBNF grammar the embedded backend applies at inference (`grammar_for`: the row's shown
ids, the step limit, the prompt's prefill), compiled for the policy's tokenizer by xgrammar and
applied as a transformers logits processor. Every rollout is then a valid workflow, and the
reward compares worker choices and topologies from the first step. With `run.hold_budget`,
each row's grammar also holds the plan to the row's budget at the row's prices, and the
explored skeletons are drawn among the plans that fit it. The policy is trained on
the tokens it sampled (TRL's loss uses its own, unmasked log-probabilities), and the trained
Conductor runs under the same grammar at inference (`constrained = true` in the pool). With
`[rollout] credit = "live"` the rollout also hands TRL an `env_mask` that leaves the tokens of
steps the answer cannot depend on out of the loss (`podium.train.credit`). With
`[rollout] explore`, a share of each group is sampled under a grammar that holds the plan's ids
and access values to a skeleton drawn at random (`podium.train.rollout.explore`), and with
`[rollout] explore_subtasks = "question"` its subtasks to the question. Such a rollout, after a
prefill that opens the lists, has one text its grammar admits: it is written (tokenized as the
tokenizer splits it, with the end token) rather than sampled token by token, which on the
gym's subtask mode is half of each group and its longest completions (docs/gym.md).

Generation is `podium.train.rollout.generate.sample`: transformers under the grammar, or
with `[vllm] enabled = true` the trainer's vLLM, each rollout under its own row's grammar
(`podium.train.rollout.vllm`); a rollout whose grammar admits one text is written either way.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from podium.conductor import fixed_completion
from podium.train.credit import live_mask
from podium.train.rollout.explore import (
    Skeleton,
    draw_skeletons,
    drawn_tokens,
    explored_indices,
    question_subtask,
)
from podium.train.rollout.generate import sample
from podium.train.rollout.grammars import Grammars, GrammarSpec
from podium.train.rollout.layout import pieces_of
from podium.train.rollout.row import RolloutInfo, Rollouts, Row
from podium.train.rollout.settings import RolloutSettings

if TYPE_CHECKING:
    from podium.train.grpo import TrlTrainer


class ConstrainedRollout:
    """TRL's `rollout_func` for single-round training with grammar-held rollouts."""

    def __init__(self, grammars: Grammars, tokenizer: Any, rows: list[Row],
                 settings: RolloutSettings) -> None:
        self.grammars, self.tokenizer, self.settings = grammars, tokenizer, settings
        self.subtask_weight = settings.subtask_weight if settings.credit == "live" else 0.0
        self.rows = {row.prompt: row for row in rows}
        # the processes draw apart (seed + rank)
        self.rng = random.Random(settings.seed + 1_000_003 * settings.rank)

    def skeletons(self, prompts: list[str]) -> list[Skeleton | None]:
        """Per rollout, the skeleton it explores, or None for a rollout of the policy's own."""
        s = self.settings
        out: list[Skeleton | None] = [None] * len(prompts)
        pieces = pieces_of(prompts, s.group, s.first(len(prompts)))
        for idx in explored_indices(pieces, s.explore):
            if not idx:
                continue
            row = self.rows[prompts[idx[0]]]
            drawn = draw_skeletons(self.rng, self.grammars.shown_ids(row.workers),
                                   self.grammars.settings.max_steps, len(idx),
                                   s.explore_plans == "live",
                                   fits=self.grammars.fits(row.workers, self.grammars.held(row)))
            for i, skeleton in zip(idx, drawn, strict=True):
                out[i] = skeleton
        return out

    def subtasks(self, prompt: str, skeleton: Skeleton | None) -> tuple[str, ...] | None:
        """The subtasks an explored rollout is held to (the question at every step, with
        `explore_subtasks = "question"`), or None: the policy writes its own."""
        if skeleton is None or self.settings.explore_subtasks != "question":
            return None
        text = question_subtask(self.rows[prompt].question,
                                self.grammars.settings.max_subtask_chars)
        return (text,) * len(skeleton[0])

    def written(self, prompt: str, skeleton: Skeleton | None, limit: int) -> list[int] | None:
        """The completion of a rollout whose grammar admits one text (a drawn plan with the
        question as its subtasks, after a prefill that opens the lists), as the tokenizer
        splits it, with the end token, cut at `limit` tokens as sampling would be; None for a
        rollout that is sampled."""
        subtasks = self.subtasks(prompt, skeleton)
        text = (fixed_completion(self.grammars.settings, skeleton, subtasks)
                if skeleton is not None and subtasks is not None else None)
        if text is None:
            return None
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return ids[:limit] if len(ids) >= limit else [*ids, self.tokenizer.eos_token_id]

    def __call__(self, prompts: list[str], trl: TrlTrainer) -> Rollouts:
        ids = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        skeletons = self.skeletons(prompts)
        limit = trl.max_completion_tokens
        written = [self.written(p, sk, limit) for p, sk in zip(prompts, skeletons, strict=True)]
        sampled = [i for i, c in enumerate(written) if c is None]
        generated: dict[int, list[int]] = {}
        logprobs: list | None = None
        policy: list | None = None
        if sampled:  # a text the grammar fixes is written, not sampled token by token
            specs = [GrammarSpec(self.rows[prompts[i]].workers, False, skeletons[i],
                                 self.subtasks(prompts[i], skeletons[i]),
                                 self.grammars.held(self.rows[prompts[i]])) for i in sampled]
            made, sampled_logprobs = sample(trl, [ids[i] for i in sampled], self.grammars,
                                            specs)
            generated = dict(zip(sampled, made, strict=True))
            if sampled_logprobs is not None:
                if trl.uses_vllm:  # vLLM's: only TRL's importance-sampling correction reads them
                    logprobs = sampled_logprobs if len(sampled) == len(prompts) else None
                else:  # the policy's own, recorded by transformers: what overlap's ratio needs
                    recorded = dict(zip(sampled, sampled_logprobs, strict=True))
                    policy = [recorded.get(i) for i in range(len(prompts))]
        completions = [c if c is not None else generated[i] for i, c in enumerate(written)]
        return Rollouts(
            ids, completions, logprobs,
            # forwarded to the reward, which logs the two kinds apart
            info=([RolloutInfo(explored=sk is not None) for sk in skeletons]
                  if self.settings.explore else None),
            env_mask=([live_mask(self.tokenizer, c, self.subtask_weight) for c in completions]
                      if self.settings.credit != "all" else None),
            policy_logprobs=policy,
            drawn=([drawn_tokens(self.tokenizer, c, self.settings.explore_subtasks == "question")
                    if sk is not None else None for sk, c in zip(skeletons, completions,
                                                                 strict=True)]
                   if any(sk is not None for sk in skeletons) else None))
