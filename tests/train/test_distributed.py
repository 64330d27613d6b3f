"""Data-parallel training for real: two processes (gloo, torchrun) against one, on one batch.

A tiny Llama built from a config with the bundled tokenizer is the policy; the workers are
Python functions (the adder is right, zero is wrong). Sampling is replaced by fixed completions
(`distributed_step.py`), so one process and two see the same 12 rollouts; everything else is
`podium train` as a user runs it. The batch is laid out so that the two processes' micro-batches
hold different numbers of rows with an advantage (process 0: 2 of 6, process 1: 6 of 6), the
case that put TRL's collectives out of step, and one group is split over both processes.
The two-process job is started as two torchrun "nodes" of one process each on this host, as a
multi-node job is. Both jobs train overlapped (`[grpo] overlap`: the second step's batch is
generated and its workflows started during the first), two steps, then a third from
`--resume`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from distributed_step import RIGHT, WRONG  # noqa: E402
from support import free_port, tiny_llama  # noqa: E402

from podium.checkpoint import CARD  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

POOL = """
[conductor]
backend = "embedded"

[[workers]]
name = "zero"
backend = "function"
function = "podium.testing.workers:zero"

[[workers]]
name = "adder"
backend = "function"
function = "podium.testing.workers:adder"

[run]
cache = false
"""

CONFIG = """
[model]
path = "{model}"

[pool]
file = "{pool}"

[[data.tasks]]
name = "jsonl:{data}"
split = "all"
options = {{ grader = "numeric" }}

[run]
prompt = "compact"
fewshots = "none"
max_steps = 1

[grpo]
max_steps = 3
overlap = true
questions_per_step = 3
generations = 4
per_device_batch = 2
loss_type = "grpo"            # a mean per completion: the same however rows are grouped
learning_rate = 1e-3
lr_scheduler = "constant"     # the same rate whether a run is 1 step or 2
warmup_ratio = 0.0
max_grad_norm = 1e9
save_steps = 1
save_total_limit = 2          # both checkpoints kept, to check each was written once
seed = 7

