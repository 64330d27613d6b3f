"""A request's budget: how the Conductor sees it, how a plan is priced against it, and the
three ways a user gives one (podium ask, podium eval, podium serve)."""

from __future__ import annotations

import asyncio
import json
import math

import pytest
from support import podium_in_process

from podium.conductor.budget import (
    BudgetCheck,
    RequestBudget,
    call_price,
    calls_within,
    parse_budget,
)
from podium.conductor.prompt import PoolEntry, conductor_messages, format_pool
from podium.config import ModelSpec, Price, pool_from_dict
from podium.errors import ConfigError
from podium.pipeline import Pipeline
from podium.workflow.types import Step, Workflow


def priced_pool(show: bool = True, conductor: str = "one_step") -> dict:
    """Three function workers billed by the call: $0.001, $0.002, $0.004; a Conductor that
    sends every question to worker 0 (the dear one in `dear_first`)."""
    workers = [{"name": n, "backend": "function", "function": "podium.testing.workers:adder",
                "price": {"per_call": p}}
               for n, p in (("dear", 0.004), ("cheap", 0.001), ("mid", 0.002))]
    return {"conductor": {"backend": "function",
                          "function": f"podium.testing.workers:{conductor}"},
            "workers": workers, "run": {"cache": False, "show_budget": show,
                                        "fewshots": "none", "max_steps": 2}}


def test_a_call_price_is_the_flat_price_plus_the_tokens_it_is_expected_to_read_and_write():
    flat = ModelSpec(name="tool", backend="function", price=Price(per_call=0.01))
    tokens = ModelSpec(name="llm", backend="openai", price=Price(input=1.0, output=10.0),
                       max_tokens=100)
    assert call_price(flat) == 0.01
    assert call_price(tokens) == pytest.approx((500 * 1.0 + 100 * 10.0) / 1e6)
    assert call_price(ModelSpec(name="free", backend="function")) == 0.0
    assert Price(per_call=0.01).cost(1000, 1000) == pytest.approx(0.01)


@pytest.mark.parametrize(("amount", "price", "cap", "calls"), [
    (0.002, 0.001, 5, 2), (0.002, 0.002, 5, 1), (0.001, 0.002, 5, 0),
    (0.3, 0.1, 5, 3),  # 0.3 / 0.1 is 2.9999... in floating point: still three calls
    (1.0, 0.001, 2, 2), (None, 0.5, 3, 3), (0.0, 0.0, 4, 4)])
def test_calls_within_a_budget(amount, price, cap, calls):
    assert calls_within(amount, price, cap) == calls


def test_the_pool_lines_say_how_many_calls_the_budget_pays_for():
    pool = [PoolEntry(0, "dear", calls=0), PoolEntry(1, "cheap", calls=1),
            PoolEntry(2, "mid", calls=2)]
    assert format_pool(pool) == "Model id 0: 0 calls\nModel id 1: 1 call\nModel id 2: 2 calls"
    assert format_pool(pool, "names").splitlines()[1] == "Model id 1: cheap, 1 call"
    shown = conductor_messages("What is 2 + 3?", pool, prompt="compact", fewshots="none",
                               budget="Budget: $0.002")[1]["content"]
    assert "Models:\nBudget: $0.002\nModel id 0: 0 calls\n" in shown


def test_without_show_budget_the_prompt_is_the_papers_whatever_the_budget():
    async def prompts(show: bool) -> tuple[str, str]:
        async with Pipeline(pool_from_dict(priced_pool(show))) as pipe:
            with_budget = await pipe.ask("What is 2 + 3?", budget=0.002)
            without = await pipe.ask("What is 2 + 3?")
        return (with_budget.rounds[0].conductor.messages[1]["content"],
                without.rounds[0].conductor.messages[1]["content"])

    off_budget, off_plain = asyncio.run(prompts(False))
    assert off_budget == off_plain and "Budget" not in off_plain and "call" not in off_plain
    on_budget, on_plain = asyncio.run(prompts(True))
    assert ("Budget: $0.002\nModel id 0: 0 calls\nModel id 1: 2 calls\nModel id 2: 1 call\n"
            in on_budget)
    # no budget: every worker as affordable as the step limit allows
    assert "Budget: none\nModel id 0: 2 calls\nModel id 1: 2 calls\nModel id 2: 2 calls\n" \
        in on_plain


