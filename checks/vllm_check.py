"""A real vLLM with podium: the GPU install line, grammar-held rollouts, a served Conductor.

`make vllm-check` runs this with podium's environment (`.venv`) and vLLM's CPU build of the
`gpu` extra's release in its own (`.venv-vllm`, made by `make vllm-venv`). Each part prints a
line and fails the check (exit 1) when it does not hold:

1. **resolve**: `pip install --dry-run --report` resolves `podium[gpu]` (vLLM, DeepSpeed and the
   `train` pins) from package metadata; the versions it chose are reported.
2. **weight sync**: an engine built as TRL builds it for colocate mode takes weights loaded
   after start-up: the policy's weights moved by noise and loaded as TRL's sync loads them, and
   vLLM's log-probabilities of a fixed text must match the moved policy's (within 1e-3) and
   differ from the original's. vLLM's CPU build packs its linear layers' weights away unless
   `podium.train.rollout.vllm.keep_cpu_weights_live` ran first, as `podium train` runs it.
3. **train**: the gym recipe (configs/train/gym-cpu.toml) trains 2 steps with
   `vllm.enabled = true`, `vllm.mode = "colocate"`: vLLM inside the training process samples
   every rollout under its own row's grammar. Holds when both steps ran, no rollout was a format
   error, a step's gradient was not vanishing (norm > 1e-3: the policy learned from them), and
   the checkpoint was written. Then 3 steps with `grpo.overlap = true` (vLLM generates each
   next step's batch ahead, with the weights synced after each update): the same, and every
   step after the first trained a batch one update old.
4. **serve**, for (a) the embedded Conductor (SmolLM2-135M-Instruct, the bundled GGUF converted
   to a Hugging Face folder) and (b) the checkpoint trained in 3: vLLM's OpenAI server loads it
   and `podium ask` runs gym questions against it with a pool whose Conductor is `backend =
   "openai"`, `grammar_style = "vllm"`, `prefill = "continue"`, `constrained = true`:
   - *valid*: every answer comes from a planned, parsed workflow;
   - *prefill continued*: the prompt tokens vLLM counted equal the chat template rendered with
     `continue_final_message` (the prefill continued in the same turn), not with a new turn;
   - *grammar enforced*: at temperature 1.0, a grammar that admits one text gets exactly that
     text back, and a malformed grammar is refused by the server (an error, not a free reply);
   - *server rollouts*: training's server-mode request (`podium.train.rollout.vllm`, through
     TRL's VLLMClient) for rows shown different parts of the pool: every completion is accepted
     token by token by its own row's grammar and has a logprob per token. (A `trl vllm-serve`
     adds weight sync, which needs CUDA: not checked here.)

    .venv/bin/python checks/vllm_check.py --vllm-python .venv-vllm/bin/python \
        [--out runs/vllm-check] [--skip-resolve] [--skip-train] [--steps 2]

It writes `report.json` in `--out`, beside the training run, each server's log and the traces.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from podium.testing.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
PODIUM = Path(sys.executable).with_name("podium")
ONE_TEXT = "model_id = [7]"
GYM_WORKERS = """
[[workers]]
name = "reverser"
backend = "function"
function = "podium.train.gym.specialists:reverser"

[[workers]]
name = "counter"
backend = "function"
function = "podium.train.gym.specialists:counter"

