"""Budget-conditioned training without torch: each row's drawn budget and prices, the prompt
that shows them, the reward of a plan over its budget, and the priced gym's workers."""

from __future__ import annotations

import asyncio
import random
import statistics
from dataclasses import replace

import pytest

from podium.config import load_pool
from podium.errors import ConfigError
from podium.pipeline import Pipeline
from podium.tasks.gym import GymTask
from podium.train.config import BudgetSection, DataSection, RewardSection, SubpoolSection
from podium.train.data import build_data, draw_budget
from podium.train.gym import priced_pool_toml
from podium.train.gym.priced import ACCURACY, PRICES
from podium.train.heldout import heldout_budgets
from podium.train.metrics import StepRecorder
from podium.train.reward import ConductorReward
from podium.train.rollout.settings import RolloutSettings
from podium.train.score import Scorer
from podium.workflow.types import Step, Workflow

SPEC = BudgetSection(amounts=(0.001, 0.002, 0.004), price_scale=(0.5, 2.0), price_shuffle=1.0,
                     keep_order=(("generalist", "expert"),))


@pytest.fixture(scope="module")
def priced(tmp_path_factory):
    path = tmp_path_factory.mktemp("priced") / "pool.toml"
    path.write_text(priced_pool_toml(1))
    return load_pool(str(path))


def test_each_row_draws_a_budget_and_a_price_list_that_keeps_the_held_back_order(priced):
    rng = random.Random(0)
    names = [w.name for w in priced.workers]
    g, e = names.index("generalist"), names.index("expert")
    drawn = [draw_budget(SPEC, priced, rng) for _ in range(300)]
    assert {d.amount for d in drawn} == {0.001, 0.002, 0.004}
    assert all(d.prices[g] <= d.prices[e] for d in drawn)  # never the unseen order
    orders = {tuple(sorted(range(4), key=lambda i: (d.prices[i], i))) for d in drawn}
    assert len(orders) > 4  # the rest of the order is shuffled
    scales = [sum(d.prices) / sum(PRICES.values()) for d in drawn]
    assert 0.5 <= min(scales) < 0.7 and 1.4 < max(scales) <= 2.0
    assert draw_budget(BudgetSection(), priced, rng) is None  # no [budget]: no budgets
    with pytest.raises(ConfigError, match="keep_order names \\['nobody'\\]"):
        draw_budget(SPEC.model_copy(update={"keep_order": (("nobody", "expert"),)}), priced,
                    random.Random(0))


def test_the_budget_section_is_checked():
    with pytest.raises(ValueError, match="amounts or range, not both"):
        BudgetSection(amounts=(1.0,), range=(0.1, 1.0))
    with pytest.raises(ValueError, match="0 < low <= high"):
        BudgetSection(range=(1.0, 0.1))
    assert not BudgetSection().on and BudgetSection(range=(0.1, 1.0)).on
    three = heldout_budgets(BudgetSection(range=(0.001, 0.004)))
    assert [b.amount for b in three] == pytest.approx([0.001, 0.002, 0.004])