def test_a_plan_is_priced_against_the_budget_and_the_result_says_so():
    async def go():
        async with Pipeline(pool_from_dict(priced_pool())) as pipe:
            over = await pipe.ask("What is 2 + 3?", budget=0.002)  # the Conductor picks id 0
            within = await pipe.ask("What is 2 + 3?", budget=0.004)
            plain = await pipe.ask("What is 2 + 3?")
            # a request's own price list (training's perturbed prices) decides, not the pool's
            cheap_list = await pipe.ask("What is 2 + 3?",
                                        budget=RequestBudget(0.002, (0.001, 0.004, 0.002)))
            two = await pipe.run_workflow("What is 2 + 3?", Workflow(
                (Step(1, "Add", ()), Step(2, "Add", "all"))), budget=0.003)
        return over, within, plain, cheap_list, two

    over, within, plain, cheap_list, two = asyncio.run(go())
    assert over.outcome.over_budget and over.answer == "<answer>5</answer>"
    budget = over.to_json()["budget"]
    assert {k: budget[k] for k in ("amount", "plan_price", "over", "workers_cost_usd",
                                   "spent_usd", "steps_not_called")} == {
        "amount": 0.002, "plan_price": 0.004, "over": True, "workers_cost_usd": 0.004,
        "spent_usd": 0.004, "steps_not_called": 0}
    assert budget["verdict"].startswith("Over budget")
    assert not within.outcome.over_budget
    assert within.outcome.budget_verdict.startswith("Within budget")
    assert plain.outcome.budget is None and "budget" not in plain.to_json()
    assert not cheap_list.outcome.over_budget
    assert cheap_list.outcome.budget.plan_price == 0.001
    assert cheap_list.outcome.budget.workers_cost == 0.004  # charged at the pool's prices
    assert two.outcome.budget.plan_price == pytest.approx(0.003) and not two.outcome.over_budget


def test_a_bad_budget_is_refused_with_the_fix():
    with pytest.raises(ConfigError, match="--budget 0.002"):
        RequestBudget(-1.0)
    with pytest.raises(ConfigError, match="--budget 0.002"):
        RequestBudget(math.nan)
    with pytest.raises(ConfigError, match="one price per worker"):
        RequestBudget(1.0, (0.1,)).call_prices([ModelSpec(name="a", backend="function")] * 2)
    with pytest.raises(ConfigError, match="budget must be a number of USD"):
        parse_budget("cheap", "budget")
    assert parse_budget("0.5", "budget") == 0.5 and parse_budget(None, "x") is None
    assert not BudgetCheck(0.3, 0.1 + 0.2, None).over  # 0.30000000000000004 is within 0.3


def test_podium_ask_with_a_budget_says_whether_the_plan_kept_to_it(tmp_path):
    pool = tmp_path / "pool.toml"
    pool.write_text(_toml(priced_pool()))
    ask = ("ask", "What is 2 + 3?", "--pool", str(pool))
    over = podium_in_process(*ask, "--budget", "0.002")
    assert over.returncode == 0, over.stderr
    verdict = next(line for line in over.stdout.splitlines() if "budget of" in line)
    assert verdict.startswith("Over budget") and "$0.004," in verdict and "$0.002" in verdict
    shown = podium_in_process(*ask, "--budget", "0.01", "--json")
    assert json.loads(shown.stdout)["budget"]["over"] is False
    bad = podium_in_process(*ask, "--budget", "-1")
    assert bad.returncode == 2 and "--budget 0.002" in bad.stderr