[[workers]]
name = "calculator"
backend = "function"
function = "podium.train.gym.specialists:calculator"
"""


def say(part: str, ok: bool, detail: str) -> bool:
    print(f"{'PASS' if ok else 'FAIL'}  {part:<28} {detail}", flush=True)
    return ok


def fmt(values: list[float | None]) -> str:
    return "[" + ", ".join("-" if v is None else f"{v:.3f}" for v in values) + "]"


def resolve(out: Path) -> dict[str, Any]:
    """pip's resolution of `podium[gpu]`, metadata only."""
    report = out / "gpu-resolve.json"
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--quiet",
                          "--ignore-installed", "--report", str(report), f"{ROOT}[gpu]"],
                         text=True, capture_output=True, check=False)
    if run.returncode:
        return {"ok": False, "error": run.stderr[-2000:]}
    chosen = {i["metadata"]["name"].lower(): i["metadata"]["version"]
              for i in json.loads(report.read_text())["install"]}
    keep = ("vllm", "deepspeed", "torch", "transformers", "trl", "xgrammar", "accelerate")
    return {"ok": True, "versions": {k: chosen.get(k) for k in keep},
            "seconds": round(time.monotonic() - started, 1)}


def train(vllm_python: Path, out: Path, steps: int, overlap: bool = False) -> dict[str, Any]:
    """The gym recipe, `steps` steps, rollouts by colocated vLLM under per-row grammars
    (`overlap`: with [grpo] overlap, each step's next batch generated by vLLM ahead)."""
    folder = out / ("train-overlap" if overlap else "train")
    shutil.rmtree(folder, ignore_errors=True)  # a fresh run, not a resume of the last check's
    started = time.monotonic()
    cmd = [str(vllm_python.with_name("podium")), "train", "--config",
           str(ROOT / "configs/train/gym-cpu.toml"), "--set", "vllm.enabled=true",
           "--set", "vllm.mode=colocate",
           "--set", f"grpo.max_steps={steps}", "--set", "grpo.save_steps=1000",
           "--set", f"output.dir={folder}", "--set", f"grpo.overlap={str(overlap).lower()}"]
    log = out / ("train-overlap.log" if overlap else "train.log")
    with log.open("w") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=vllm_env(),
                            check=False).returncode
    rows = []
    metrics = folder / "metrics.jsonl"
    if metrics.exists():
        rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    steps_seen = [r for r in rows if "reward" in r]
    errors = [r.get("podium/format_error") for r in steps_seen]
    grads = [r.get("grad_norm") or 0.0 for r in steps_seen]
    return {"ok": rc == 0 and len(steps_seen) == steps and all(e == 0 for e in errors)
            and max(grads, default=0.0) > 1e-3 and (folder / "final").is_dir(),
            "rc": rc, "steps": len(steps_seen), "format_error": errors, "grad_norm": grads,
            "reward": [r.get("reward") for r in steps_seen],
            "staleness": [r.get("podium/staleness") for r in steps_seen],
            "step_s": [round(r["step_time"], 1) for r in steps_seen if "step_time" in r],
            "seconds": round(time.monotonic() - started, 1), "log": str(log),
            "checkpoint": str(folder / "final")}


def vllm_env() -> dict[str, str]:
    # vLLM's CPU build sizes its KV cache from this (GiB); a 135M Conductor needs little
    return {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE",
                                                                   "1")}