[output]
dir = "{out}"
transcripts_per_step = 3
"""

# rollout j of a step; groups of 4: all right | right, wrong, right, unparseable | right, wrong x3
COMPLETIONS = [RIGHT] * 4 + [RIGHT, WRONG, RIGHT, "no lists"] + [RIGHT] + [WRONG] * 3


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tokenizer) -> Path:
    root = tmp_path_factory.mktemp("distributed")
    model = tiny_llama(tokenizer)
    model.save_pretrained(root / "tiny")
    tokenizer.save_pretrained(root / "tiny")
    (root / "pool.toml").write_text(POOL)
    (root / "sums.jsonl").write_text("".join(
        json.dumps({"question": f"What is {i} + {i + 3}?", "answer": str(2 * i + 3)}) + "\n"
        for i in range(6)))
    (root / "completions.json").write_text(json.dumps(COMPLETIONS))
    return root


def config(root: Path, name: str) -> Path:
    path = root / f"{name}.toml"
    path.write_text(CONFIG.format(model=root / "tiny", pool=root / "pool.toml",
                                  data=root / "sums.jsonl", out=root / name))
    return path


def command(root: Path, name: str, *options: str) -> list[str]:
    return [str(HERE / "distributed_step.py"), str(config(root, name)),
            str(root / "completions.json"), str(root / f"{name}.grads"), *options]


def start(args: list[str], root: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(args, env=env, cwd=root, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def two_nodes(root: Path, *options: str) -> list[subprocess.Popen]:
    """A job of two torchrun "nodes" on this host, one process each."""
    port = free_port()
    return [start([sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
                   "--node_rank", str(rank), "--nproc_per_node", "1", "--master_addr",
                   "127.0.0.1", "--master_port", str(port), *command(root, "two", *options)],
                  root) for rank in (0, 1)]


def finish(*processes: subprocess.Popen) -> list[str]:
    outputs = [p.communicate(timeout=600)[0] for p in processes]
    for p, out in zip(processes, outputs, strict=True):
        assert p.returncode == 0, out[-6000:]
    return outputs


def one_process(root: Path, *options: str) -> str:
    """The one-process job, run here as distributed_step.py runs it (no process to start)."""
    from distributed_step import FixedRollout, SaveGradients
    from typer.testing import CliRunner

    import podium.train.trainer as trainer_module
    from podium.cli.main import app

    build = trainer_module.build

    def fixed(*args, **kwargs):
        plan = build(*args, **kwargs)
        if plan.trainer is not None:
            texts = json.loads((root / "completions.json").read_text())
            plan.trainer.rollout_func = FixedRollout(texts, plan.trainer.processing_class)
            plan.trainer.add_callback(SaveGradients(str(root / "one.grads")))
        return plan

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(trainer_module, "build", fixed)
        mp.setenv("COLUMNS", "400")
        result = CliRunner().invoke(app, ["train", "--config", str(config(root, "one")),
                                          "--debug", *options], catch_exceptions=False)
    assert result.exit_code == 0, result.output[-6000:]
    return result.output


def launch(root: Path) -> tuple[str, list[str], list[str]]:
    """Two steps, then a --resume for the third: the two-node job, and while it runs, the same
    in one process."""
    nodes = two_nodes(root, "--set", "grpo.max_steps=2")
    one = one_process(root, "--set", "grpo.max_steps=2")
    first = finish(*nodes)
    nodes = two_nodes(root, "--resume")
    one_process(root, "--resume")
    return one, first, finish(*nodes)


def metrics(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def runs(setup):
    return setup, *launch(setup)


def test_two_processes_make_the_step_one_process_makes(runs):
    root, one, nodes, _ = runs
    assert "layout      2 process(es) on 2 node(s) x 6 rollouts each" in nodes[0]
    assert "groups split over processes in pieces of 2/4" in nodes[0]
    assert "layout      1 process(es) x 12 rollouts each" in one
    assert "Plan" not in nodes[1]  # the plan and the result: the main process only
    ours, theirs = torch.load(root / "two.grads"), torch.load(root / "one.grads")
    assert ours.keys() == theirs.keys() and len(ours) > 0
    assert any(bool(g.abs().sum() > 0) for g in theirs.values())
    for name, grad in theirs.items():
        torch.testing.assert_close(ours[name], grad, rtol=1e-4, atol=1e-8, msg=name)
    a, b = metrics(root / "one"), metrics(root / "two")
    assert [m["step"] for m in a] == [m["step"] for m in b] == [1, 2, 2, 3, 3]  # and summaries
    a, b = [m for m in a if "reward" in m], [m for m in b if "reward" in m]
    # the second step's batch was generated before the first update; after --resume, afresh
    assert [m["podium/staleness"] for m in a] == [m["podium/staleness"] for m in b] == [0, 1, 0]
    for x, y in zip(a, b, strict=True):
        assert x["loss"] == pytest.approx(y["loss"], rel=1e-4, abs=1e-7)
        podium = {k: v for k, v in x.items() if k.startswith("podium/") or k.startswith("reward")}
        assert podium == pytest.approx({k: y[k] for k in podium}), x
        assert set(podium) == {k for k in y if k.startswith("podium/") or k.startswith("reward")}
    first = a[0]
    assert first["podium/correct"] == pytest.approx(7 / 12)  # every process's rollouts
    assert first["podium/parse/unparseable"] == pytest.approx(1 / 12)  # one process had it


def test_a_resumed_job_ends_where_one_process_does(runs):
    """The job's third step came from --resume (its optimizer state, on every process): its
    final weights are the one-process run's."""
    root, _, _, resumed = runs
    assert "Plan" in resumed[0]
    from safetensors.torch import load_file

    a, b = (load_file(str(root / run / "final" / "model.safetensors")) for run in ("one", "two"))
    assert a.keys() == b.keys()
    start = load_file(str(root / "tiny" / "model.safetensors"))
    assert any(not torch.equal(a[n], start[n]) for n in a)  # it trained
    # Adam divides each gradient by its own running size, so where a gradient is near zero a
    # sum taken in another order (gloo's) can move a weight by a visible share of the rate
    # (1e-3): a handful of weights may differ by up to 2% of it, every other one as tightly as
    # before. A lost or doubled optimizer state moves whole tensors by about the rate.
    loose = 0
    for name, weight in a.items():
        torch.testing.assert_close(b[name], weight, rtol=1e-4, atol=2e-5, msg=name)
        loose += int((~torch.isclose(b[name], weight, rtol=1e-4, atol=1e-6)).sum())
    assert loose <= 20, f"{loose} weights differ by more than 1e-6"


def test_transcripts_and_checkpoints_are_written_once_for_the_whole_job(runs):
    root, _, _, _ = runs
    one = [json.loads(x) for x in (root / "one" / "transcripts.jsonl").read_text().splitlines()]
    two = [json.loads(x) for x in (root / "two" / "transcripts.jsonl").read_text().splitlines()]
    assert [(t["step"], t["reward"]) for t in two] == [(t["step"], t["reward"]) for t in one]
    assert {t["reward"] for t in two if t["step"] == 1} == {1.0, 0.5, 0.0}  # from both ranks
    for step in ("checkpoint-2", "checkpoint-3", "final"):
        card = json.loads((root / "two" / step / CARD).read_text())
        assert card["steps"] == (2 if step == "checkpoint-2" else 3)
