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


def _pool_file(header: str, module: str, names: list[str], suffix: str = "",
               price: dict[str, float] | None = None, run: str = "") -> str:
    """A gym pool file: `header` (comment lines), the embedded Conductor, the workers `names`
    in id order as `module:<name><suffix>` functions (billed by the call at `price`), and the
    compact prompt's run settings plus `run`."""
    workers = "\n".join(
        f'[[workers]]                        # Model id {i}\nname = "{name}"\n'
        f'backend = "function"\nfunction = "{module}:{name}{suffix}"\n'
        + (f"price = {{ per_call = {price[name]} }}\n" if price else "")
        for i, name in enumerate(names))
    return f"""{header}

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
{run}"""


def _order(seed: int | None) -> str:
    return "in the listed order" if seed is None else f"shuffled with seed {seed}"


def pool_toml(seed: int | None = None, mode: str = "question",
              specialists: tuple[str, ...] = SPECIALISTS) -> str:
    """A gym pool file: `specialists` under ids `assignment(seed)`, in `mode`."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}")
    command = "python -m podium.train.gym pool" + (f" --seed {seed}" if seed is not None else "")
    if specialists != SPECIALISTS:
        command += " --specialists " + ",".join(specialists)
    header = (f"# The gym's pool: {len(specialists)} exact specialists ({mode} mode), ids "
              f"{_order(seed)}.\n"
              '# The Conductor sees only "Model id i": nothing about an id gives its skill '
              f"away.\n# Written by: {command} --mode {mode}")
    return _pool_file(header, "podium.train.gym.specialists", assignment(seed, specialists),
                      "" if mode == "question" else "_subtask")


def priced_pool_toml(seed: int | None = None) -> str:
    """The priced gym's pool file (`podium.train.gym.priced`): its four workers under ids
    `assignment(seed)`, billed by the call at `PRICES`, the Conductor shown the budget."""
    from podium.train.gym.priced import PRICED, PRICES

    command = "python -m podium.train.gym pool --priced" + (
        f" --seed {seed}" if seed is not None else "")
    header = ("# The priced gym's pool: two cheap noisy specialists, a mid-priced generalist "
              "and a dear\n"
              f"# expert, billed by the call; ids {_order(seed)}. The Conductor sees each "
              "worker's id and how many of\n"
              "# its calls the request's budget pays for (run.show_budget), never its name.\n"
              f"# Written by: {command}")
    return _pool_file(header, "podium.train.gym.priced", assignment(seed, PRICED),
                      price=PRICES, run="show_budget = true\n")


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
