"""Costs that add up, and budget verdicts that say what they judged.

A model without a price leaves the priced calls' sum standing (named, never a blank total);
the budget judges the plan's list price, before any call, and the verdict says that price,
the budget and what the workers' calls then cost. Function workers (podium.testing.workers)
run every case exactly; one check runs the priced gym's pool file with its embedded Conductor.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from support import podium_in_process

from podium.config import load_pool, pool_from_dict
from podium.eval.summary import summarize
from podium.pipeline import Pipeline, RunResult
from podium.workflow.types import Step, Workflow

ROOT = Path(__file__).resolve().parents[1]
QUESTION = "What is 2 + 3?"
ADDER = "podium.testing.workers:adder"


def pool_spec(*, conductor_price: dict | None = None, run: dict | None = None) -> dict:
    """A Conductor that sends every question to worker 0 (no price unless given); workers
    dear ($0.004 a call), cheap ($0.001) and mystery (no price)."""
    conductor = {"backend": "function", "function": "podium.testing.workers:one_step"}
    if conductor_price is not None:
        conductor["price"] = conductor_price
    workers = [{"name": "dear", "backend": "function", "function": ADDER,
                "price": {"per_call": 0.004}},
               {"name": "cheap", "backend": "function", "function": ADDER,
                "price": {"per_call": 0.001}},
               {"name": "mystery", "backend": "function", "function": ADDER}]
    return {"conductor": conductor, "workers": workers,
            "run": {"cache": False, "fewshots": "none", **(run or {})}}


def ask(spec: dict, budget: float | None = None) -> RunResult:
    async def go() -> RunResult:
        async with Pipeline(pool_from_dict(spec)) as pipe:
            return await pipe.ask(QUESTION, budget=budget)

    return asyncio.run(go())


def run_plan(spec: dict, workers: list[int], budget: float | None = None) -> RunResult:
    """`workers` as a chain of steps, each seeing the ones before (so they run in order)."""
    plan = Workflow(tuple(Step(w, "Add them up", "all" if i else ())
                          for i, w in enumerate(workers)))

    async def go() -> RunResult:
        async with Pipeline(pool_from_dict(spec)) as pipe:
            return await pipe.run_workflow(QUESTION, plan, budget=budget)

    return asyncio.run(go())


# ------------------------------------------------------------------------- totals that add up


def test_an_unpriced_conductor_leaves_the_workers_cost_standing():
    result = ask(pool_spec())
    out = result.outcome
    assert out.answer == "<answer>5</answer>"
    assert out.used.cost is None  # the whole is not known ...
    assert out.used.known_cost == pytest.approx(0.004)  # ... but its priced part is
    assert out.used.unpriced == (("conductor", 1),)
    assert out.workers_used.cost == pytest.approx(0.004) and out.workers_used.calls == 1
    assert out.conductor.cost is None and out.conductor.known_cost == 0.0
    data = result.to_json()
    assert data["used"]["cost_usd"] is None and data["used"]["known_cost_usd"] == 0.004
    assert data["used"]["unpriced"] == {"conductor": 1}
    assert data["used_by"]["workers"]["cost_usd"] == 0.004
    assert data["used_by"]["workers"]["unpriced"] == {}
    assert data["paid"]["known_cost_usd"] == 0.004  # nothing came from the cache


def test_a_priced_conductor_makes_the_total_whole():
    out = ask(pool_spec(conductor_price={"per_call": 0.0005})).outcome
    assert out.used.cost == pytest.approx(0.0045) and out.used.unpriced == ()
    assert out.to_json()["used"]["cost_usd"] == 0.0045  # summed without float noise


def test_an_unpriced_worker_is_counted_by_name_and_the_priced_ones_still_add_up():
    result = run_plan(pool_spec(), [0, 2, 2, 1])  # dear, mystery twice, cheap
    out = result.outcome
    assert out.used.calls == 4  # a fixed workflow: no Conductor call
    assert out.workers_used.cost is None
    assert out.workers_used.known_cost == pytest.approx(0.005)
    assert dict(out.workers_used.unpriced) == {"mystery": 2}


# ------------------------------------------------------------------------- budget verdicts


def test_the_verdict_judges_the_plans_list_price_and_says_what_the_calls_cost():
    """A cap stops the chain after two calls: the budget judged the whole plan's list price
    ($0.01), over $0.005, while the calls made cost $0.002."""
    spec = pool_spec(run={"max_calls": 2})
    result = run_plan(spec, [1, 1, 0, 0], budget=0.005)
    out = result.outcome
    assert out.stopped and out.stopped.startswith("cap")
    budget = result.to_json()["budget"]
    assert budget["plan_price"] == 0.01 and budget["amount"] == 0.005 and budget["over"]
    assert budget["spent_usd"] == 0.002 and budget["steps_not_called"] == 2
    assert budget["workers_cost_usd"] == 0.002
    verdict = budget["verdict"]
    assert verdict == out.budget_verdict and verdict.startswith("Over budget")
    # the list price, then the budget it was judged against, then what was spent
    at = [verdict.index(x) for x in ("$0.01,", "$0.005", "$0.002", "2 of the plan's 4 steps")]
    assert at == sorted(at)


def test_a_plan_within_budget_says_so_beside_what_it_cost():
    out = ask(pool_spec(), budget=0.004).outcome
    assert not out.over_budget
    assert out.budget_verdict is not None and out.budget_verdict.startswith("Within budget")
    assert out.spent.known == pytest.approx(0.004) and out.spent.not_called == 0
    assert "$0.004" in out.budget_verdict


def test_the_verdict_names_a_worker_without_a_price():
    budget = run_plan(pool_spec(), [0, 2], budget=0.01).to_json()["budget"]
    assert budget["over"] is False and budget["plan_price"] == 0.004  # no price lists as 0
    assert budget["spent_usd"] == 0.004 and budget["spent_unpriced"] == {"mystery": 1}
    assert budget["workers_cost_usd"] is None  # the whole is not known
    assert "mystery's 1 call has no price" in budget["verdict"]


def test_a_token_priced_call_costs_what_it_used_not_its_estimate():
    """A call's list price estimates 500 prompt tokens and max_tokens out; the call then costs
    the tokens it used: the budget judged the estimate."""
    spec = pool_spec()
    spec["workers"] = [{"name": "llm", "backend": "function", "max_tokens": 100,
                        "function": "podium.testing.workers:one_step_counted",
                        "price": {"input": 1.0, "output": 10.0}}]
    result = run_plan(spec, [0], budget=0.001)
    step = result.rounds[0].execution.steps[0]
    used = (step.prompt_tokens * 1.0 + step.completion_tokens * 10.0) / 1e6
    budget = result.to_json()["budget"]
    assert budget["plan_price"] == pytest.approx((500 * 1.0 + 100 * 10.0) / 1e6)  # $0.0015
    assert budget["over"] is True and budget["spent_usd"] == pytest.approx(used)
    assert budget["spent_usd"] < 0.001  # the calls themselves cost less than the budget
    assert "estimates a call's tokens" in budget["verdict"]


# ------------------------------------------------------------------------- what people read


@pytest.fixture
def pool_file(tmp_path) -> Path:
    path = tmp_path / "pool.toml"
    spec = pool_spec()
    lines = ['[conductor]\nbackend = "function"\n'
             'function = "podium.testing.workers:one_step"\n']
    for w in spec["workers"]:
        price = (f'price = {{ per_call = {w["price"]["per_call"]} }}\n'
                 if "price" in w else "")
        lines.append(f'[[workers]]\nname = "{w["name"]}"\nbackend = "function"\n'
                     f'function = "{ADDER}"\n{price}')
    lines.append("[run]\ncache = false\nfewshots = \"none\"\n")
    path.write_text("\n".join(lines))
    return path


def test_podium_ask_sums_what_it_can_and_names_what_has_no_price(pool_file):
    ask_ = ("ask", QUESTION, "--pool", str(pool_file), "--budget", "0.002")
    shown = podium_in_process(*ask_, columns=400)
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert "cost at least $0.004" in text
    assert "the Conductor (function podium.testing.workers:one_step) has no price" in text
    assert "workers 1 call · 0 tokens · $0.004" in text
    verdict = next(line for line in text.splitlines() if "budget of" in line)
    assert verdict.startswith("Over budget") and "$0.004," in verdict and "$0.002" in verdict
    data = json.loads(podium_in_process(*ask_, "--json").stdout)
    assert data["used"]["known_cost_usd"] == 0.004 and data["used"]["unpriced"] == {"conductor": 1}
    assert data["used_by"]["workers"]["cost_usd"] == 0.004
    assert data["budget"]["spent_usd"] == 0.004 and data["budget"]["verdict"] in text


def test_the_served_reply_carries_the_known_sum_and_what_has_no_price():
    from podium.serve.reply import podium_json

    field = json.loads(json.dumps(podium_json(ask(pool_spec(), budget=0.004))))
    assert field["cost_usd"] is None and field["known_cost_usd"] == 0.004
    assert field["workers_cost_usd"] == 0.004 and field["unpriced"] == {"conductor": 1}
    assert field["budget"]["over"] is False and field["budget"]["spent_usd"] == 0.004


def test_an_eval_summary_adds_up_the_known_costs(pool_file, tmp_path):
    data = tmp_path / "sums.jsonl"
    data.write_text("".join(json.dumps({"question": f"What is {i} + 1?", "answer": str(i + 1)})
                            + "\n" for i in range(3)))
    out = tmp_path / "out"
    run = podium_in_process("eval", "--task", f"jsonl:{data}", "--pool", str(pool_file),
                            "--repeats", "1", "--out", str(out))
    assert run.returncode == 0, run.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["accuracy"] == 1.0
    assert summary["cost_per_item"] is None  # the Conductor has no price ...
    assert summary["known_cost_per_item"] == pytest.approx(0.004)  # ... the rest adds up
    assert summary["workers_cost_per_item"] == pytest.approx(0.004)
    assert summary["paid_known_cost"] == pytest.approx(0.012)
    assert summary["unpriced"] == {"conductor": 3}


def test_a_summary_reads_records_written_before_the_known_cost():
    old = {"item": "a", "repeat": 0, "status": "ok", "correct": True,
           "used": {"calls": 2, "total_tokens": 5, "cost_usd": 0.003},
           "paid": {"calls": 2, "total_tokens": 5, "cost_usd": None}}
    summary = summarize([old])
    assert summary.known_cost_per_item == 0.003 and summary.cost_per_item == 0.003
    assert summary.paid_known_cost is None and summary.unpriced == {}


# ------------------------------------------------------------------------- the priced gym


def test_the_priced_gym_pool_holds_its_untrained_conductor_to_the_budget():
    pool = load_pool(ROOT / "configs" / "pools" / "gym-priced.toml")
    assert pool.conductor.constrained and pool.run.hold_budget and pool.run.show_budget
    assert pool.conductor.price is not None  # a whole total: the Conductor runs here, free
    assert all(w.price is not None and w.price.per_call > 0 for w in pool.workers)


@pytest.mark.parametrize("trained", [True, False])
def test_a_trained_conductor_on_the_priced_gym_runs_as_its_card_says(tmp_path, trained):
    """The card is over the pool file: a Conductor trained under the grammar and the hold
    keeps both; one trained without them (the `shown` arm) gets neither from the pool."""
    from podium.checkpoint import card_of, card_path, with_conductor
    from podium.config import RunSettings
    from podium.llm.embedded import bundled_gguf

    pool = load_pool(ROOT / "configs" / "pools" / "gym-priced.toml")
    gguf = tmp_path / "conductor.gguf"
    gguf.symlink_to(bundled_gguf())
    settings = RunSettings(prompt="compact-defined", fewshots="none", max_steps=2,
                           show_budget=True, hold_budget=trained)
    card_path(gguf).write_text(json.dumps(card_of(pool, settings, constrained=trained)))
    run = with_conductor(pool, str(gguf))
    assert run.conductor.constrained is trained and run.run.hold_budget is trained
    assert run.run.prompt == "compact-defined"  # the card's prompt, not the pool's
    assert run.conductor.price == pool.conductor.price


def test_the_readme_budget_example_writes_a_plan_the_budget_pays_for():
    """The untrained embedded Conductor on the priced gym: under the grammar and the hold its
    plan fits $0.001 (one call of a $0.001 worker), and every cost is known."""
    proc = podium_in_process("ask", "What is 37 + 58?", "--pool",
                             str(ROOT / "configs" / "pools" / "gym-priced.toml"),
                             "--budget", "0.001", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    turn = data["conductor"][0]
    assert turn["constrained"] is True and turn["parse_error"] is None and not data["fallback"]
    assert tuple(s["worker_id"] for s in data["workflow"]) in {(1,), (3,)}  # the $0.001 ones
    assert data["budget"]["over"] is False and data["budget"]["plan_price"] == 0.001
    assert data["used"]["cost_usd"] == 0.001 and data["used"]["unpriced"] == {}
