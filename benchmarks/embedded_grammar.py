"""What does the workflow grammar cost the embedded Conductor, and what does each engine cost?

The embedded default pool's Conductor (the bundled SmolLM2-135M-Instruct GGUF, llama.cpp in
process) writes for a few questions with the real Conductor prompt and the real workflow
grammar (`grammar_for`, as `Conductor` builds them for that pool), and the same call runs
several ways side by side, taking turns, with the same prompt (already in the KV cache), seed,
temperature, top_p and max_tokens (the pool's):

    free        no grammar
    gbnf        llama.cpp's own grammar sampler (`grammar=LlamaGrammar`)
    llguidance  podium's path (`podium.llm.grammar_mask`: llguidance's token mask as a
                logits processor)
    xgrammar    xgrammar 0.2.8's token mask as a logits processor (what training uses with
                transformers), its tokenizer built from the GGUF vocabulary; only when
                xgrammar is installed (the `train` extra)

Each call's time is split into llama.cpp's decode (`Llama.eval`), sampling (`Llama.sample`,
which holds the grammar or the mask) and the rest (detokenizing, stop strings), per generated
token; medians over every call of a way, with the spread (min-max). Every grammar-held
completion must parse as a workflow (`Conductor.read`, as a run parses it). `chars/tok` is the
completion's characters per token: llguidance allows only the tokenizer's own split of a
text the grammar forces (`model_id = [`), where llama.cpp and xgrammar let the model spell it
in any tokens. Each question's prompt is read once before its calls, from an empty KV cache,
and that time is reported apart.

    .venv/bin/python benchmarks/embedded_grammar.py [--questions 3] [--repeats 3]
        [--ways free gbnf llguidance xgrammar] [--max-tokens N] [--profile]
        [--out benchmarks/results/embedded_grammar.json]
"""

from __future__ import annotations

import argparse
import cProfile
import ctypes
import importlib.util
import io
import json
import os
import platform
import pstats
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from podium.conductor import Conductor, grammar_for, workflow_messages
from podium.conductor.view import make_view
from podium.config import load_pool
from podium.llm import grammar_mask
from podium.llm.base import split_prefill
from podium.llm.embedded import ModelStore, _prefill, resolve_model_path
from podium.llm.prompt_states import PromptStates

# questions whose free completion does not end at once (the Conductor's prompt, T=0.3, seed 1)
QUESTIONS = [
    "What is 17 * 23?",
    "Write a Python function that reverses a string.",
    "If a shirt costs $40 after a 20% discount, what was the original price?",
    "Why is the sky blue?",
    "Is 221 a prime number? Explain.",
    "Translate 'good morning, friends' into Spanish.",
]
WAYS = ("free", "gbnf", "llguidance", "xgrammar")


class Timers:
    """Wraps `Llama.eval` and `Llama.sample` of one model to add up the time spent in each."""

    def __init__(self, llm: Any) -> None:
        self.decode = self.sample = 0.0
        for name in ("eval", "sample"):
            setattr(llm, name, self._timed(getattr(llm, name), name))

    def _timed(self, fn: Any, name: str) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent = time.perf_counter() - start
                if name == "eval":
                    self.decode += spent
                else:
                    self.sample += spent
        return timed


