"""Read a workflow out of the Conductor's free-form output.

The Conductor reasons in prose, then writes three Python-style lists::

    model_id = [2, 0]
    subtasks = ["<instruction for step 0>", "<instruction for step 1>"]
    access_list = [[], ["all"]]

`parse_workflow` turns that text into a `Workflow`, or raises `WorkflowParseError` whose
`.reason` is one of `PARSE_REASONS`. It never raises anything else for a `str` input.

Algorithm (after the paper's reference code):

1. Normalise: drop closed ``<think>...</think>`` spans, and everything up to a ``</think>``
   left without its opening tag; delete backticks; strip one leading ``-``, ``*`` or ``•``
   bullet from every line; map curly quotes to ASCII.
2. For each field take the first case-insensitive, whole-word match of its label followed by
   ``:`` or ``=`` (``model_id``/``model id(s)``, ``subtask(s)``, ``access_list``/``access``).
3. From the label, take the first ``[`` and its balanced ``]``; brackets inside quoted strings
   (with backslash escapes) do not count. No balanced list means the field is missing.
4. Decode the list with `json.loads` when it is JSON (the fast case: ids, access lists,
   double-quoted subtasks), else `ast.literal_eval`, else `json.loads` with ``'`` turned into
   ``"``, else a naive comma split (quotes and spaces stripped, digit items become ints).
5. Validate, first failure wins: no list at all -> unparseable; all empty -> empty; lengths
   differ -> length_mismatch; more than `max_steps` -> too_many_steps; model ids ->
   bad_model_id; subtasks -> unparseable; access entries -> bad_access (an entry that is not
   "all", [] or, in ``access_mode="indices"``, earlier step positions); then, only with
   ``require_cover=True`` in ``access_mode="indices"``, the cover rule (PAPER.md §4.3) ->
   bad_access: every step but the last must be seen by some later step ("all" at step i sees
   steps 0..i-1).
"""

from __future__ import annotations

import ast
import json
import re
import warnings
from collections.abc import Collection
from typing import Any, Literal

from podium.errors import WorkflowParseError
from podium.workflow.types import Access, Step, Workflow

__all__ = ["parse_workflow"]

_LABELS: dict[str, re.Pattern[str]] = {
    "model_id": re.compile(r"\bmodel[ _]ids?\s*[:=]", re.IGNORECASE),
    "subtasks": re.compile(r"\bsubtasks?\s*[:=]", re.IGNORECASE),
    "access_list": re.compile(r"\baccess(?:[ _]list)?\s*[:=]", re.IGNORECASE),
}
_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)
_BULLET = re.compile(r"^[ \t]*[-*•][ \t]*", re.MULTILINE)
_QUOTES = str.maketrans({"“": '"', "”": '"', "‘": "'", "’": "'"})
_DIGITS = re.compile(r"[0-9]{1,18}")  # longer digit runs are never a valid index
_MAX_EVAL_CHARS = 100_000
_SURROGATE_PAIR = re.compile("[\ud800-\udbff][\udc00-\udfff]")


def _drop_think(text: str) -> str:
    """Remove closed <think> spans, then everything up to a leftover </think> (linear time)."""
    kept, pos = [], 0
    while (opened := _THINK_OPEN.search(text, pos)) and (
        closed := _THINK_CLOSE.search(text, opened.end())
    ):
        kept.append(text[pos : opened.start()])
        pos = closed.end()
    text = "".join(kept) + text[pos:]
    ends = [m.end() for m in _THINK_CLOSE.finditer(text)]
    return text[ends[-1] :] if ends else text


def _normalise(text: str) -> str:
    text = _drop_think(text).replace("`", "")
    text = _BULLET.sub("", text)
    return text.translate(_QUOTES)


def _balanced(text: str, start: int) -> str | None:
    """The balanced ``[...]`` opening at `text[start]`, or None if it never closes."""
    depth, quote, i = 0, "", start
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth == 0:
                return text[start : i + 1]
        i += 1
    return None


def _find_list(text: str, label: re.Pattern[str]) -> str | None:
    match = label.search(text)
    if match is None:
        return None
    start = text.find("[", match.end())
    return None if start < 0 else _balanced(text, start)


def _naive_split(span: str) -> list[Any]:
    items = (part.strip(" \t\r\n'\"") for part in span[1:-1].split(","))
    return [int(x) if _DIGITS.fullmatch(x) else x for x in items if x]


def _join_surrogates(item: Any) -> Any:
    """literal_eval keeps a JSON-escaped pair like \\ud83d\\ude00 as two surrogates; join it."""
    if not isinstance(item, str):
        return item
    return _SURROGATE_PAIR.sub(
        lambda m: m.group().encode("utf-16", "surrogatepass").decode("utf-16"), item
    )