@contextmanager
def vllm_server(vllm_python: Path, model: Path, log: Path):
    """vLLM's OpenAI server for `model`, as `conductor`; yields its base URL."""
    port = free_port()
    cmd = [str(vllm_python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
           "--served-model-name", "conductor", "--port", str(port), "--host", "127.0.0.1",
           "--max-model-len", "4096"]
    with log.open("w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=vllm_env(),
                                start_new_session=True)
    try:
        import httpx2 as httpx

        deadline = time.monotonic() + 900
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"vLLM exited with {proc.returncode}; see {log}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"vLLM was not up after 900 s; see {log}")
            time.sleep(2)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def pool_file(path: Path, base_url: str, run: str, temperature: float) -> Path:
    path.write_text(f"""[conductor]
backend = "openai"
model = "conductor"
base_url = "{base_url}"
grammar_style = "vllm"
prefill = "continue"
constrained = true
temperature = {temperature}
max_tokens = 96
{GYM_WORKERS}
[run]
{run}
""")
    return path


def card_run(checkpoint: Path) -> str:
    """A checkpoint's prompt settings (its card's `run`), as a pool file's [run] lines: a
    Conductor behind a server gets the prompt it was trained on only from the pool file."""
    from podium.checkpoint import read_card

    card = read_card(str(checkpoint)) or {}
    return "\n".join(f"{k} = {json.dumps(v)}" for k, v in card.get("run", {}).items()) \
        + "\ncache = false"


def questions(n: int) -> list[str]:
    from podium.train.gym import GymTask

    task = GymTask(families=("arithmetic", "reverse", "count>arithmetic"))
    return [item.question for item in task.items("test")[:n]]


def prompt_lengths(tokenizer: Any, messages: list[dict[str, str]]) -> tuple[int, int]:
    """Tokens of the Conductor's prompt with its prefill continued, and as a new turn."""
    def count(msgs: list[dict[str, str]], **kw: Any) -> int:
        text = tokenizer.apply_chat_template(msgs, tokenize=False, **kw)
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    continued = count(messages, continue_final_message=True, add_generation_prompt=False)
    new_turn = count(messages, add_generation_prompt=True)
    return continued, new_turn


async def grammar_probes(pool_path: Path) -> dict[str, Any]:
    """The Conductor's endpoint, through podium's own OpenAI client, with a grammar that
    admits one text and with a malformed grammar."""
    from podium.config import load_pool
    from podium.llm.registry import build_client

    client = build_client(load_pool(pool_path).conductor)
    messages = [{"role": "user", "content": "Write anything you like."}]
    try:
        held = [(await client.chat(messages, grammar=f'root ::= "{ONE_TEXT}"')).text
                for _ in range(3)]
        try:
            reply = await client.chat(messages, grammar='root ::= "unclosed')
            refused, error = False, f"answered: {reply.text[:80]!r}"
        except Exception as exc:  # noqa: BLE001 - any refusal counts, and is reported
            refused, error = True, f"{type(exc).__name__}: {str(exc)[:160]}"
    finally:
        await client.aclose()
    return {"one_text": held, "one_text_ok": all(t == ONE_TEXT for t in held),
            "malformed_refused": refused, "malformed": error}


def in_vllm(vllm_python: Path, probe: list[str], failed: dict[str, Any]) -> dict[str, Any]:
    """This script's `probe` options run in vLLM's environment; the JSON it printed last, or
    `failed` with the end of its stderr."""
    proc = subprocess.run([str(vllm_python), __file__, *probe], capture_output=True, text=True,
                          check=False, env=vllm_env())
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return {**failed, "ok": False, "error": proc.stderr[-2000:]}


def server_rollouts(vllm_python: Path, base_url: str, model: Path, pool_path: Path
                    ) -> dict[str, Any]:
    """`rollouts` below, in vLLM's environment (TRL's VLLMClient imports vLLM)."""
    return in_vllm(vllm_python, ["--rollouts", base_url, str(model), str(pool_path)],
                   {"rows": 0, "requests": 0, "held": [], "logprobs_per_token": False})


def weight_sync(vllm_python: Path, model: Path) -> dict[str, Any]:
    """`sync_probe` below, in vLLM's environment."""
    return in_vllm(vllm_python, ["--sync-probe", str(model)], {})


def sync_probe(model: Path) -> dict[str, Any]:
    """TRL's colocated weight sync, in isolation: an engine built as TRL builds it (the external
    launcher, processed log-probabilities; float32 here, so that it can match the policy) after
    `podium.train.rollout.vllm.keep_cpu_weights_live`, as `podium train` calls it; the
    policy's weights moved by noise and loaded the way TRL loads them; vLLM's log-probabilities
    of a fixed text must then be the moved policy's, not the original's."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from podium.train.rollout.vllm import keep_cpu_weights_live

    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(free_port()))
    keep_cpu_weights_live()
    from vllm import LLM, SamplingParams

    llm = LLM(model=str(model), max_model_len=512, max_num_seqs=4, seed=0, dtype="float32",
              distributed_executor_backend="external_launcher", max_num_batched_tokens=4096,
              logprobs_mode="processed_logprobs")
    ids = AutoTokenizer.from_pretrained(model)(
        "What is 37 + 58? The answer is 95. Reverse the word 'tlimpa': aplmit.")["input_ids"]

    def engine() -> Any:
        out = llm.generate([{"prompt_token_ids": ids}],
                           SamplingParams(max_tokens=1, prompt_logprobs=0), use_tqdm=False)
        return torch.tensor([next(iter(d.values())).logprob
                             for d in out[0].prompt_logprobs[1:]])

    def policy(m: Any) -> Any:
        with torch.no_grad():
            logits = m(torch.tensor([ids])).logits[0, :-1].float()
        return torch.log_softmax(logits, -1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0]

    hf = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    before = engine()
    start = (before - policy(hf)).abs().max().item()
    noise = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for _, p in hf.named_parameters():
            p.add_(0.02 * p.std() * torch.randn(p.shape, generator=noise))
    runner = llm.llm_engine.model_executor.driver_worker.model_runner
    for name, p in hf.named_parameters():  # trl/generation/vllm_generation.py, sync_weights
        runner.model.load_weights([(name, p.data)])
    llm.reset_prefix_cache()
    after = engine()
    moved, off = (after - before).abs().max().item(), (after - policy(hf)).abs().max().item()
    return {"ok": start < 1e-3 and off < 1e-3 and moved > 0.05, "start_diff": start,
            "moved": moved, "synced_diff": off}


def rollouts(base_url: str, model: Path, pool_path: Path) -> dict[str, Any]:
    """podium's server-mode rollout request (`podium.train.rollout.vllm.request_all`, through
    TRL's VLLMClient) for rows that see different parts of the pool: each completion must be
    accepted token by token by its own row's grammar, with one logprob per token."""
    import xgrammar as xgr
    from transformers import AutoTokenizer
    from trl.generation.vllm_client import VLLMClient

    from podium.conductor import grammar_for, workflow_messages
    from podium.config import load_pool
    from podium.train.data import view_of
    from podium.train.rollout.vllm import request_all

    tokenizer = AutoTokenizer.from_pretrained(str(model))
    pool = load_pool(pool_path)
    settings = pool.run
    shown = ([0, 1, 2], [2], [0, 2], [0, 1, 2])
    ids, grammars = [], []
    for question, workers in zip(questions(len(shown)), shown, strict=True):
        view = view_of(pool, settings, workers)
        text = tokenizer.apply_chat_template(workflow_messages(question, view, settings),
                                             tokenize=False, continue_final_message=True,
                                             add_generation_prompt=False)
        ids.append(tokenizer(text, add_special_tokens=False)["input_ids"])
        grammars.append(grammar_for(view, settings))
    client = VLLMClient(base_url=base_url.removesuffix("/v1"), connection_timeout=30)
    base = {"n": 1, "repetition_penalty": 1.0, "temperature": 1.0, "top_p": 1.0, "top_k": 0,
            "min_p": 0.0, "max_tokens": 96, "logprobs": 0}
    completions, logprobs = request_all(client, base, ids, grammars)
    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo.from_huggingface(tokenizer))
    held = []
    for completion, grammar in zip(completions, grammars, strict=True):
        matcher = xgr.GrammarMatcher(compiler.compile_grammar(grammar))
        accepted = all(matcher.accept_token(t) for t in completion)
        held.append(accepted and (matcher.is_terminated() or len(completion) == 96))
    return {"rows": len(ids), "requests": len(set(grammars)), "held": held,
            "texts": [tokenizer.decode(c, skip_special_tokens=True) for c in completions],
            "logprobs_per_token": logprobs is not None and all(
                len(lp) == len(c) for lp, c in zip(logprobs, completions, strict=True)),
            "ok": all(held) and logprobs is not None and all(
                len(lp) == len(c) for lp, c in zip(logprobs, completions, strict=True))}