class XgrammarMask:
    """xgrammar's token mask as a llama-cpp-python logits processor (the benchmark's only)."""

    def __init__(self, compiled: Any, n_vocab: int) -> None:
        import torch
        import xgrammar as xgr

        self.matcher = xgr.GrammarMatcher(compiled)
        self.bits = np.zeros((n_vocab + 31) // 32, dtype=np.int32)
        self.view = torch.from_numpy(self.bits).view(1, -1)
        self.n_vocab, self.start, self.fed = n_vocab, None, 0

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        if self.start is None:
            self.start = len(input_ids)
        for token in input_ids[self.start + self.fed:]:
            assert self.matcher.accept_token(int(token))
            self.fed += 1
        self.matcher.fill_next_token_bitmask(self.view)
        allowed = np.unpackbits(self.bits.view(np.uint8), bitorder="little")[:self.n_vocab]
        scores[allowed == 0] = -np.inf
        return scores


def xgrammar_compiler(llm: Any) -> tuple[Any, dict[str, float]]:
    """xgrammar's compiler for the GGUF's vocabulary, and what making it took."""
    import llama_cpp

    start = time.perf_counter()
    import xgrammar as xgr
    imported = time.perf_counter()
    buffer = ctypes.create_string_buffer(256)
    vocab = []
    for token in range(llm.n_vocab()):
        n = llama_cpp.llama_token_to_piece(llm._model.vocab, token, buffer, 256, 0, True)
        vocab.append(bytes(buffer[:n]))
    info = xgr.TokenizerInfo(vocab, vocab_type=xgr.VocabType.RAW, vocab_size=llm.n_vocab(),
                             stop_token_ids=[llm.token_eos()])
    compiler = xgr.GrammarCompiler(info)
    return compiler, {"import_s": imported - start, "tokenizer_s": time.perf_counter() - imported}


def setup(ways: list[str], llm: Any, masks: Any, grammar: str) -> tuple[dict, Any]:
    """Each way's one-off costs (per model, per grammar), and xgrammar's compiled grammar."""
    from llama_cpp import llama_cpp as lib

    costs: dict[str, dict[str, float]] = {}
    start = time.perf_counter()
    sampler = lib.llama_sampler_init_grammar(llm._model.vocab, grammar.encode(), b"root")
    costs["gbnf"] = {"parse_per_call_ms": (time.perf_counter() - start) * 1e3}
    lib.llama_sampler_free(sampler)
    if "llguidance" in ways:
        start = time.perf_counter()
        masks.mask(grammar)  # the tokenizer (once per model) and the grammar (once per text)
        first = time.perf_counter()
        masks.mask(grammar)
        costs["llguidance"] = {"tokenizer_and_compile_s": first - start,
                               "per_call_ms": (time.perf_counter() - first) * 1e3}
    compiled = None
    if "xgrammar" in ways:
        compiler, made = xgrammar_compiler(llm)
        start = time.perf_counter()
        compiled = compiler.compile_grammar(grammar)
        costs["xgrammar"] = {**made, "compile_s": time.perf_counter() - start}
    return costs, compiled


def held_by(way: str, grammar: str, masks: Any, compiled: Any, llm: Any) -> dict[str, Any]:
    from llama_cpp import LlamaGrammar, LogitsProcessorList

    if way == "gbnf":
        return {"grammar": LlamaGrammar.from_string(grammar, verbose=False)}
    if way == "llguidance":
        return {"logits_processor": LogitsProcessorList([masks.mask(grammar)])}
    if way == "xgrammar":
        return {"logits_processor": LogitsProcessorList([XgrammarMask(compiled, llm.n_vocab())])}
    return {}


def call(llm: Any, timers: Timers, prompt: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    timers.decode = timers.sample = 0.0
    start = time.perf_counter()
    out = llm.create_completion(prompt, **kwargs)
    wall = time.perf_counter() - start
    tokens = out["usage"]["completion_tokens"]
    text = out["choices"][0]["text"]
    return {"tokens": tokens, "seconds": wall, "decode_s": timers.decode,
            "sample_s": timers.sample, "text": text,
            "finish_reason": out["choices"][0]["finish_reason"]}


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def ms_per_token(run: dict) -> float:
    return run["seconds"] / run["tokens"] * 1e3


def summary(runs: list[dict], free: list[dict] | None) -> dict[str, Any]:
    """A way's figures per generated token (calls that generated nothing left out), and its
    time per token over free generation's in the same round (the same question and repeat,
    run back to back), which cancels most of what the machine's load does to both."""
    made = [r for r in runs if r["tokens"]]
    per = {k: [r[k] / r["tokens"] * 1e3 for r in made] for k in ("decode_s", "sample_s")}
    rounds = {(r["question"], r["repeat"]): r for r in free or [] if r["tokens"]}
    held = [r for r in runs if r["valid"] is not None]
    return {
        "calls": len(runs), "calls_with_tokens": len(made),
        "tokens_median": statistics.median(r["tokens"] for r in made),
        "ms_per_token": [ms_per_token(r) for r in made],
        "decode_ms": per["decode_s"], "sample_ms": per["sample_s"],
        "other_ms": [(r["seconds"] - r["decode_s"] - r["sample_s"]) / r["tokens"] * 1e3
                     for r in made],
        "tokens_per_s": [r["tokens"] / r["seconds"] for r in made],
        "seconds_per_call": [r["seconds"] for r in runs],
        "chars_per_token": [len(r["text"]) / r["tokens"] for r in made],
        "vs_free": [ms_per_token(r) / ms_per_token(rounds[(r["question"], r["repeat"])])
                    for r in made if (r["question"], r["repeat"]) in rounds],
        "valid": sum(1 for r in held if r["valid"]) if held else None,
    }


def profile(llm: Any, prompt: str, kwargs: dict[str, Any]) -> str:
    """cProfile of one call: the functions that took the most time of their own."""
    prof = cProfile.Profile()
    prof.enable()
    llm.create_completion(prompt, **kwargs)
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).strip_dirs().sort_stats("tottime").print_stats(5)
    lines = out.getvalue().strip().splitlines()
    return "\n".join(line for line in lines if line.strip() and "restriction" not in line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--questions", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ways", nargs="+", choices=WAYS, default=list(WAYS))
    ap.add_argument("--max-tokens", type=int, help="default: the pool Conductor's max_tokens")
    ap.add_argument("--profile", action="store_true", help="print cProfile of one call a way")
    ap.add_argument("--out", default="benchmarks/results/embedded_grammar.json")
    args = ap.parse_args()
    ways = [w for w in args.ways if w != "llguidance" or grammar_mask.available()]
    if "xgrammar" in ways and importlib.util.find_spec("xgrammar") is None:
        ways.remove("xgrammar")
    load_start = os.getloadavg()
    began = time.perf_counter()

    pool = load_pool(None)
    spec = pool.conductor
    view = make_view(pool.workers)
    conductor = Conductor(None, view, pool.run, constrained=True)  # type: ignore[arg-type]
    grammar = grammar_for(view, pool.run)
    model = ModelStore().get(resolve_model_path(spec.model), spec.n_ctx)
    model.states = PromptStates(budget_bytes=0)  # each prompt read afresh, not restored
    llm = model.llm
    costs, compiled = setup(ways, llm, model.masks, grammar)
    timers = Timers(llm)
    max_tokens = args.max_tokens or spec.max_tokens or 256

    runs: dict[str, list[dict]] = {w: [] for w in ways}
    profiles: dict[str, str] = {}
    prompts: list[dict] = []
    for q, question in enumerate(QUESTIONS[:args.questions]):
        messages = workflow_messages(question, view, pool.run)
        history, prefill = split_prefill(messages)
        formatted = model.format(messages=history)  # type: ignore[arg-type]
        prompt = formatted.prompt + (prefill or "")
        base = {"max_tokens": max_tokens, "temperature": spec.temperature,
                "top_p": 0.95 if spec.top_p is None else spec.top_p, "seed": 1,
                "stop": [s for s in (formatted.stop or []) if s]}
        llm.reset()  # the whole prompt read afresh, timed: then in the KV cache for every way
        start = time.perf_counter()
        _prefill(model, prompt, threading.Event())
        prompts.append({"tokens": llm.n_tokens, "seconds": time.perf_counter() - start})
        for r in range(args.repeats):
            shift = (q + r) % len(ways)
            for way in ways[shift:] + ways[:shift]:  # taking turns, each way first in turn
                run = call(llm, timers, prompt, base | held_by(way, grammar, model.masks,
                                                               compiled, llm))
                turn = conductor.read(run["text"], view, messages=messages)
                run.update(question=question, repeat=r,
                           valid=None if way == "free" else turn.workflow is not None)
                runs[way].append(run)
                print(f"  [{way} q{q + 1} r{r + 1}] {run['tokens']} tokens "
                      f"{run['seconds']:.2f} s", file=sys.stderr)
        if args.profile and q == 0:
            profiles = {w: profile(llm, prompt, base | held_by(w, grammar, model.masks,
                                                               compiled, llm)) for w in ways}
    load_end = os.getloadavg()
    report(ways, runs, costs, spec, max_tokens, args, load_start, load_end,
           time.perf_counter() - began, len(grammar), profiles, prompts)


def report(ways: list[str], runs: dict[str, list[dict]], costs: dict, spec: Any,
           max_tokens: int, args: argparse.Namespace, load_start: tuple, load_end: tuple,
           took: float, grammar_chars: int, profiles: dict[str, str],
           prompts: list[dict]) -> None:
    sums = {w: summary(runs[w], runs.get("free")) for w in ways}
    print(f"\n{platform.machine()}, {os.cpu_count()} cores · Conductor {spec.model} "
          f"T={spec.temperature} max_tokens={max_tokens} · workflow grammar {grammar_chars} "
          f"chars · {args.questions} questions x {args.repeats} repeats, ways taking turns")
    print(f"load average {load_start[0]:.2f} at the start, {load_end[0]:.2f} at the end "
          f"(1 min); medians per generated token, (min-max) over the calls\n")
    print(f"{'way':<11}{'calls':>6}{'tokens':>7}{'s/call':>7}{'tok/s':>20}{'ms/token':>22}"
          f"{'decode ms':>10}{'sample ms':>20}{'other ms':>9}{'chars/tok':>10}{'valid':>6}")
    for w in ways:
        s = sums[w]
        valid = "-" if s["valid"] is None else f"{s['valid']}/{s['calls']}"
        print(f"{w:<11}{s['calls']:>6}{s['tokens_median']:>7.0f}"
              f"{statistics.median(s['seconds_per_call']):>7.1f}{spread(s['tokens_per_s']):>20}"
              f"{spread(s['ms_per_token']):>22}{statistics.median(s['decode_ms']):>10.2f}"
              f"{spread(s['sample_ms']):>20}{statistics.median(s['other_ms']):>9.2f}"
              f"{statistics.median(s['chars_per_token']):>10.2f}{valid:>6}")
    if "free" in sums:
        print("\ntime per token over free generation's in the same round, median (min-max); "
              "sampling time over free's:")
        free_sample = statistics.median(sums["free"]["sample_ms"])
        for w in ways:
            if w != "free" and sums[w]["vs_free"]:
                extra = statistics.median(sums[w]["sample_ms"]) - free_sample
                print(f"  {w:<11} {spread(sums[w]['vs_free'])}x; the grammar adds "
                      f"{extra:.2f} ms a token")
    print("\nthe prompt, read before the calls (not in the figures above): " + ", ".join(
        f"{p['tokens']} tokens in {p['seconds']:.1f} s" for p in prompts))
    print("one-off costs: " + "; ".join(
        f"{w} " + ", ".join(f"{k} {v:.3g}" for k, v in c.items()) for w, c in costs.items()))
    for w, text in profiles.items():
        print(f"\ncProfile, one {w} call:\n{text}")
    print(f"benchmark took {took:.0f} s")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "machine": platform.machine(), "cpus": os.cpu_count(),
        "load_average_start": load_start, "load_average_end": load_end,
        "conductor": spec.model_dump(), "max_tokens": max_tokens, "questions": args.questions,
        "repeats": args.repeats, "one_off": costs, "prompts": prompts, "summary": sums,
        "runs": runs,
        "seconds": took}, indent=2))
    print(f"JSON written to {out}")


if __name__ == "__main__":
    main()
