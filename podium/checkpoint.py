"""What a trained Conductor carries: the pool it was trained on, and a model card.

A Conductor knows its workers only by masked id, so running it with a pool whose ids mean other
workers silently breaks it. `podium train` writes `podium-conductor.json` into every checkpoint:
the pool (id, name, backend and model of each worker), the run settings that shape the prompt
(prompt version, few-shot set, pool display, step limit, access mode, sub-pool ids, whether
the budget is shown), the base model, the recipe and the last metrics; and a `README.md` model
card. `check_pool` compares a
pool with the card: the same workers under the same ids, or a sub-pool of them, is fine;
anything else is refused with the difference named, unless the caller allows a mismatch.

A card is read as a `Card` (its shape checked, not only its JSON): a damaged one is a
`ConfigError` naming the file and the field. A Conductor with no card at all (a GGUF moved
without the `.podium-conductor.json` beside it, a checkpoint folder whose card was lost) is
refused too: without the card podium could check no pool and would run it with the wrong
prompt settings and no grammar. `--allow-pool-mismatch` runs it anyway, with the pool's
settings.

This module reads and writes JSON only (no torch), so `podium ask` and `podium eval` can check
a checkpoint without the `train` extra.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from podium.config import Pool, RunSettings
from podium.errors import ConfigError
from podium.settings import resolve_settings

CARD = "podium-conductor.json"
CARD_FORMAT = 1
PROMPT_SETTINGS = ("prompt", "fewshots", "pool_display", "max_steps", "access_mode",
                   "subpool_ids", "max_subtask_chars", "max_reason_chars", "max_reason_lines",
                   "show_budget", "hold_budget")


def pool_signature(pool: Pool) -> list[dict[str, Any]]:
    return [{"id": i, "name": w.name, "backend": w.backend, "model": w.model}
            for i, w in enumerate(pool.workers)]


def card_of(pool: Pool, settings: RunSettings, **extra: Any) -> dict[str, Any]:
    return {"format": CARD_FORMAT, "pool": pool_signature(pool), "pool_source": pool.source,
            "run": {k: getattr(settings, k) for k in PROMPT_SETTINGS}, **extra}


def write_card(folder: Path, card: dict[str, Any]) -> None:
    """The card and a README.md model card, written into `folder`: the one model card of a
    trained Conductor (TRL's own is not written), naming the base model, the pool, the recipe,
    the steps, the held-out figures and the commands that use it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CARD).write_text(json.dumps(card, indent=2, ensure_ascii=False), "utf-8")
    (folder / "README.md").write_text(model_card(folder, card), "utf-8")


def model_card(folder: Path, card: dict[str, Any]) -> str:
    """The README.md of a checkpoint folder, from its card."""
    workers = "\n".join(f"| {w['id']} | {w['name']} | {w['backend']} | {w['model']} |"
                        for w in card["pool"])
    metrics = "\n".join(f"- {k}: {v}" for k, v in (card.get("metrics") or {}).items()
                        if not k.startswith("podium/worker"))
    held = card.get("heldout")
    heldout = ("Held-out accuracy (greedy, under the grammar): "
               f"{100 * held['accuracy']:.1f}% at step {held['step']} on {held['n']} "
               f"{held['task']} questions ({held['split']} split); the best of the run "
               f"{100 * held['best']:.1f}% at step {held['best_step']}.\n"
               if held else "No held-out evaluation ran (the recipe's [heldout] section).\n")
    pool = card.get("pool_source") or "POOL.toml"
    pool_arg = "" if pool.startswith("<") else f" --pool {pool}"
    return f"""# A podium Conductor

Trained with `podium train` (GRPO) from `{card.get('base_model', '?')}` on the recipe
`{card.get('recipe', '?')}` for {card.get('steps', '?')} steps.

It writes workflows for this pool, whose workers it knows only by id; run it with the same pool
(or a sub-pool of it):

| id | name | backend | model |
|---|---|---|---|
{workers}

{heldout}
Use it:

```bash
podium ask "What is 17 * 3?" --conductor {folder}{pool_arg}
podium serve --conductor {folder}{pool_arg}        # an OpenAI-compatible server
podium export {folder} --gguf conductor.gguf        # for the embedded llama.cpp backend
```

Prompt settings: `{json.dumps(card['run'])}`.

Training data: {json.dumps(card.get('data', {}))}.

Last logged training metrics:
{metrics or '- (none)'}
"""


def card_path(source: str | Path) -> Path:
    """Where the card of a Conductor lives: inside a checkpoint directory, or beside a GGUF
    file written by `podium export` (`NAME.gguf` -> `NAME.podium-conductor.json`)."""
    source = Path(source)
    return source.with_suffix("." + CARD) if source.suffix == ".gguf" else source / CARD