def serve(name: str, model: Path, vllm_python: Path, out: Path, run: str, n: int
          ) -> dict[str, Any]:
    """vLLM serves `model`; podium asks it `n` gym questions and probes its grammar."""
    from transformers import AutoTokenizer

    started = time.monotonic()
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(str(model))
    result: dict[str, Any] = {"model": str(model)}
    with vllm_server(vllm_python, model, folder / "vllm.log") as base_url:
        result["up_s"] = round(time.monotonic() - started, 1)
        pool = pool_file(folder / "pool.toml", base_url, run, 0.0)
        asks = []
        for i, question in enumerate(questions(n)):
            trace = folder / f"trace-{i}.json"
            proc = subprocess.run([str(PODIUM), "ask", question, "--pool", str(pool),
                                   "--no-cache", "--trace", str(trace), "--json"],
                                  capture_output=True, text=True, check=False)
            t = json.loads(trace.read_text()) if trace.exists() else {}
            call = (t.get("conductor") or [{}])[0]
            continued, new_turn = (prompt_lengths(tokenizer, call["messages"])
                                   if call.get("messages") else (None, None))
            asks.append({
                "question": question, "rc": proc.returncode, "error": proc.stderr[-600:],
                "status": t.get("status"),
                "workflow": [(s["worker"], s["access"]) for s in t.get("workflow") or []],
                "completion": call.get("completion"), "parse_error": call.get("parse_error"),
                "prefill": call.get("prefill"), "prompt_tokens": call.get("prompt_tokens"),
                "template_continued": continued, "template_new_turn": new_turn,
                "answer": t.get("answer")})
        probes = asyncio.run(grammar_probes(pool_file(folder / "pool-hot.toml", base_url, run,
                                                      1.0)))
        result["rollouts"] = server_rollouts(vllm_python, base_url, model, pool)
    result.update(asks=asks, **probes, seconds=round(time.monotonic() - started, 1))
    result["valid"] = all(a["rc"] == 0 and a["status"] == "ok" and a["workflow"]
                          and a["parse_error"] is None for a in asks)
    result["prefill_continued"] = all(
        a["prefill"] == "continued" and a["prompt_tokens"] == a["template_continued"]
        != a["template_new_turn"] for a in asks)
    result["ok"] = (result["valid"] and result["prefill_continued"] and result["one_text_ok"]
                    and result["malformed_refused"] and result["rollouts"]["ok"])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vllm-python", type=Path, default=ROOT / ".venv-vllm/bin/python")
    parser.add_argument("--out", type=Path, default=ROOT / "runs/vllm-check")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--questions", type=int, default=3)
    parser.add_argument("--skip-resolve", action="store_true")
    parser.add_argument("--skip-train", action="store_true",
                        help="serve the checkpoint a previous check trained (OUT/train/final)")
    parser.add_argument("--rollouts", nargs=3, metavar=("BASE_URL", "MODEL", "POOL"),
                        help="(run by the check in vLLM's environment) the server-mode "
                        "rollout probe alone, printed as JSON")
    parser.add_argument("--sync-probe", type=Path, metavar="MODEL",
                        help="(run by the check in vLLM's environment) the weight sync probe "
                        "alone, printed as JSON")
    args = parser.parse_args()
    if args.sync_probe:
        print(json.dumps(sync_probe(args.sync_probe)))
        return 0
    if args.rollouts:
        url, model, pool = args.rollouts
        print(json.dumps(rollouts(url, Path(model), Path(pool))))
        return 0
    if not args.vllm_python.exists():
        print(f"No vLLM environment at {args.vllm_python}: run `make vllm-venv` first.")
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {}
    ok = True
    if not args.skip_resolve:
        r = report["resolve"] = resolve(args.out)
        ok &= say("resolve podium[gpu]", r["ok"], ", ".join(
            f"{k} {v}" for k, v in r.get("versions", {}).items()) or r.get("error", ""))
    from podium.train.model import resolve_model

    w = report["weight_sync"] = weight_sync(args.vllm_python, Path(resolve_model("smollm2")))
    ok &= say("weight sync: colocate", w["ok"],
              f"vLLM against the policy {w['start_diff']:.1e} at start; moved {w['moved']:.2f} "
              f"by noisy weights loaded as TRL loads them, then {w['synced_diff']:.1e} from the "
              "moved policy" if "moved" in w else w.get("error", ""))
    final = args.out / "train" / "final"
    if args.skip_train and final.is_dir():
        t = report["train"] = {"ok": True, "checkpoint": str(final), "reused": True}
        print(f"skip  train: vLLM colocate        --skip-train: serving {final} as it is")
    else:
        t = report["train"] = train(args.vllm_python, args.out, args.steps)
        ok &= say("train: vLLM colocate", t["ok"],
                  f"{t['steps']} steps ({t['step_s']} s/step, {t['seconds']} s in all), format "
                  f"errors {t['format_error']}, reward {fmt(t['reward'])}, grad norm "
                  f"{fmt(t['grad_norm'])}"
                  + ("" if t["ok"] else f" (see {t['log']})"))
    if not args.skip_train:
        o = report["train_overlap"] = train(args.vllm_python, args.out, max(args.steps, 3),
                                            overlap=True)
        o["ok"] = o["ok"] and o["staleness"][1:-1] and all(x == 1 for x in o["staleness"][1:])
        ok &= say("train: vLLM colocate, overlapped", bool(o["ok"]),
                  f"{o['steps']} steps, staleness {o['staleness']}, format errors "
                  f"{o['format_error']}, reward {fmt(o['reward'])}, grad norm "
                  f"{fmt(o['grad_norm'])}" + ("" if o["ok"] else f" (see {o['log']})"))

    targets = [("embedded", Path(resolve_model("smollm2")),
                # subtasks bounded so the longest plan the grammar admits fits in max_tokens
                'prompt = "compact"\nfewshots = "none"\nmax_steps = 2\n'
                'max_subtask_chars = 32\ncache = false')]
    if t["ok"]:
        targets.append(("trained", Path(t["checkpoint"]), card_run(Path(t["checkpoint"]))))
    for name, model, run in targets:
        try:
            s = report[name] = serve(name, model, args.vllm_python, args.out, run,
                                     args.questions)
        except RuntimeError as exc:
            report[name] = {"ok": False, "error": str(exc)}
            ok &= say(f"serve {name}", False, str(exc))
            continue
        a = s["asks"]
        ok &= say(f"serve {name}: valid", s["valid"],
                  "; ".join(f"{x['workflow']} -> {x['answer']}" if x["rc"] == 0
                            else f"exit {x['rc']}: {x['error']}" for x in a))
        ok &= say(f"serve {name}: prefill", s["prefill_continued"], ", ".join(
            f"{x['prompt_tokens']} tokens (continued {x['template_continued']}, new turn "
            f"{x['template_new_turn']})" for x in a))
        ok &= say(f"serve {name}: grammar", s["one_text_ok"] and s["malformed_refused"],
                  f"one-text grammar at T=1.0 -> {s['one_text']}; malformed -> {s['malformed']}")
        r = s["rollouts"]
        ok &= say(f"serve {name}: server rollouts", r["ok"],
                  f"{r['rows']} rows in {r['requests']} requests, each held to its own grammar "
                  f"{r['held']}, a logprob per token {r['logprobs_per_token']}"
                  + (f"; {r['error']}" if r.get("error") else ""))
    report["ok"] = bool(ok)
    (args.out / "report.json").write_text(json.dumps(report, indent=1))
    print(f"{'vLLM check passed' if ok else 'vLLM check FAILED'}; report in "
          f"{args.out / 'report.json'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
