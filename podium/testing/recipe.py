"""A small training recipe on sums, for tests and scripts that train for real (standard library
only).

The pool's workers are exact Python functions from `podium.testing.workers`: id 0 answers 0
(wrong) and id 1 adds (right), so the worker a rollout picks decides its reward; the questions
are "What is i + (i + 3)?". `sums_recipe` writes the pool, the questions and a training config
around the [run] and [grpo] settings the caller gives.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

EMBEDDED = 'backend = "embedded"'

POOL = """\
[conductor]
{conductor}

[[workers]]
name = "zero"
backend = "function"
function = "podium.testing.workers:{zero}"

[[workers]]
name = "adder"
backend = "function"
function = "podium.testing.workers:{adder}"

[run]
cache = false
"""

CONFIG = """\
{model}[pool]
file = {pool}

[[data.tasks]]
name = {data}
split = "all"
options = {{ grader = "numeric" }}

[run]
{run}

[grpo]
{grpo}

[output]
dir = {out}
{output}
{extra}"""


def sums_pool(conductor: str = EMBEDDED, zero: str = "zero", adder: str = "adder") -> str:
    """The pool file: the [conductor] section's lines `conductor` (the embedded model by
    default), worker 0 `zero` and worker 1 `adder` (functions of podium.testing.workers: pass
    e.g. "down" for a worker outage), no response cache."""
    return POOL.format(conductor=_body(conductor), zero=zero, adder=adder)


def sums(rows: int) -> str:
    """`rows` JSONL questions "What is i + (i + 3)?", each with its answer."""
    return "".join(json.dumps({"question": f"What is {i} + {i + 3}?", "answer": str(2 * i + 3)})
                   + "\n" for i in range(rows))


def sums_recipe(folder: Path, rows: int, *, run: str, grpo: str, output: str = "",
                extra: str = "", model: str | Path | None = None, out: Path | None = None,
                name: str = "train.toml", conductor: str = EMBEDDED, zero: str = "zero",
                adder: str = "adder") -> Path:
    """Write FOLDER/pool.toml (`sums_pool`), FOLDER/sums.jsonl (`rows` questions) and the
    training config FOLDER/NAME on them, and return the config's path. `run`, `grpo` and
    `output` are the lines of those sections (the output folder is `out`, FOLDER/out by
    default), `extra` any further sections; `model` is the policy (the config's default when
    None)."""
    folder.mkdir(parents=True, exist_ok=True)
    pool, data = folder / "pool.toml", folder / "sums.jsonl"
    pool.write_text(sums_pool(conductor, zero, adder))
    data.write_text(sums(rows))
    config, sections = folder / name, _body(extra)
    config.write_text(CONFIG.format(
        model="" if model is None else f"[model]\npath = {_string(model)}\n\n",
        pool=_string(pool), data=_string(f"jsonl:{data}"), run=_body(run), grpo=_body(grpo),
        out=_string(out or folder / "out"), output=_body(output),
        extra=sections and f"\n{sections}\n"))
    return config


def _body(lines: str) -> str:
    return textwrap.dedent(lines).strip()


def _string(value: str | Path) -> str:
    """A TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(str(value))
