"""The Conductor's workflow grammar for each rollout, as GBNF text and compiled.

A rollout's grammar depends on its row (the ids it shows, with `run.hold_budget` its budget
and prices), on the round (a recursion round may keep the answer), and for an explored rollout
on its drawn skeleton and subtasks: a `GrammarSpec`. `Grammars` makes each one's GBNF text
(`grammar_for`, what vLLM takes and what the embedded backend applies at inference) and
compiles it with xgrammar for the policy's tokenizer (a transformers logits processor), each
cached.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any, NamedTuple

from podium.conductor import grammar_for
from podium.conductor.budget import RequestBudget, plan_fits
from podium.config import Pool, RunSettings
from podium.errors import ConfigError
from podium.train.data import view_of
from podium.train.rollout.explore import Skeleton
from podium.train.rollout.row import Row


class GrammarSpec(NamedTuple):
    """What a rollout's grammar depends on: the ids its row shows, whether it revises a plan
    (recursion's second round), for an explored rollout its skeleton and subtasks, and with
    `run.hold_budget` the row's budget (the plan is held to what it can pay for)."""

    workers: tuple[int, ...]
    revise: bool = False
    skeleton: Skeleton | None = None
    subtasks: tuple[str, ...] | None = None
    budget: RequestBudget | None = None


class Grammars:
    """The Conductor's grammars per `GrammarSpec`, as GBNF text (what vLLM takes) and compiled
    by xgrammar for one tokenizer (what transformers generation applies)."""

    def __init__(self, tokenizer: Any, vocab_size: int, pool: Pool,
                 settings: RunSettings) -> None:
        try:
            import xgrammar as xgr
        except ImportError:
            raise ConfigError("[rollout] constrained = true needs xgrammar: pip install "
                              "'podium[train]'.") from None
        self._xgr = xgr
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
        self._compiler = xgr.GrammarCompiler(info)
        self.pool, self.settings = pool, settings
        self.text = lru_cache(maxsize=1024)(self._text)
        self.compiled = lru_cache(maxsize=1024)(self._compile)

    def _text(self, spec: GrammarSpec) -> str:
        view = view_of(self.pool, self.settings, list(spec.workers), spec.budget)
        return grammar_for(view, self.settings, spec.revise, spec.skeleton, spec.subtasks)

    def held(self, row: Row) -> RequestBudget | None:
        """The budget a row's rollouts are held to (`run.hold_budget`), or None."""
        return row.budget if self.settings.hold_budget else None

    def fits(self, workers: tuple[int, ...], budget: RequestBudget | None
             ) -> Callable[[tuple[int, ...]], bool] | None:
        """Whether a plan's ids are among those the row's held grammar admits: its list price
        fits `budget`, or, where no worker fits even alone, it is one step of the cheapest
        (None: no budget to hold to)."""
        if budget is None:
            return None
        prices = view_of(self.pool, self.settings, list(workers), budget).held_prices
        if prices is None:
            return None
        return lambda ids: plan_fits(ids, prices, budget.amount)

    def _compile(self, spec: GrammarSpec) -> Any:
        return self._compiler.compile_grammar(self.text(spec))

    def shown_ids(self, workers: tuple[int, ...]) -> list[int]:
        """The ids a row's Conductor sees (what a skeleton may hold)."""
        return view_of(self.pool, self.settings, list(workers)).shown_ids

    def processor(self, specs: list[GrammarSpec]) -> Any:
        """A transformers logits processor holding the i-th row of a batch to `specs[i]`."""
        return self._xgr.contrib.hf.LogitsProcessor([self.compiled(s) for s in specs])
