"""The Conductor: render its prompt, generate, parse the workflow; recursion rounds.

`Conductor.plan` runs the root round. `Conductor.revise` runs a recursion round: the Conductor
sees its earlier conversation and the final answer, and either keeps the answer (three empty
lists, `turn.kept`) or writes a new workflow. Parse failures are returned as data on the turn
(`turn.parse_reason`), never raised, so a caller can fall back, score or log them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from podium.config import RunSettings
from podium.errors import WorkerError, WorkflowParseError
from podium.llm.base import ChatClient, Message
from podium.subpool import PoolView
from podium.workflow.grammar import workflow_grammar
from podium.workflow.parse import parse_workflow
from podium.workflow.prompt import conductor_messages, recursion_messages
from podium.workflow.types import Workflow


@dataclass
class ConductorTurn:
    round: int
    messages: list[Message]
    completion: str = ""
    workflow: Workflow | None = None
    parse_reason: str | None = None
    parse_detail: str = ""
    kept: bool = False  # recursion: the Conductor kept the previous answer
    fallback: bool = False  # the workflow is the single-step fallback, not the Conductor's
    error: str | None = None  # the Conductor call itself failed
    constrained: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    cost: float | None = None
    cache_hit: bool = False
    retries: list[dict] = field(default_factory=list)
    view: PoolView | None = None  # the workers this turn was shown
    extra: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {
            "round": self.round,
            "messages": self.messages,
            "completion": self.completion,
            "workflow": self.workflow.to_json() if self.workflow else None,
            "parse_error": ({"reason": self.parse_reason, "detail": self.parse_detail}
                            if self.parse_reason else None),
            "kept": self.kept,
            "fallback": self.fallback,
            "error": self.error,
            "constrained": self.constrained,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "latency_s": self.latency_s,
            "cost": self.cost,
            "cache_hit": self.cache_hit,
            "retries": self.retries,
            "shown_workers": self.view.pool_indices() if self.view else None,
        }


class Conductor:
    """Plans workflows for the workers of a `PoolView` (the whole pool, or a sub-pool).

    `turn.workflow` always names pool indices, whatever ids the Conductor was shown.
    """

    def __init__(
        self,
        client: ChatClient,
        view: PoolView,
        settings: RunSettings = RunSettings(),
        *,
        constrained: bool = False,
    ) -> None:
        self.client = client
        self.view = view
        self.settings = settings
        self.constrained = constrained

    def _grammar(self, view: PoolView, allow_empty: bool) -> str | None:
        if not self.constrained:
            return None
        return workflow_grammar(view.shown_ids, self.settings.max_steps, allow_empty=allow_empty)

    async def _generate(self, turn: ConductorTurn, view: PoolView, allow_empty: bool,
                        sample_id: int) -> ConductorTurn:
        start = time.perf_counter()
        try:
            resp = await self.client.chat(turn.messages,
                                          grammar=self._grammar(view, allow_empty),
                                          sample_id=sample_id)
        except WorkerError as exc:
            turn.error = str(exc)
            turn.retries = list(exc.retries)
            turn.latency_s = time.perf_counter() - start
            return turn
        turn.completion = resp.text
        turn.prompt_tokens, turn.completion_tokens = resp.prompt_tokens, resp.completion_tokens
        turn.latency_s = resp.latency_s
        turn.extra["prefill"] = resp.prefill
        turn.cache_hit, turn.retries = resp.cache_hit, list(resp.retries)
        try:
            shown = parse_workflow(
                resp.text,
                num_workers=view.id_space,
                max_steps=self.settings.max_steps,
                access_mode=self.settings.access_mode,
                allowed_workers=view.shown_ids,
            )
            turn.workflow = view.to_pool_workflow(shown)
        except WorkflowParseError as exc:
            if allow_empty and exc.reason == "empty":
                turn.kept = True
            else:
                turn.parse_reason, turn.parse_detail = exc.reason, exc.detail
        return turn

    async def plan(self, question: str, *, sample_id: int = 0,
                   view: PoolView | None = None) -> ConductorTurn:
        s = self.settings
        view = view or self.view
        messages = conductor_messages(question, view.entries, prompt=s.prompt,
                                      fewshots=s.fewshots, max_steps=s.max_steps,
                                      display=s.pool_display)
        turn = ConductorTurn(0, messages, constrained=self.constrained, view=view)
        return await self._generate(turn, view, allow_empty=False, sample_id=sample_id)

    async def revise(self, previous: ConductorTurn, answer: str, *,
                     sample_id: int = 0) -> ConductorTurn:
        """A recursion round after `previous`, whose workflow produced `answer`."""
        s = self.settings
        messages = recursion_messages(
            previous.messages, previous.completion, answer, prompt=s.prompt,
            template=s.recursion_template,
            workflow_text=previous.workflow.to_text() if previous.workflow else "(none)",
        )
        view = previous.view or self.view
        turn = ConductorTurn(previous.round + 1, messages, constrained=self.constrained,
                             view=view)
        return await self._generate(turn, view, allow_empty=True, sample_id=sample_id)
