"""Rollouts held to valid workflows: the Conductor's grammar applied while the policy samples.

A small policy (SmolLM2-135M) rarely writes three parseable, equal-length lists at temperature
1.0, so most rollouts score the format-error 0 and a step carries little signal about which
worker or topology was right. With `[grpo] constrained = true`, each rollout is sampled under
the same GBNF grammar the embedded backend applies at inference (`grammar_for`: the row's shown
ids, the step limit, the prompt's prefill), compiled for the policy's tokenizer by xgrammar and
applied as a transformers logits processor. Every rollout is then a valid workflow, and the
reward compares worker choices and topologies from the first step. The policy is trained on
the tokens it sampled (TRL's loss uses its own, unmasked log-probabilities), and the trained
Conductor runs under the same grammar at inference (`constrained = true` in the pool). With
`[grpo] credit = "live"` the rollout also hands TRL an `env_mask` that leaves the tokens of
steps the answer cannot depend on out of the loss (`podium.train.credit`). With
`[grpo] explore`, a share of each group is sampled under a grammar that holds the plan's ids
and access values to a skeleton drawn at random (`podium.train.explore`), and with
`[grpo] explore_subtasks = "question"` its subtasks to the question. Such a rollout, after a
prefill that opens the lists, has one text its grammar admits: it is written (tokenized as the
tokenizer splits it, with the end token) rather than sampled token by token, which on the
gym's subtask mode is half of each group and its longest completions (docs/gym.md).

Generation goes through TRL's model unwrapping, so it works wherever TRL's own transformers
generation does. TRL's vLLM generation takes one pattern for a whole batch, not a grammar per
row, so the training config refuses `constrained` with `use_vllm` (podium.train.config).
"""

from __future__ import annotations

import random
from functools import lru_cache
from typing import Any

from podium.conductor import fixed_completion, grammar_for
from podium.config import Pool, RunSettings
from podium.errors import ConfigError
from podium.train.credit import live_mask
from podium.train.data import view_of
from podium.train.explore import Skeleton, draw_skeletons, explored_indices, question_subtask
from podium.train.layout import pieces_of


class Grammars:
    """Compiled grammars per (shown ids, recursion round), for one tokenizer."""

    def __init__(self, tokenizer: Any, vocab_size: int, pool: Pool,
                 settings: RunSettings) -> None:
        try:
            import xgrammar as xgr
        except ImportError:
            raise ConfigError("[grpo] constrained = true needs xgrammar: pip install "
                              "'podium[train]'.") from None
        self._xgr = xgr
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
        self._compiler = xgr.GrammarCompiler(info)
        self.pool, self.settings = pool, settings
        self.compiled = lru_cache(maxsize=1024)(self._compile)

    def _compile(self, workers: tuple[int, ...], revise: bool,
                 skeleton: Skeleton | None = None,
                 subtasks: tuple[str, ...] | None = None) -> Any:
        view = view_of(self.pool, self.settings, list(workers))
        return self._compiler.compile_grammar(grammar_for(view, self.settings, revise,
                                                          skeleton, subtasks))

    def shown_ids(self, workers: tuple[int, ...]) -> list[int]:
        """The ids a row's Conductor sees (what a skeleton may hold)."""
        return view_of(self.pool, self.settings, list(workers)).shown_ids

    def processor(self, grammars: list[Any]) -> Any:
        return self._xgr.contrib.hf.LogitsProcessor(grammars)


