"""How a run's settings (`RunSettings`, the pool file's `[run]`) are decided: one precedence.

Each source may set any `[run]` key; a later one wins over an earlier one:

    1. the pool file's `[run]`                           (`podium.config.load_pool`)
    2. the trained Conductor's card: the prompt settings it was trained with
                                                        (`--conductor`, `podium.checkpoint`)
    3. the training config's `[run]`                     (`podium train` only)
    4. the command's flags: `--recursion`, `--no-cache`, eval's `--fallback`
    5. the request: `podium serve`'s `recursion`, `max_calls`, `max_total_tokens`, `max_cost`
    6. what the job itself needs, which nothing overrides: a training rollout is one round
       with no fallback; a black-box system is asked the bare question

A request may lower a cap (`max_calls`, `max_tokens`, `max_cost`) that an earlier source set,
never raise it: the smaller value wins there. A source naming a key `[run]` does not have, or
a value `[run]` refuses, is a `ConfigError` naming that source.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from podium.config import RunSettings
from podium.errors import ConfigError

CAPS = ("max_calls", "max_tokens", "max_cost")

__all__ = ["CAPS", "resolve_settings"]


def resolve_settings(pool: RunSettings, *, card: Mapping[str, Any] | None = None,
                     training: Mapping[str, Any] | None = None,
                     flags: Mapping[str, Any] | None = None,
                     request: Mapping[str, Any] | None = None,
                     required: Mapping[str, Any] | None = None) -> RunSettings:
    """`pool` (the pool file's `[run]`) with each later source's keys over it, in the order
    the module docstring gives. A source left out, or None, changes nothing."""
    values = pool.model_dump()
    for name, layer in (("the checkpoint's card", card), ("the training config's [run]", training),
                        ("the command's flags", flags), ("the request", request),
                        ("the job", required)):
        if not layer:
            continue
        unknown = sorted(set(layer) - set(RunSettings.model_fields))
        if unknown:
            raise ConfigError(f"{name} sets {', '.join(unknown)}, which [run] does not have. "
                              "The [run] keys are listed in docs/pools.md.")
        for key, value in layer.items():
            if layer is request and key in CAPS and values[key] is not None and value is not None:
                value = min(values[key], value)
            values[key] = value
        try:
            RunSettings.model_validate(values)
        except ValidationError as err:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}"
                                 for e in err.errors())
            raise ConfigError(f"{name} gives a [run] value that is refused: {problems}. "
                              "Fix that value (docs/pools.md lists each key).") from None
    return RunSettings.model_validate(values)
