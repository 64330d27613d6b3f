"""The recursion fine-tune (PAPER.md §10): part of each group continues into a second round.

A TRL `rollout_func` replaces plain generation. Of each group's G rollouts, the first G - k are
round-0 completions of the question's prompt, as usual (k = `recursion.fraction` x G). Round-0
rollout i (for i < k) is also run through the pipeline right away, and rollout G - k + i of the
group is its round 1 (a group split over several processes is laid out the same way within
each process's piece of it, `podium.train.rollout.layout`): the prompt is the round-0 conversation plus
the round-0 final answer (`revise_messages`, the same recursion prompt as inference), and the
policy either keeps the answer (three empty lists) or writes a corrective workflow, which the
reward runs with the previous round visible (`Pipeline.run_revision`). Round 0 is run by the
same `podium.train.score.Scorer` the reward and the held-out evaluation use. The paper's layout: 64 rollouts, 32 + 32.

Rewards (`podium.train.reward.ConductorReward`, with `blend` and `per_round` here): a round-1 rollout scores its own outcome r1 (a format
error in round 1 scores 0); the round-0 rollout it continues scores (1 - d) r0 + d r1, d =
`recursion.discount` (D13: 0.25; when r1 is unscorable, r0 alone). Advantages are normalised
over the whole group, both rounds together (D14 `joint`, TRL's own group normalisation), or,
with `per_round`, the rewards of each round are standardised within the group first, so TRL's
group normalisation leaves each round's advantages on their own scale.

Generation goes through TRL's own single-turn generator (transformers or vLLM), or, with
`[rollout] constrained`, under the Conductor's grammar (`podium.train.rollout.generate`), once for
the round-0 prompts and once for the round-1 prompts; with `run.hold_budget` a round-1 rollout
is held to its row's budget less what its round-0 plan cost.
"""

from __future__ import annotations

import asyncio
import statistics
from collections import Counter
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from podium.conductor import revise_messages
from podium.config import RunSettings
from podium.train.rollout.generate import sample
from podium.train.rollout.grammars import Grammars, GrammarSpec
from podium.train.rollout.layout import pieces_of
from podium.train.rollout.row import RolloutInfo, Rollouts, Row
from podium.train.rollout.settings import RolloutSettings

if TYPE_CHECKING:
    from podium.pipeline import RunResult
    from podium.train.grpo import TrlTrainer
    from podium.train.score import Scorer


def layout(pieces: list[tuple[int, int]], fraction: float
           ) -> tuple[list[int], dict[int, int]]:
    """(round-0 indices, {round-1 index: the round-0 index it continues}) for a process's
    rollouts cut into `pieces` ((start, length) of each run of one group, whole or not): the
    last `fraction` x length rollouts of a piece continue its first ones."""
    first: list[int] = []
    second: dict[int, int] = {}
    for start, length in pieces:
        k = int(length * fraction + 1e-9)
        first.extend(range(start, start + length - k))
        second.update({start + length - k + j: start + j for j in range(k)})
    return first, second


def blend(rewards: list[float | None], second: dict[int, int],
          discount: float) -> list[float | None]:
    """Round-0 rewards blended with their round-1 continuation's: (1 - d) r0 + d r1."""
    out = list(rewards)
    for j, i in second.items():
        r0, r1 = rewards[i], rewards[j]
        if r0 is not None and r1 is not None:
            out[i] = (1 - discount) * r0 + discount * r1
    return out


def per_round(rewards: list[float | None], rounds: list[int],
              group: int) -> list[float | None]:
    """Each round's rewards standardised within each group (mean 0, standard deviation 1;
    a round with no spread scores 0): TRL's group normalisation then keeps them apart."""
    out = list(rewards)
    for b in range(0, len(rewards), group):
        for r in (0, 1):
            scored = {i: x for i in range(b, b + group)
                      if rounds[i] == r and (x := rewards[i]) is not None}
            if len(scored) < 2:
                continue
            values = list(scored.values())
            mean, std = statistics.fmean(values), statistics.pstdev(values)
            for i, x in scored.items():
                out[i] = 0.0 if std == 0 else (x - mean) / std
    return out