def test_podium_eval_with_a_budget_reports_plans_over_it(tmp_path):
    pool = tmp_path / "pool.toml"
    pool.write_text(_toml(priced_pool()))
    data = tmp_path / "sums.jsonl"
    data.write_text("".join(json.dumps({"question": f"What is {i} + 1?", "answer": str(i + 1)})
                            + "\n" for i in range(3)))
    out = tmp_path / "out"
    run = podium_in_process("eval", "--task", f"jsonl:{data}", "--pool", str(pool),
                            "--repeats", "1", "--budget", "0.002", "--out", str(out))
    assert run.returncode == 0, run.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["accuracy"] == 1.0  # the answers are right ...
    assert summary["budget"] == {"amount": 0.002, "over_budget": 1.0,  # ... on the dear worker
                                 "accuracy_within_budget": 0.0, "plan_price": 0.004}
    assert "100% of plans over it" in run.stdout
    again = podium_in_process("eval", "--task", f"jsonl:{data}", "--pool", str(pool),
                              "--repeats", "1", "--budget", "0.004", "--out", str(out))
    assert again.returncode != 0 and "--budget" in again.stdout + again.stderr
    refused = podium_in_process("eval", "--task", f"jsonl:{data}", "--pool", str(pool),
                                "--budget", "nan", "--out", str(tmp_path / "never"))
    assert refused.returncode == 2 and "--budget 0.002" in refused.stderr
    assert not (tmp_path / "never").exists()  # refused before anything was made


def _toml(pool: dict) -> str:
    lines = ["[conductor]\n" + "\n".join(
        f"{k} = {json.dumps(v)}" for k, v in pool["conductor"].items())]
    for w in pool["workers"]:
        lines.append(f'[[workers]]\nname = "{w["name"]}"\nbackend = "function"\n'
                     f'function = "{w["function"]}"\n'
                     f'price = {{ per_call = {w["price"]["per_call"]} }}')
    run = pool["run"]
    lines.append("[run]\n" + "\n".join(
        f"{k} = {json.dumps(v)}" for k, v in run.items()))
    return "\n\n".join(lines) + "\n"


def held_pool(seed: int) -> dict:
    """`priced_pool` with the embedded SmolLM2 as a hot, grammar-held Conductor and
    run.hold_budget on: it samples freely, and only plans that fit the budget can come out."""
    pool = priced_pool()
    pool["conductor"] = {"backend": "embedded", "model": "smollm2", "constrained": True,
                         "temperature": 1.5, "top_p": 1.0, "seed": seed, "max_tokens": 200}
    pool["run"].update(hold_budget=True, prompt="compact-defined", max_subtask_chars=24)
    return pool


@pytest.mark.parametrize(("budget", "fits"), [
    (0.001, {(1,)}),  # only the cheap worker, once
    (0.003, {(1,), (2,), (1, 1), (1, 2), (2, 1)}),  # never the dear one, never two mids
])
def test_a_held_conductor_writes_only_plans_within_its_budget(budget, fits):
    """A real model sampled hot under the grammar: whatever it picks, the plan's list price
    fits the budget (seeded draws; without the hold this Conductor writes dear plans)."""
    async def plans() -> list[tuple[int, ...]]:
        out = []
        for seed in (1, 2, 3):
            async with Pipeline(pool_from_dict(held_pool(seed))) as pipe:
                r = await pipe.ask("What is 2 + 3?", budget=budget)
            turn = r.rounds[0].conductor
            assert turn.workflow is not None and not turn.fallback, turn.completion
            assert not r.outcome.over_budget
            out.append(tuple(s.worker for s in turn.workflow.steps))
        return out

    assert set(asyncio.run(plans())) <= fits


def test_the_hold_needs_a_budget_and_leaves_the_cheapest_when_nothing_fits():
    from podium.conductor.grammar import workflow_grammar
    from tests.conductor.test_grammar import accepts

    prices = {0: 0.004, 1: 0.001, 2: 0.002}
    plan = '{}]\nsubtasks = ["Add them up"{}]\naccess_list = [[]{}]'
    one, two = (lambda i: plan.format(i, "", "")), (
        lambda i, j: plan.format(f"{i}, {j}", ', "Check the sum"', ", []"))
    held = workflow_grammar([0, 1, 2], 2, opened=True, prices=prices, budget=0.002)
    assert accepts(held, one(1)) and accepts(held, one(2)) and accepts(held, two(1, 1))
    assert not accepts(held, one(0)) and not accepts(held, two(1, 2))
    assert not accepts(held, two(2, 2))
    broke = workflow_grammar([0, 1, 2], 2, opened=True, prices=prices, budget=0.0005)
    assert accepts(broke, one(1)) and not accepts(broke, one(2))  # the cheapest, one step
    assert not accepts(broke, two(1, 1))
    revise = workflow_grammar([0, 1, 2], 2, allow_empty=True, prices=prices, budget=0.0)
    assert accepts(revise, " keep it\nmodel_id = []\nsubtasks = []\naccess_list = []")
    assert not accepts(revise, " again\nmodel_id = [" + one(1))
    with pytest.raises(ValueError, match="price"):
        workflow_grammar([0, 1], 2, prices={0: 0.1}, budget=1.0)


