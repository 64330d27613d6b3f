"""Completions for a batch of prompts: sampled for the rollouts, greedy for the held-out
evaluation, each row under its own grammar when there is one.

`sample` takes the way the trainer generates: with no grammar, TRL's own generator
(transformers or vLLM); under the grammar, transformers' generate with xgrammar's logits
processor holding row i to `specs[i]`, or, with `[vllm] enabled`, the trainer's vLLM with one
GBNF grammar per row (`podium.train.rollout.vllm`). `greedy` is the held-out evaluation's:
the live policy's greedy completions, a batch at a time, under the grammar when the rollouts
are. The trainer is reached through `podium.train.grpo.TrlTrainer` (the one module that reads
TRL's internals).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from podium.train.rollout.grammars import Grammars, GrammarSpec

if TYPE_CHECKING:
    from podium.train.grpo import TrlTrainer

Completions = tuple[list[list[int]], Any]  # (completion ids, sampled log-probabilities or None)
BATCH = 16  # held-out prompts generated together


def sample(trl: TrlTrainer, prompt_ids: list[list[int]], grammars: Grammars | None = None,
           specs: list[GrammarSpec] | None = None) -> Completions:
    """Sampled completions of `prompt_ids`, the i-th under the grammar of `specs[i]` (no
    `grammars`: TRL's own generation)."""
    if grammars is None or specs is None:
        return trl.sample(prompt_ids)
    if trl.uses_vllm:
        return trl.sample_vllm(prompt_ids, [grammars.text(s) for s in specs])
    return trl.sample(prompt_ids, grammars.processor(specs))


def greedy(trl: TrlTrainer, prompt_ids: list[list[int]], grammars: Grammars | None = None,
           specs: list[GrammarSpec] | None = None) -> list[list[int]]:
    """The policy's greedy completion of each prompt, `BATCH` at a time, the i-th under the
    grammar of `specs[i]` when `grammars` is given (every process of a job calls it)."""
    out: list[list[int]] = []
    for start in range(0, len(prompt_ids), BATCH):
        processor = (grammars.processor(specs[start:start + BATCH])
                     if grammars is not None and specs is not None else None)
        out += trl.greedy(prompt_ids[start:start + BATCH], processor)
    return out