def _decode(span: str) -> list[Any]:
    try:  # a list that is JSON (ids, access lists, double-quoted subtasks): the fast reader
        value = json.loads(span)
        if isinstance(value, list):
            return value
    except (ValueError, RecursionError, MemoryError):
        pass
    if len(span) <= _MAX_EVAL_CHARS:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                value = ast.literal_eval(span)
            if isinstance(value, list):
                return [_join_surrogates(item) for item in value]
        except Exception:  # SyntaxError, ValueError, RecursionError, MemoryError, ...
            pass
    try:
        value = json.loads(span.replace("'", '"'))
        if isinstance(value, list):
            return value
    except (ValueError, RecursionError, MemoryError):
        pass
    return _naive_split(span)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _as_index(value: Any) -> int | None:
    """An int (not a bool) or a string of ASCII digits, as an int; else None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and _DIGITS.fullmatch(value.strip()):
        return int(value.strip())
    return None


def _model_ids(raw: list[Any], num_workers: int, allowed: Collection[int] | None) -> list[int]:
    ids = []
    for i, item in enumerate(raw):
        worker = _as_index(item)
        if worker is None:
            raise WorkflowParseError(
                "bad_model_id", f"step {i}: model id {_show(item)} is not an int"
            )
        if not 0 <= worker < num_workers:
            span = f"0..{num_workers - 1}" if num_workers > 0 else "the (empty) pool"
            raise WorkflowParseError(
                "bad_model_id", f"step {i}: model id {_show(worker)} is not in {span}"
            )
        if allowed is not None and worker not in allowed:
            raise WorkflowParseError("bad_model_id", f"step {i}: model id {worker} is not allowed")
        ids.append(worker)
    return ids


def _subtasks(raw: list[Any]) -> list[str]:
    out = []
    for i, item in enumerate(raw):
        if isinstance(item, int | float) and not isinstance(item, bool):
            item = str(item)
        if not isinstance(item, str):
            raise WorkflowParseError("unparseable", f"step {i}: subtask {_show(item)} is not text")
        out.append(item)
    return out


def _is_all(value: Any) -> bool:
    return isinstance(value, str) and value.strip().lower() == "all"


def _access(entry: Any, i: int, mode: str) -> Access:
    is_list = isinstance(entry, list | tuple)
    if _is_all(entry) or (is_list and any(map(_is_all, entry))):
        # At step 0 "all" sees no earlier step (the paper treats it as empty), but it is kept:
        # in a recursion round it still shows the previous round (run.previous_round_visibility).
        return "all"
    if is_list and not entry:
        return ()
    single = isinstance(entry, int) and not isinstance(entry, bool)
    indices = [_as_index(x) for x in entry] if is_list else [entry if single else None]
    if mode != "indices" or None in indices:
        raise WorkflowParseError("bad_access", f"step {i}: access {_show(entry)} is not allowed")
    for j in indices:
        if not 0 <= j < i:  # type: ignore[operator]
            raise WorkflowParseError(
                "bad_access", f"step {i}: access entry {j} must name an earlier step (0..{i - 1})"
            )
    return tuple(sorted(set(indices)))  # type: ignore[arg-type]


def _check_cover(workflow: Workflow) -> None:
    """bad_access unless every step but the last is seen by some later step."""
    seen = set().union(*workflow.dependencies())
    unseen = [j for j in range(len(workflow) - 1) if j not in seen]
    if unseen:
        raise WorkflowParseError(
            "bad_access",
            f"no later step sees step(s) {unseen}; every step but the last must be named in a "
            "later step's access entry or be covered by a later step's all",
        )


def parse_workflow(
    text: str,
    *,
    num_workers: int,
    max_steps: int | None = 5,
    access_mode: Literal["indices", "binary"] = "binary",
    allowed_workers: Collection[int] | None = None,
    require_cover: bool = False,
) -> Workflow:
    """Parse the Conductor's output into a Workflow; raise WorkflowParseError if it is not one.

    `require_cover` applies the positional-access cover rule (PAPER.md §4.3) when
    `access_mode` is ``"indices"``; it has no effect in ``"binary"`` mode.
    """
    clean = _normalise(text)
    spans = {name: _find_list(clean, label) for name, label in _LABELS.items()}
    if all(span is None for span in spans.values()):
        raise WorkflowParseError("unparseable", "no model_id, subtasks or access_list list found")
    fields = {name: [] if span is None else _decode(span) for name, span in spans.items()}
    raw_ids, raw_tasks, raw_access = fields["model_id"], fields["subtasks"], fields["access_list"]
    if not (raw_ids or raw_tasks or raw_access):
        raise WorkflowParseError("empty", "all three lists are empty")
    lengths = {name: len(value) for name, value in fields.items()}
    if len(set(lengths.values())) > 1:
        shown = ", ".join(f"{name}={n}" for name, n in lengths.items())
        raise WorkflowParseError("length_mismatch", f"list lengths differ: {shown}")
    if max_steps is not None and len(raw_ids) > max_steps:
        raise WorkflowParseError(
            "too_many_steps", f"{len(raw_ids)} steps is more than the limit of {max_steps}"
        )
    workers = _model_ids(raw_ids, num_workers, allowed_workers)
    tasks = _subtasks(raw_tasks)
    access = [_access(entry, i, access_mode) for i, entry in enumerate(raw_access)]
    workflow = Workflow(
        tuple(Step(w, t, a) for w, t, a in zip(workers, tasks, access, strict=True))
    )
    if require_cover and access_mode == "indices":
        _check_cover(workflow)
    return workflow