def test_a_revision_round_is_held_to_what_the_first_plan_left():
    """Recursion: the first plan's list price comes off the budget the revision is held to."""
    from types import SimpleNamespace

    from podium.conductor import Conductor, workflow_messages
    from podium.conductor.view import settings_view
    from podium.config import RunSettings
    from tests.conductor.test_grammar import accepts

    grammars: list[str] = []

    class Recording:
        async def chat(self, messages, grammar=None, sample_id=0):
            grammars.append(grammar)
            return SimpleNamespace(text="model_id = []\nsubtasks = []\naccess_list = []",
                                   prompt_tokens=1, completion_tokens=1, latency_s=0.0,
                                   cache_hit=False, retries=[], prefill=None)

    pool = pool_from_dict(priced_pool())
    settings = RunSettings(max_steps=2, fewshots="none", prompt="compact-defined",
                           hold_budget=True)
    view = settings_view(pool.workers, settings, None, RequestBudget(0.003))
    conductor = Conductor(Recording(), view, settings, constrained=True)
    first = conductor.read('2]\nsubtasks = ["Add them up"]\naccess_list = [[]]', view,
                           messages=workflow_messages("What is 2 + 3?", view, settings))
    assert [s.worker for s in first.workflow.steps] == [2]  # the $0.002 worker
    turn = asyncio.run(conductor.revise(first, "<answer>5</answer>"))
    assert turn.kept
    again = ' again\nmodel_id = [{}]\nsubtasks = ["Add them up"]\naccess_list = [[]]'
    assert accepts(grammars[0], again.format(1))  # $0.001 of the $0.003 is left
    assert not accepts(grammars[0], again.format(2))


def test_a_trained_conductor_on_a_pool_of_any_conductor_keeps_its_cards_hold(tmp_path):
    """`--conductor` runs a checkpoint as its card says: a Conductor trained held to budgets
    (constrained, `run.hold_budget`) stays held on a pool file whose own Conductor is neither,
    as `configs/pools/gym-priced.toml` is. SmolLM2 stands in for the trained model, sampled hot."""
    from podium.checkpoint import card_of, card_path
    from podium.config import RunSettings
    from podium.llm.embedded import bundled_gguf

    spec = priced_pool()
    spec["conductor"].update(temperature=1.5, seed=3, max_tokens=200)
    pool_file = tmp_path / "pool.toml"
    pool_file.write_text(_toml(spec))
    gguf = tmp_path / "conductor.gguf"
    gguf.symlink_to(bundled_gguf())
    trained = RunSettings(max_steps=2, fewshots="none", prompt="compact-defined",
                          show_budget=True, hold_budget=True, max_subtask_chars=24)
    card = card_of(pool_from_dict(spec), trained, constrained=True)
    card_path(gguf).write_text(json.dumps(card))
    for budget, fits in (("0.001", {(1,)}), ("0.003", {(1,), (2,), (1, 1), (1, 2), (2, 1)})):
        proc = podium_in_process("ask", "What is 2 + 3?", "--pool", str(pool_file),
                                 "--conductor", str(gguf), "--budget", budget, "--no-cache",
                                 "--json")
        assert proc.returncode == 0, proc.stderr
        data = json.loads(proc.stdout)
        turn = data["conductor"][0]
        assert turn["constrained"] is True and turn["parse_error"] is None
        assert data["budget"]["over"] is False
        assert tuple(s["worker_id"] for s in data["workflow"]) in fits