class RecursionRollout:
    """TRL's `rollout_func` for the recursion fine-tune."""

    def __init__(self, scorer: Scorer, settings: RolloutSettings, run_settings: RunSettings,
                 tokenizer: Any, rows: list[Row], grammars: Grammars | None = None) -> None:
        assert settings.recursion is not None, "the recursion rollout needs [recursion]"
        self.scorer, self.settings, self.run_settings = scorer, settings, run_settings
        self.fraction = settings.recursion.fraction
        self.tokenizer = tokenizer
        self.rows = {row.prompt: row for row in rows}
        self.grammars = grammars  # None: TRL's own generation
        self.calls: Counter[int] = Counter()  # calls made for each step so far

    def specs(self, rows: list[Row], revise: bool,
              spent: list[float] | None = None) -> list[GrammarSpec]:
        """Each row's grammar: held, with `run.hold_budget`, to the row's budget less what
        its round-0 plan cost (`spent`, a recursion round's)."""
        assert self.grammars is not None
        out = []
        for k, row in enumerate(rows):
            budget = self.grammars.held(row)
            if budget is not None and spent is not None:
                budget = replace(budget, amount=max(budget.amount - spent[k], 0.0))
            out.append(GrammarSpec(row.workers, revise, budget=budget))
        return out

    def generate(self, trl: TrlTrainer, ids: list[list[int]], rows: list[Row], revise: bool,
                  spent: list[float] | None = None) -> tuple[list, Any]:
        if self.grammars is None:
            return sample(trl, ids)
        return sample(trl, ids, self.grammars, self.specs(rows, revise, spent))

    def _ids(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def __call__(self, prompts: list[str], trl: TrlTrainer) -> Rollouts:
        first_place = self.settings.first(len(prompts))
        pieces = pieces_of(prompts, self.settings.group, first_place)
        first, second = layout(pieces, self.fraction)
        prompt_ids = [self._ids(p) for p in prompts]
        comp0, lp0 = self.generate(trl, [prompt_ids[i] for i in first],
                                    [self.rows[prompts[i]] for i in first], False)
        completion = dict(zip(first, comp0, strict=True))
        # vLLM's sampled log-probabilities, for TRL's importance-sampling correction
        logprob = (dict(zip(first, lp0, strict=True)) if lp0 is not None and trl.uses_vllm
                   else None)
        step = trl.step
        call = self.calls[step]  # with the step, keys the round-0 runs' cached replies
        self.calls[step] += 1
        rows = {i: self.rows[prompts[i]] for i in sorted(set(second.values()))}

        async def run_round0() -> list[RunResult]:
            return await asyncio.gather(*(
                self.scorer.run(
                    rows[i], self.tokenizer.decode(completion[i], skip_special_tokens=True),
                    tokens=len(completion[i]),
                    sample_id=f"rec:{step}:{call}:{first_place + i}")
                for i in rows))

        # on TRL's loop, where the pipeline's clients live
        prior = dict(zip(rows, trl.run(run_round0()), strict=True))
        messages1 = {j: revise_messages(prior[i].rounds[0].conductor, prior[i].answer or "",
                                        self.run_settings) for j, i in second.items()}
        for j, msgs in messages1.items():
            prompt_ids[j] = self._ids(self.tokenizer.apply_chat_template(
                msgs, tokenize=False, continue_final_message=True, add_generation_prompt=False))
        order = sorted(second)
        spent = [budget.plan_price if (budget := prior[second[j]].outcome.budget) is not None
                 else 0.0 for j in order]
        comp1, lp1 = self.generate(trl, [prompt_ids[j] for j in order],
                                    [self.rows[prompts[j]] for j in order], True, spent)
        completion.update(zip(order, comp1, strict=True))
        if logprob is not None and lp1 is not None:
            logprob.update(zip(order, lp1, strict=True))
        n = len(prompts)
        return Rollouts(
            prompt_ids, [completion[i] for i in range(n)],
            [logprob[i] for i in range(n)] if logprob is not None else None,
            info=[RolloutInfo(round=1 if i in second else 0, prior=prior.get(second.get(i, i)),
                              round_messages=messages1.get(i), pair=second.get(i, -1))
                  for i in range(n)])