class CardWorker(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: int
    name: str
    backend: str
    model: str


class Card(BaseModel):
    """The parts of a card podium reads (the rest, metrics and recipe, is for people)."""

    model_config = ConfigDict(extra="allow")
    format: int
    pool: list[CardWorker]
    run: dict[str, Any]
    constrained: bool = False


def read_card(source: str | Path) -> dict[str, Any] | None:
    """The card of the Conductor at `source` (None: it has none), its shape checked: a card
    that is not JSON, or JSON of another shape, is a ConfigError naming the field."""
    path = card_path(source)
    if not path.is_file():
        return None
    damaged = f"{path} is not a Conductor card podium can read"
    fix = ("the checkpoint is damaged: use another checkpoint, or export it again from the "
           "folder podium train wrote.")
    try:
        card = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise ConfigError(f"{damaged} ({type(exc).__name__}: {exc}); {fix}") from None
    if isinstance(card, dict) and card.get("format") != CARD_FORMAT:
        raise ConfigError(f"{path} was written by another podium version (format "
                          f"{card.get('format')!r}); run it with that version.")
    try:
        Card.model_validate(card)
        run = RunSettings.model_validate(card["run"])  # the prompt settings it runs with
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(the whole card)"
        raise ConfigError(f"{damaged} ({where}: {first['msg']}); {fix}") from None
    return {**card, "run": run.model_dump(include=set(card["run"]))}


def pool_mismatch(card: dict[str, Any], pool: Pool) -> list[str]:
    """How `pool` differs from the pool in `card` (empty: the same pool or a sub-pool of it)."""
    trained = {w["id"]: w for w in card["pool"]}
    problems = []
    for now in pool_signature(pool):
        then = trained.get(now["id"])
        if then is None:
            problems.append(f"id {now['id']} ({now['name']}) was not in the trained pool")
            continue
        for key in ("backend", "model", "name"):
            if then[key] != now[key]:
                problems.append(f"id {now['id']}: {key} {now[key]!r}, trained with "
                                f"{then[key]!r}")
    return problems


def check_pool(folder: str | Path, pool: Pool, *, allow_mismatch: bool = False) -> None:
    """Refuse to run the Conductor in `folder` with a pool its ids do not fit, or with no
    card to check the pool against."""
    card = read_card(folder)
    if allow_mismatch:
        return
    if card is None:
        raise ConfigError(
            f"The Conductor {folder} has no card ({card_path(folder)}), so podium cannot check "
            "that this pool's ids are the workers it was trained with, nor run it with its "
            "prompt settings and grammar. Put the card podium train or podium export wrote "
            "beside it, or pass --allow-pool-mismatch to run it with this pool's settings.")
    problems = pool_mismatch(card, pool)
    if problems:
        raise ConfigError(
            f"The Conductor in {folder} was trained on another pool ({card.get('pool_source')}): "
            + "; ".join(problems) + ". It knows workers only by id, so use its pool file (or a "
            "sub-pool with the same ids), or pass --allow-pool-mismatch.")


def with_conductor(pool: Pool, source: str, *, allow_mismatch: bool = False) -> Pool:
    """`pool` with its Conductor replaced by `source` (`--conductor`):

    * a checkpoint directory (from `podium train`): run in process with transformers; its card
      is checked against the pool, its prompt settings are used, and a Conductor trained under
      the workflow grammar runs under it;
    * a `.gguf` file (from `podium export`): run by the embedded llama.cpp backend;
    * an `http(s)://.../v1` URL, optionally `#MODEL` (default "conductor"): an OpenAI-compatible
      server (vLLM, llama.cpp's llama-server) that continues the prompt's prefill.

    Sampling settings (temperature, max_tokens) stay the pool's."""
    from podium.config import ConductorSpec

    old = pool.conductor
    keep = {"temperature": old.temperature, "max_tokens": old.max_tokens, "seed": old.seed,
            "top_p": old.top_p, "price": old.price}
    run = pool.run
    if source.startswith(("http://", "https://")):
        url, _, model = source.partition("#")
        spec = ConductorSpec(name="conductor", backend="openai", base_url=url,
                             model=model or "conductor", prefill="continue", constrained=False,
                             **keep)
    elif source.endswith(".gguf"):
        if not Path(source).is_file():
            raise ConfigError(f"--conductor {source}: no such file. Pass a GGUF written by "
                              "podium export, a checkpoint directory or a server URL.")
        run = _card_run(source, pool, allow_mismatch)
        spec = ConductorSpec(name=Path(source).stem, backend="embedded", model=source,
                             constrained=_constrained(source), **keep)
    elif (Path(source) / "config.json").is_file():
        run = _card_run(source, pool, allow_mismatch)
        spec = ConductorSpec(name=Path(source).resolve().name, backend="transformers",
                             model=str(source), constrained=_constrained(source), **keep)
    else:
        raise ConfigError(f"--conductor {source!r} is not a checkpoint directory (no "
                          "config.json), a .gguf file or an http(s) URL. Pass the folder "
                          "podium train wrote (e.g. runs/train/NAME/final).")
    return pool.model_copy(update={"conductor": spec, "run": run})


def _constrained(source: str) -> bool:
    """A Conductor trained under the workflow grammar runs under it (its card says so)."""
    card = read_card(source)
    return bool(card and card.get("constrained"))


def _card_run(source: str, pool: Pool, allow_mismatch: bool) -> RunSettings:
    """The pool's run settings with the card's prompt settings over them, once the pool is
    checked against the card (no card: the pool's settings as they are)."""
    check_pool(source, pool, allow_mismatch=allow_mismatch)
    card = read_card(source)
    return resolve_settings(pool.run, card=card["run"] if card else None)
