"""The gym: an environment where the optimal Conductor is known, to prove that training learns.

Task families with exact checkers and the task "gym" over them (`podium.tasks.gym`, so `podium
eval` and `podium report` run on it like on any benchmark), deterministic specialist workers,
each exact on its own family and plausibly wrong elsewhere (`specialists`), chained questions
that need two specialists in order with the second seeing the first ("all"), and a subtask mode
in which specialists read only the subtask the Conductor wrote. `pool_toml` writes the
pool file, its worker order (the id assignment) shuffled by a seed. No torch here.

    python -m podium.train.gym pool [--seed 3] [--mode question|subtask] > gym.toml
"""

from __future__ import annotations

import json
import random

from podium.tasks.gym import CHAINED, FAMILIES, SINGLE, GymTask, Problem, generate
from podium.train.gym.specialists import SPECIALISTS

MODES = ("question", "subtask")


def assignment(seed: int | None, specialists: tuple[str, ...] = SPECIALISTS) -> list[str]:
    """The specialists in id order: as listed (seed None), or a seeded shuffle."""
    names = list(specialists)
    if seed is not None:
        random.Random(seed).shuffle(names)
    return names


def specialists_for(families: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """The specialists the families need, in the listed order."""
    needed = {name for f in families for name, _ in generate(f, 0).parts}
    return tuple(s for s in SPECIALISTS if s in needed)


def pool_toml(seed: int | None = None, mode: str = "question",
              specialists: tuple[str, ...] = SPECIALISTS) -> str:
    """A gym pool file: `specialists` under ids `assignment(seed)`, in `mode`."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}")
    suffix = "" if mode == "question" else "_subtask"
    workers = "\n".join(
        f'[[workers]]                        # Model id {i}\nname = "{name}"\n'
        f'backend = "function"\nfunction = "podium.train.gym.specialists:{name}{suffix}"\n'
        for i, name in enumerate(assignment(seed, specialists)))
    order = "in the listed order" if seed is None else f"shuffled with seed {seed}"
    command = "python -m podium.train.gym pool" + (f" --seed {seed}" if seed is not None else "")
    if specialists != SPECIALISTS:
        command += " --specialists " + ",".join(specialists)
    return f"""# The gym's pool: {len(specialists)} exact specialists ({mode} mode), ids {order}.
# The Conductor sees only "Model id i": nothing about an id gives its skill away.
# Written by: {command} --mode {mode}

[conductor]
backend = "embedded"
model = "smollm2"
temperature = 0.0
max_tokens = 64
constrained = false

{workers}
[run]
prompt = "compact"
fewshots = "none"
max_steps = 2
cache = false
"""


def priced_pool_toml(seed: int | None = None,
                     prices: dict[str, float] | None = None) -> str:
    """The priced gym's pool file (`podium.train.gym.priced`): its four workers under ids
    `assignment(seed)`, billed by the call at `prices` (default: `PRICES`), the Conductor
    shown the budget."""
    from podium.train.gym.priced import PRICED, PRICES

    prices = {**PRICES, **(prices or {})}
    workers = "\n".join(
        f'[[workers]]                        # Model id {i}\nname = "{name}"\n'
        f'backend = "function"\nfunction = "podium.train.gym.priced:{name}"\n'
        f'price = {{ per_call = {prices[name]} }}\n'
        for i, name in enumerate(assignment(seed, PRICED)))
    order = "in the listed order" if seed is None else f"shuffled with seed {seed}"
    command = "python -m podium.train.gym pool --priced" + (
        f" --seed {seed}" if seed is not None else "")
    return f"""# The priced gym's pool: two cheap noisy specialists, a mid-priced generalist and a dear
# expert, billed by the call; ids {order}. The Conductor sees each worker's id and how many of
# its calls the request's budget pays for (run.show_budget), never its name.
# Written by: {command}

[conductor]
backend = "embedded"
model = "smollm2"
temperature = 0.0
max_tokens = 64
constrained = false

{workers}
[run]
prompt = "compact"
fewshots = "none"
max_steps = 2
cache = false
show_budget = true
"""


def optimal_plan(parts: list[list[str]] | tuple, names: list[str]) -> str:
    """The workflow an optimal Conductor writes for a problem whose `parts` are (specialist,
    instruction) pairs, for a pool whose ids name `names`: each part's specialist with its
    instruction as the subtask, every step after the first seeing the earlier ones."""
    ids = [names.index(name) for name, _ in parts]
    subtasks = [instruction for _, instruction in parts]
    access = ["[]"] + ['"all"'] * (len(parts) - 1)
    return (f"model_id = {ids}\nsubtasks = {json.dumps(subtasks)}\n"
            f"access_list = [{', '.join(access)}]")


__all__ = ["CHAINED", "FAMILIES", "MODES", "SINGLE", "SPECIALISTS", "GymTask", "Problem",
           "assignment", "generate", "optimal_plan", "pool_toml", "priced_pool_toml",
           "specialists_for"]
