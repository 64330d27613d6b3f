"""How a step's rollouts are laid out over the processes of a job, and the layouts refused
(no torch: the layout is arithmetic on the config and the launcher's variables)."""

from __future__ import annotations

import pytest

from podium.errors import ConfigError
from podium.train.config import train_config_from_dict
from podium.train.rollout.layout import Launch, check, layout_of


def config(**sections):
    return train_config_from_dict({"data": {"tasks": [{"name": "gsm8k"}]}} | sections)


PAPER = {"questions_per_step": 4, "generations": 64, "per_device_batch": 4}


def test_the_layout_of_the_paper_recipe_on_one_node_and_on_two():
    one = layout_of(config(grpo=PAPER), Launch(2, 1, 0))
    assert (one.per_process, one.accumulation, one.whole_groups) == (128, 32, True)
    assert one.line() == "2 process(es) x 128 rollouts each (4 per pass x 32 accumulated; " \
                         "whole groups)"
    many = layout_of(config(grpo=PAPER), Launch(16, 2, 5))
    assert (many.per_process, many.accumulation, many.whole_groups) == (16, 4, False)
    assert many.pieces(5) == [16]
    assert many.line().startswith("16 process(es) on 2 node(s) x 16 rollouts each")


def test_pieces_of_groups_split_unevenly():
    layout = layout_of(config(grpo={"questions_per_step": 3, "generations": 4,
                                    "per_device_batch": 2}), Launch(2, 1, 0))
    assert layout.pieces(0) == [4, 2] and layout.pieces(1) == [2, 4]
    assert "pieces of 2/4" in layout.line()


def test_a_dry_run_lays_out_the_processes_the_recipe_asks_for(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    cfg = config(grpo={**PAPER, "processes": 16})
    assert layout_of(cfg, dry_run=True).processes == 16
    check(cfg, layout_of(cfg, dry_run=True), dry_run=True)
    with pytest.raises(ConfigError, match=r"started 1 process\(es\) and the config asks for 16"
                                          r".*torchrun --nproc_per_node N"):
        check(cfg, layout_of(cfg))  # `podium train` without a launcher
    monkeypatch.setenv("WORLD_SIZE", "16")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    launched = layout_of(cfg)
    assert (launched.processes, launched.nodes) == (16, 2)
    check(cfg, launched)


def test_layouts_that_cannot_work_are_refused_with_the_fix():
    with pytest.raises(ConfigError, match="multiple of per_device_batch x processes"):
        layout_of(config(grpo=PAPER), Launch(3, 1, 0))
    recursion = {"fraction": 0.5}
    split = {"questions_per_step": 3, "generations": 4, "per_device_batch": 1}
    # 12 rollouts on 4 processes: pieces of 3 and 1, half of which is no whole pair
    cfg = config(grpo=split, recursion=recursion)
    with pytest.raises(ConfigError, match="piece of 3 rollouts.*1.5 is not a whole number"):
        check(cfg, layout_of(cfg, Launch(4, 1, 0)))
    check(cfg, layout_of(cfg, Launch(2, 1, 0)))  # pieces of 4 and 2: whole pairs
    cfg = config(grpo=split, recursion={**recursion, "normalisation": "per_round"})
    with pytest.raises(ConfigError, match="per_round.*groups of 4 are split"):
        check(cfg, layout_of(cfg, Launch(2, 1, 0)))
    check(cfg, layout_of(cfg, Launch(1, 1, 0)))


def test_each_process_gets_its_share_of_the_remote_limits_and_an_odd_launch_is_named(
        tmp_path, monkeypatch):
    from podium.train.trainer import build

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    (tmp_path / "pool.toml").write_text("""
[conductor]
backend = "function"
function = "podium.testing.workers:zero"

[[workers]]
name = "remote"
backend = "openai"
base_url = "http://127.0.0.1:9/v1"
model = "m"
api_key_env = "PODIUM_TEST_KEY"
max_concurrency = 8
rpm = 2
""")
    (tmp_path / "q.jsonl").write_text('{"question": "1 + 1?", "answer": "2"}\n')
    monkeypatch.setenv("PODIUM_TEST_KEY", "k")
    cfg = config(pool={"file": str(tmp_path / "pool.toml")},
                 data={"tasks": [{"name": f"jsonl:{tmp_path / 'q.jsonl'}", "split": "all"}]},
                 grpo={**PAPER, "processes": 4})
    plan = build(cfg, make_trainer=False, dry_run=True)
    remote = plan.pool.workers[0]
    assert (remote.max_concurrency, remote.rpm) == (2, 1)  # 8 and 2 over 4 processes
    assert "limits      remote's rpm is 2, below the training processes 4: each process " \
           "allows 1, 4 in all" in plan.lines
    assert not any(line.startswith("launch") for line in plan.lines)
    monkeypatch.setenv("ACCELERATE_USE_CPU", "True")  # accelerate launch --cpu, no MPI
    lines = build(cfg, make_trainer=False, dry_run=True).lines
    assert any(line.startswith("launch      accelerate launched one CPU process; on CPU, "
                               "`torchrun --nproc_per_node N") for line in lines)


@pytest.mark.parametrize(("name", "machines"), [("zero3-1node", 1), ("zero3-multinode", 2)])
def test_the_accelerate_configs_launch_one_job(name, machines):
    """accelerate reads each YAML as `accelerate launch` does: DeepSpeed ZeRO-3, and across
    nodes the standard launcher (torchrun on every node, one rendezvous), not pdsh, which
    without a hostfile runs an independent job per node."""
    pytest.importorskip("accelerate")
    from pathlib import Path

    from accelerate.commands.launch import _validate_launch_command, launch_command_parser

    path = Path(__file__).resolve().parents[2] / "configs/train/accelerate" / f"{name}.yaml"
    args = launch_command_parser().parse_args(["--config_file", str(path), "train.py"])
    args, _, _ = _validate_launch_command(args)
    assert args.use_deepspeed and args.zero_stage == 3 and args.zero3_init_flag
    assert args.num_machines == machines
    if machines > 1:
        assert args.deepspeed_multinode_launcher == "standard"


def test_trl_s_config_is_built_before_the_policy_loads(tmp_path, monkeypatch):
    """Under `accelerate launch` with DeepSpeed, building GRPOConfig is what hooks ZeRO-3 into
    transformers; a policy loaded before it is loaded whole on every process."""
    pytest.importorskip("trl")
    import podium.train.model as model_module
    import podium.train.trainer as trainer_module

    calls = []
    args_of = trainer_module.grpo_args

    def grpo_args(*args, **kwargs):
        calls.append("GRPOConfig")
        return args_of(*args, **kwargs)

    def load_policy(*args, **kwargs):
        calls.append("policy")
        raise KeyboardInterrupt  # stop the build here

    monkeypatch.setattr(trainer_module, "grpo_args", grpo_args)
    monkeypatch.setattr(model_module, "load_policy", load_policy)
    (tmp_path / "q.jsonl").write_text('{"question": "1 + 1?", "answer": "2"}\n')
    cfg = config(data={"tasks": [{"name": f"jsonl:{tmp_path / 'q.jsonl'}", "split": "all"}]},
                 grpo={"questions_per_step": 1, "generations": 2},
                 output={"dir": str(tmp_path / "out")})
    with pytest.raises(KeyboardInterrupt):
        trainer_module.build(cfg)
    assert calls == ["GRPOConfig", "policy"]
