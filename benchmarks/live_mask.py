"""How long does live credit's token mask take for one completion?

`podium.train.credit.live_mask` needs, for every token of a completion, where its text ends in
the decoded completion (`token_ends`). Decoding every prefix (`decode(ids[:k + 1])` for each
k, the way it was first written) costs time that grows with the square of the length;
`token_ends` decodes a piece at a time from the last clean character boundary. Both are run
here side by side with the bundled SmolLM2 tokenizer on Conductor-shaped completions of 2 to
40 steps (every step dead but the last, so the mask has work to do), the two results checked
equal, and the whole `live_mask` timed too. Medians of `--repeats` runs. Target: linear in the
length, and under 10 ms for a 1,000-token completion (a GRPO step masks every rollout).

    .venv/bin/python benchmarks/live_mask.py [--repeats 5]
        [--out benchmarks/results/live_mask.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

from podium.train.credit import live_mask, prefix_ends, token_ends
from podium.train.model import load_policy

SUBTASK = '"Count the letters of the word strawberry, then say how many r\'s it has"'


def completion(steps: int) -> str:
    return (f"model_id = [{', '.join(['1'] * steps)}]\n"
            f"subtasks = [{', '.join([SUBTASK] * steps)}]\n"
            f"access_list = [{', '.join(['[]'] * steps)}]")


def timed(fn, tokenizer, ids: list[int], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(tokenizer, ids)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default="benchmarks/results/live_mask.json")
    args = ap.parse_args()
    tokenizer = load_policy("smollm2")[1]
    rows = []
    for steps in (2, 5, 10, 20, 40):
        ids = tokenizer(completion(steps), add_special_tokens=False)["input_ids"]
        ids.append(tokenizer.eos_token_id)
        assert token_ends(tokenizer, ids) == prefix_ends(tokenizer, ids)
        row = {"steps": steps, "tokens": len(ids)}
        for name, fn in (("every_prefix", prefix_ends), ("token_ends", token_ends),
                         ("live_mask", live_mask)):
            row[f"{name}_ms"] = timed(fn, tokenizer, ids, args.repeats)
        rows.append(row)
    print(f"{platform.machine()}, SmolLM2 tokenizer · medians of {args.repeats} runs\n")
    print(f"{'steps':>5} {'tokens':>6} {'every prefix ms':>16} {'token_ends ms':>14} "
          f"{'live_mask ms':>13} {'ratio':>6}")
    for r in rows:
        print(f"{r['steps']:>5} {r['tokens']:>6} {r['every_prefix_ms']:>16.1f} "
              f"{r['token_ends_ms']:>14.1f} {r['live_mask_ms']:>13.1f} "
              f"{r['every_prefix_ms'] / r['token_ends_ms']:>5.1f}x")
    first, last = rows[0], rows[-1]
    growth = (last["token_ends_ms"] / first["token_ends_ms"]) / (last["tokens"] / first["tokens"])
    per_1k = last["live_mask_ms"] / last["tokens"] * 1000
    print(f"\ntoken_ends time / length, longest against shortest: {growth:.2f} (linear: ~1): "
          f"{'PASS' if growth < 2 else 'MISS'}")
    print(f"live_mask, per 1,000 tokens of the longest: {per_1k:.1f} ms (target < 10 ms): "
          f"{'PASS' if per_1k < 10 else 'MISS'}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows, "growth": growth, "live_mask_ms_per_1k": per_1k},
                              indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