def generate(trainer: Any, prompt_ids: list[list[int]],
             grammars: list[Any] | None, processor: Any = None) -> tuple[list, Any]:
    """Completions for `prompt_ids`: TRL's own generator, or, with `grammars` (one per
    prompt), transformers' generate under those grammars. Returns (completion ids, logprobs)."""
    if grammars is None:
        return trainer._generate_single_turn(prompt_ids, None, {}, 1)
    import torch
    from transformers import LogitsProcessorList
    from trl.models import unwrap_model_for_generation

    pad = trainer.processing_class.pad_token_id
    width = max(len(ids) for ids in prompt_ids)
    inputs = torch.tensor([[pad] * (width - len(ids)) + ids for ids in prompt_ids])
    mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in prompt_ids])
    device = trainer.accelerator.device
    with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator,
                                     gather_deepspeed3_params=trainer.args
                                     .ds3_gather_for_generation) as model, torch.no_grad():
        out = model.generate(input_ids=inputs.to(device), attention_mask=mask.to(device),
                             generation_config=trainer.generation_config,
                             logits_processor=LogitsProcessorList([processor(grammars)]))
    eos = set(trainer.eos_token_ids)
    completions = []
    for row in out[:, width:].tolist():
        end = next((i for i, t in enumerate(row) if t in eos), None)
        completions.append(row if end is None else row[:end + 1])
    return completions, None


class ConstrainedRollout:
    """TRL's `rollout_func` for single-round training with grammar-held rollouts."""

    def __init__(self, grammars: Grammars, tokenizer: Any, rows: list[dict[str, Any]],
                 credit: str = "all", explore: float = 0.0, seed: int = 0,
                 explore_plans: str = "live", subtask_weight: float = 1.0,
                 explore_subtasks: str = "policy", group: int = 0, rank: int = 0) -> None:
        self.grammars, self.tokenizer, self.credit = grammars, tokenizer, credit
        self.group, self.rank = group, rank  # the processes draw apart (seed + rank)
        self.subtask_weight = subtask_weight if credit == "live" else 0.0
        self.rows = {row["prompt"]: row for row in rows}
        self.explore, self.rng = explore, random.Random(seed + 1_000_003 * rank)
        self.live_plans = explore_plans == "live"
        self.question_subtasks = explore_subtasks == "question"

    def skeletons(self, prompts: list[str]) -> list[Skeleton | None]:
        """Per rollout, the skeleton it explores, or None for a rollout of the policy's own."""
        out: list[Skeleton | None] = [None] * len(prompts)
        pieces = pieces_of(prompts, self.group, self.rank * len(prompts))
        for idx in explored_indices(pieces, self.explore):
            if not idx:
                continue
            workers = tuple(self.rows[prompts[idx[0]]]["workers"])
            drawn = draw_skeletons(self.rng, self.grammars.shown_ids(workers),
                                   self.grammars.settings.max_steps, len(idx),
                                   self.live_plans)
            for i, skeleton in zip(idx, drawn, strict=True):
                out[i] = skeleton
        return out

    def subtasks(self, prompt: str, skeleton: Skeleton | None) -> tuple[str, ...] | None:
        """The subtasks an explored rollout is held to (the question at every step, with
        `explore_subtasks = "question"`), or None: the policy writes its own."""
        if skeleton is None or not self.question_subtasks:
            return None
        text = question_subtask(self.rows[prompt]["question"],
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

    def __call__(self, prompts: list[str], trainer: Any) -> dict[str, Any]:
        ids = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        skeletons = self.skeletons(prompts)
        limit = trainer.args.max_completion_length
        completions = [self.written(p, sk, limit) for p, sk in zip(prompts, skeletons,
                                                                   strict=True)]
        sampled = [i for i, c in enumerate(completions) if c is None]
        if sampled:  # a text the grammar fixes is written, not sampled token by token
            grammars = [self.grammars.compiled(tuple(self.rows[prompts[i]]["workers"]), False,
                                               skeletons[i], self.subtasks(prompts[i],
                                                                           skeletons[i]))
                        for i in sampled]
            generated, _ = generate(trainer, [ids[i] for i in sampled], grammars,
                                    self.grammars.processor)
            for i, completion in zip(sampled, generated, strict=True):
                completions[i] = completion
        out = {"prompt_ids": ids, "completion_ids": completions, "logprobs": None}
        if self.explore:  # forwarded to the reward, which logs the two kinds apart
            out["podium_explored"] = [sk is not None for sk in skeletons]
        if self.credit != "all":  # TRL leaves tokens with env_mask 0 out of the loss
            out["env_mask"] = [live_mask(self.tokenizer, c, self.subtask_weight)
                               for c in completions]
        return out