def test_a_rows_prompt_shows_its_own_budget_and_prices(priced):
    settings = priced.run.model_copy(update={"prompt": "compact-defined"})
    data = build_data(DataSection(tasks=[{"name": "gym", "options": {
        "families": ["arithmetic", "reverse"]}, "n": 12}]), SubpoolSection(), priced, settings,
        budget=SPEC)
    for row in data.rows:
        budget = row.budget
        shown = row.messages[1]["content"].split("Models:\n", 1)[1].splitlines()
        assert shown[0] == f"Budget: ${budget.amount:.4g}"
        for i, price in enumerate(budget.prices):
            calls = min(2, int(budget.amount * (1 + 1e-9) // price))
            assert shown[1 + i] == f"Model id {i}: {calls} call{'' if calls == 1 else 's'}"


def test_a_sub_pool_row_shows_its_own_workers_with_their_affordable_calls(priced):
    settings = priced.run.model_copy(update={"prompt": "compact-defined"})
    data = build_data(DataSection(tasks=[{"name": "gym", "options": {
        "families": ["arithmetic", "reverse"]}, "n": 8}]),
        SubpoolSection(fraction=1.0, k_min=2, k_max=2, seed=3), priced, settings, budget=SPEC)
    for row in data.rows:
        budget = row.budget
        lines = row.messages[1]["content"].split("Models:\n", 1)[1].splitlines()[1:]
        assert tuple(int(line.split()[2].rstrip(":")) for line in lines) == row.workers
        for line, w in zip(lines, row.workers, strict=True):
            assert line.endswith(f"{min(2, int(budget.amount * (1 + 1e-9) // budget.prices[w]))}"
                                 f" call{'' if line.endswith(' 1 call') else 's'}")


def test_a_plan_over_its_rows_budget_scores_as_wrong_or_zero(priced):
    settings = priced.run.model_copy(update={"prompt": "compact-defined", "fallback": False})
    data = build_data(DataSection(tasks=[{"name": "gym", "options": {
        "families": ["arithmetic"]}, "n": 1}]), SubpoolSection(), priced, settings,
        budget=BudgetSection(amounts=(0.002,)))
    row = data.rows[0]
    names = [w.name for w in priced.workers]
    expert = names.index("expert")
    plan = f'{expert}]\nsubtasks = ["Add"]\naccess_list = [[]]'  # right, at $0.004

    async def go(spec: RewardSection, budgeted: bool) -> list:
        async with Pipeline(priced, settings=settings) as pipe:
            rows = [row if budgeted else replace(row, budget=None)]
            reward = ConductorReward(Scorer(pipe), data, rows, spec, RolloutSettings(group=1),
                                     StepRecorder())
            return await reward(prompts=[""], completions=[plan], completion_ids=[[1]],
                                row=[0])

    assert asyncio.run(go(RewardSection(), True)) == [0.5]
    assert asyncio.run(go(RewardSection(over_budget="zero"), True)) == [0.0]
    assert asyncio.run(go(RewardSection(), False)) == [1.0]  # no budget: right is right


def test_the_priced_workers_are_right_on_their_share_of_each_family(priced):
    """Exact on 200 questions of each family: the shares the priced gym documents (the hash
    that picks them is uniform, so each share is within a few points), wrong answers never
    equal the right one, and a specialist asked the other family is wrong."""
    task = GymTask(families=("arithmetic", "reverse"), split_size=400)
    items = task.items("test")

    async def shares() -> dict[tuple[str, str], float]:
        out: dict[tuple[str, str], list[bool]] = {}
        async with Pipeline(priced) as pipe:
            for w, worker in enumerate(priced.workers):
                for item in items:
                    run = await pipe.run_workflow(task.format(item),
                                                  Workflow((Step(w, item.question, ()),)))
                    graded = await task.grade(item, run.answer)
                    out.setdefault((worker.name, item.meta["family"]), []).append(
                        graded.correct)
        return {k: statistics.fmean(v) for k, v in out.items()}

    got = asyncio.run(shares())
    for (name, family), share in got.items():
        want = ACCURACY.get((name, family), 0.0)
        assert share == pytest.approx(want, abs=0.08), (name, family)


def test_held_rollouts_and_their_explored_plans_fit_each_rows_budget(priced, tokenizer):
    """`run.hold_budget`: each row's grammar admits only the plans its own budget pays for at
    its own prices, and the plans exploration draws for it fit too."""
    pytest.importorskip("xgrammar")
    from podium.conductor.budget import plan_price
    from podium.train.rollout.constrained import ConstrainedRollout
    from podium.train.rollout.explore import draw_skeletons
    from podium.train.rollout.grammars import Grammars, GrammarSpec
    from tests.conductor.test_grammar import accepts

    settings = priced.run.model_copy(update={"prompt": "compact-defined", "hold_budget": True})
    data = build_data(DataSection(tasks=[{"name": "gym", "options": {
        "families": ["arithmetic", "reverse"]}, "n": 16}]), SubpoolSection(), priced, settings,
        budget=SPEC)
    rows = [replace(r, prompt=f"P{i}") for i, r in enumerate(data.rows)]
    grammars = Grammars(tokenizer, len(tokenizer), priced, settings)
    rollout = ConstrainedRollout(grammars, tokenizer, rows, RolloutSettings(
        group=4, credit="plan", explore=0.5))
    prompts = [r.prompt for r in rows for _ in range(4)]
    skeletons = rollout.skeletons(prompts)
    assert sum(s is not None for s in skeletons) == len(rows) * 2
    one = '{}]\nsubtasks = ["Add them up"]\naccess_list = [[]]'
    seen = set()
    for prompt, skeleton in zip(prompts, skeletons, strict=True):
        budget = rollout.rows[prompt].budget
        limit, cheapest = budget.amount * (1 + 1e-9), min(budget.prices)
        broke = cheapest > limit  # no worker fits alone: one step of the cheapest
        seen.add(broke)
        if skeleton is not None:
            assert (skeleton[0] in {(i,) for i, p in enumerate(budget.prices) if p == cheapest}
                    if broke else plan_price(skeleton[0], budget.prices) <= limit)
        text = grammars.text(GrammarSpec((), budget=grammars.held(rollout.rows[prompt])))
        for i, price in enumerate(budget.prices):
            assert accepts(text, one.format(i)) == (price == cheapest if broke else price <= limit)
            seen.add(("refused", price > limit))
    assert {True, False, ("refused", True), ("refused", False)} <= seen
    unheld = Grammars(tokenizer, len(tokenizer), priced, settings.model_copy(
        update={"hold_budget": False}))
    assert unheld.held(rows[0]) is None
    # too few plans fit to draw them: the rest are one step of a worker that fits alone
    alone = draw_skeletons(random.Random(0), [0, 1, 2], 2, 6, fits=lambda ids: ids == (1,))
    assert alone == [((1,), ("[]",))] * 6


def test_a_held_recursion_round_is_held_to_what_its_first_plan_left(priced, tokenizer):
    """The recursion fine-tune under `run.hold_budget`: round 0 is held to the row's budget,
    the revision to that budget less the round-0 plan's list price."""
    pytest.importorskip("xgrammar")
    from podium.conductor.budget import RequestBudget
    from podium.train.config import RecursionSection
    from podium.train.rollout.grammars import Grammars
    from podium.train.rollout.recursion import RecursionRollout
    from podium.train.rollout.row import Row

    settings = priced.run.model_copy(update={"prompt": "compact-defined", "hold_budget": True})
    grammars = Grammars(tokenizer, len(tokenizer), priced, settings)
    prices = (0.004, 0.001, 0.002, 0.001)
    row = Row([], "Q", "gym", "0", budget=RequestBudget(0.004, prices), prompt="P")
    rollout = RecursionRollout(None, RolloutSettings(  # no scorer: only the grammars asked
        group=2, recursion=RecursionSection(fraction=0.5)), settings, tokenizer, [row], grammars)
    asked = [*rollout.specs([row], False), *rollout.specs([row], True, [0.003])]
    assert [s.budget.amount for s in asked] == pytest.approx([0.004, 0.001])
    assert [s.revise for s in asked] == [False, True]
    assert asked[1].budget.prices == prices
