"""The Conductor: render its prompt, generate, parse the workflow; recursion rounds.

`Conductor.write` runs the root round. `Conductor.revise` runs a recursion round: the Conductor
sees its earlier conversation and the final answer, and either keeps the answer (three empty
lists, `turn.kept`) or writes a new workflow. Nothing is raised for a bad turn: a parse failure
(`turn.parse_reason`) and a failed Conductor call (`turn.error`, `turn.error_kind`; an
exception a backend did not convert is kind `internal`) are data on the turn, so a caller can
fall back, score or log them. A turn is built whole when its call is over.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from podium.conductor.budget import plan_price
from podium.conductor.grammar import OPENING, fixed_workflow, workflow_grammar
from podium.conductor.parse import parse_workflow
from podium.conductor.prompt import conductor_messages, get_prompt, recursion_messages
from podium.conductor.view import PoolView
from podium.config import Price, RunSettings
from podium.errors import INTERNAL, WorkerError, WorkflowParseError
from podium.llm.base import ChatClient, Message
from podium.workflow.types import Workflow


def _prefill(messages: list[Message] | None) -> str:
    """The assistant prefill the completion continues: parsed with it, since a prompt may open
    the lists itself (the compact prompt's prefill is `model_id = [`)."""
    if messages and messages[-1].get("role") == "assistant":
        return messages[-1].get("content") or ""
    return ""


def grammar_for(view: PoolView, settings: RunSettings, revise: bool = False,
                skeleton: tuple[tuple[int, ...], tuple[str, ...]] | None = None,
                subtasks: tuple[str, ...] | None = None, *,
                actors: Sequence[int] | None = None) -> str:
    """The grammar a constrained Conductor writes under: the ids of `view`, the step limit,
    three empty lists allowed in a recursion round (`revise`), and no reasoning when the
    prompt's prefill already opened the lists (the compact prompt); a `skeleton` (ids and
    access values) holds it to that one plan (training's exploration rollouts), and
    `subtasks` also to those instructions. With `settings.hold_budget` and a view that has a
    budget, the ids are held to plans whose list price fits it. `actors` (shown ids) hold the
    last step to those workers: with a request's tools, the ones that may act."""
    opened = not revise and _opens_lists(settings)
    held = view.held_prices if settings.hold_budget else None
    return workflow_grammar(view.shown_ids, settings.max_steps, allow_empty=revise,
                            opened=opened, max_subtask_chars=settings.max_subtask_chars,
                            max_reason_chars=settings.max_reason_chars,
                            max_reason_lines=settings.max_reason_lines, skeleton=skeleton,
                            subtasks=subtasks, prices=held,
                            budget=view.budget if held is not None else None,
                            last_ids=actors)


def fixed_completion(settings: RunSettings, skeleton: tuple[tuple[int, ...], tuple[str, ...]],
                     subtasks: tuple[str, ...]) -> str | None:
    """The one completion `grammar_for(view, settings, False, skeleton, subtasks)` admits, or
    None when the prompt's prefill does not open the lists (reasoning is then free)."""
    return fixed_workflow(skeleton, subtasks) if _opens_lists(settings) else None


def _opens_lists(settings: RunSettings) -> bool:
    """Whether the prompt's prefill already opens the lists (the compact prompts)."""
    return get_prompt(settings.prompt).prefill.rstrip().endswith(OPENING)


def workflow_messages(question: str, view: PoolView, settings: RunSettings) -> list[Message]:
    """The root-round prompt for `question` shown `view`: what the Conductor is asked at
    inference, and what a trainer's policy is prompted with."""
    return conductor_messages(question, view.entries, prompt=settings.prompt,
                              fewshots=settings.fewshots, max_steps=settings.max_steps,
                              display=settings.pool_display, budget=view.budget_line)


def revise_messages(previous: ConductorTurn, answer: str,
                    settings: RunSettings) -> list[Message]:
    """The recursion-round prompt after `previous`, whose workflow produced `answer`: what the
    Conductor is asked at inference, and what the recursion fine-tune prompts its policy with."""
    view = previous.view
    return recursion_messages(
        previous.messages, previous.completion, answer, prompt=settings.prompt,
        template=settings.recursion_template,
        workflow_text=previous.workflow.to_text() if previous.workflow else "(none)",
        shown_ids=view.shown_ids if view else None, max_steps=settings.max_steps,
        max_prompt_tokens=settings.max_prompt_tokens,
    )


@dataclass(frozen=True)
class ConductorTurn:
    """One Conductor call, built whole once it is over. A turn with no `messages` stands for
    a fixed workflow (a baseline's), for which no Conductor call was made."""

    round: int
    messages: list[Message]
    completion: str = ""
    workflow: Workflow | None = None
    parse_reason: str | None = None
    parse_detail: str = ""
    kept: bool = False  # recursion: the Conductor kept the previous answer
    fallback: bool = False  # the workflow is the single-step fallback, not the Conductor's
    error: str | None = None  # the Conductor call itself failed
    error_kind: str | None = None  # its WorkerError kind, or "internal"
    constrained: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    cost: float | None = None  # list price (a cached reply included); None: no price
    cache_hit: bool = False
    retries: list[dict] = field(default_factory=list)
    prefill: str = "none"  # how the backend treated the prefill (continued / as_message)
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
            "error": ({"kind": self.error_kind, "message": self.error}
                      if self.error is not None else None),
            "constrained": self.constrained,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "latency_s": self.latency_s,
            "cost": self.cost,
            "cache_hit": self.cache_hit,
            "retries": self.retries,
            "prefill": self.prefill,
            "shown_workers": self.view.pool_indices() if self.view else None,
            **({"system": self.extra["system"]} if "system" in self.extra else {}),
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
        price: Price | None = None,
    ) -> None:
        self.client = client
        self.view = view
        self.settings = settings
        self.constrained = constrained
        self.price = price

    def _grammar(self, view: PoolView, allow_empty: bool,
                 actors: Sequence[int] | None) -> str | None:
        return grammar_for(view, self.settings, allow_empty, actors=actors) \
            if self.constrained else None

    async def _generate(self, index: int, messages: list[Message], view: PoolView,
                        allow_empty: bool, sample_id: int | str,
                        actors: Sequence[int] | None = None) -> ConductorTurn:
        failed = ConductorTurn(round=index, messages=messages, constrained=self.constrained,
                               view=view, cost=self._cost(0, 0))
        start = time.perf_counter()
        try:
            resp = await self.client.chat(
                messages, grammar=self._grammar(view, allow_empty, actors), sample_id=sample_id)
        except WorkerError as exc:
            return replace(failed, error=str(exc), error_kind=exc.kind, retries=list(exc.retries),
                           latency_s=time.perf_counter() - start)
        except Exception as exc:  # a backend that did not convert its error: recorded, not raised
            return replace(failed, error=f"{type(exc).__name__}: {exc}", error_kind=INTERNAL,
                           latency_s=time.perf_counter() - start)
        return self.read(resp.text, view, index=index, messages=messages,
                         allow_empty=allow_empty, prompt_tokens=resp.prompt_tokens,
                         completion_tokens=resp.completion_tokens, latency_s=resp.latency_s,
                         cache_hit=resp.cache_hit, retries=list(resp.retries),
                         prefill=resp.prefill)

    def read(self, completion: str, view: PoolView, *, index: int = 0,
             messages: list[Message] | None = None, allow_empty: bool = False,
             prompt_tokens: int = 0, completion_tokens: int = 0, **call: object
             ) -> ConductorTurn:
        """The turn for a `completion` of the Conductor's prompt, parsed against `view` exactly
        as a completion generated here is: the Conductor's own calls use it, and so does a
        trainer that samples completions elsewhere. `call` holds the call's other record fields
        (latency_s, cache_hit, retries, prefill)."""
        return ConductorTurn(
            index, list(messages or []), completion, constrained=self.constrained, view=view,
            prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
            cost=self._cost(prompt_tokens, completion_tokens),
            **self._parse(_prefill(messages) + completion, view, allow_empty),
            **call)  # type: ignore[arg-type]

    def _cost(self, prompt_tokens: int, completion_tokens: int) -> float | None:
        return self.price.cost(prompt_tokens, completion_tokens) if self.price else None

    def _parse(self, text: str, view: PoolView, allow_empty: bool) -> dict:
        s = self.settings
        try:
            shown = parse_workflow(text, num_workers=view.id_space, max_steps=s.max_steps,
                                   access_mode=s.access_mode, allowed_workers=view.shown_ids,
                                   require_cover=s.access_cover)
        except WorkflowParseError as exc:
            if allow_empty and exc.reason == "empty":
                return {"kept": True}
            return {"parse_reason": exc.reason, "parse_detail": exc.detail}
        return {"workflow": view.to_pool_workflow(shown)}

    async def write(self, question: str, *, sample_id: int | str = 0,
                    view: PoolView | None = None,
                    actors: Sequence[int] | None = None) -> ConductorTurn:
        """Round 0: the workflow the Conductor writes for `question`, shown the workers of
        `view` (the whole pool by default); constrained, with its last step on one of
        `actors` (shown ids) when given."""
        view = view or self.view
        messages = workflow_messages(question, view, self.settings)
        return await self._generate(0, messages, view, allow_empty=False, sample_id=sample_id,
                                    actors=actors)

    async def revise(self, previous: ConductorTurn, answer: str, *,
                     sample_id: int | str = 0) -> ConductorTurn:
        """A recursion round after `previous`, whose workflow produced `answer`."""
        view = previous.view or self.view
        if view.budget is not None and view.prices is not None and previous.workflow:
            prices = dict(zip(view.pool_indices(), view.prices, strict=True))  # the plan's ids
            spent = plan_price((s.worker for s in previous.workflow.steps), prices)
            view = replace(view, budget=max(view.budget - spent, 0.0))  # what the plan left
        messages = revise_messages(previous, answer, self.settings)
        return await self._generate(previous.round + 1, messages, view, allow_empty=True,
                                    sample_id=sample_id)
