"""What keeping read prompts (`podium.llm.prompt_states`) saves the embedded team, question after
question.

The embedded default pool (the bundled SmolLM2-135M-Instruct: Conductor and workers share one
llama.cpp context) answers `--questions` questions one after another through `Pipeline.ask`,
with no response cache, two ways taking turns (each way first in turn, `--rounds` rounds):

    kept    podium's default: a prompt that starts like one read before restores its state
    afresh  nothing kept (`PromptStates(budget_bytes=0)`): every prompt read from where the
            context's last prompt and it part

Per question it records the Conductor call's seconds, the whole question's seconds and the
prompt tokens llama.cpp read (`Llama.eval`); the report gives medians over the questions after
each round's first (the first reads the Conductor's prompt either way).

    .venv/bin/python benchmarks/embedded_prompts.py [--questions 4] [--rounds 2]
        [--out benchmarks/results/embedded_prompts.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

from podium.config import load_pool
from podium.llm import embedded
from podium.llm.prompt_states import PromptStates
from podium.pipeline import Pipeline
from podium.settings import resolve_settings

QUESTIONS = ["What is 17 * 23?", "Reverse the word 'orchestra'.",
             "How many letters r are in 'strawberry'?", "What is the capital of France?",
             "Name a prime number between 20 and 30.", "What is 3 + 4?"]


async def one_round(pipe: Pipeline, model: Any, way: str, questions: list[str]) -> list[dict]:
    model.states = PromptStates() if way == "kept" else PromptStates(budget_bytes=0)
    model.llm.reset()  # each round starts from an empty context
    read: list[int] = []
    llm_eval = model.llm.eval
    model.llm.eval = lambda tokens: read.append(len(tokens)) or llm_eval(tokens)
    rows = []
    try:
        for question in questions:
            read.clear()
            start = time.perf_counter()
            result = await pipe.ask(question)
            rows.append({"way": way, "question": question,
                         "seconds": time.perf_counter() - start,
                         "conductor_s": sum(r.conductor.latency_s for r in result.rounds),
                         "read_tokens": sum(read), "restored": model.states.restored})
    finally:
        del model.llm.eval
    return rows


async def main_async(args: argparse.Namespace) -> list[dict]:
    pool = load_pool()
    questions = QUESTIONS[:args.questions]
    rows: list[dict] = []
    async with Pipeline(pool, settings=resolve_settings(pool.run, flags={"cache": False})) as pipe:
        await pipe.load()
        spec = pool.conductor
        model = embedded.ModelStore().get(embedded.resolve_model_path(spec.model), spec.n_ctx,
                                          spec.n_threads)
        for r in range(args.rounds):
            for way in (("kept", "afresh") if r % 2 == 0 else ("afresh", "kept")):
                print(f"round {r + 1}, {way} ...", flush=True)
                for row in await one_round(pipe, model, way, questions):
                    rows.append({**row, "round": r})
    return rows


def report(rows: list[dict]) -> dict[str, dict[str, float]]:
    later = [r for r in rows if r["question"] != rows[0]["question"]]
    out = {}
    print(f"\n{'':8} {'conductor s':>12} {'question s':>11} {'tokens read':>12}   "
          "(medians of questions 2.., every round)")
    for way in ("kept", "afresh"):
        mine = [r for r in later if r["way"] == way]
        out[way] = {k: statistics.median(r[k] for r in mine)
                    for k in ("conductor_s", "seconds", "read_tokens")}
        print(f"{way:8} {out[way]['conductor_s']:12.2f} {out[way]['seconds']:11.2f} "
              f"{out[way]['read_tokens']:12.0f}")
    print(f"kept / afresh, a question's seconds: "
          f"{out['kept']['seconds'] / out['afresh']['seconds']:.2f}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path,
                        default=Path("benchmarks/results/embedded_prompts.json"))
    args = parser.parse_args()
    rows = asyncio.run(main_async(args))
    summary = report(rows)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "summary": summary, "rows": rows}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
