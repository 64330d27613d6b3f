"""A request's body, as both APIs read it: within its size limit, strict JSON, validated.

`read_body` refuses a body past `--max-request-bytes` while it is read (413), not after.
`validated` parses it and validates it into the API's request model; anything wrong is a 400
naming the field (`param`). Unknown fields are the model's business (both APIs accept and
ignore them, as OpenAI-compatible servers do). What is accepted can be traced: a body with
`NaN` or `Infinity` (not JSON) is refused, and so is a string anywhere in it, known field or
not, that holds a lone surrogate (`"\\ud800"`: no character, which no trace, log or model
takes), with a 400 naming its field (`not_unicode`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from podium.files import strict_loads
from podium.serve.errors import ApiError, bad_request

M = TypeVar("M", bound=BaseModel)


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 as soon as it is longer than `limit` bytes."""
    too_big = ApiError(413, f"The request body is larger than this server's limit of {limit} "
                       "bytes (--max-request-bytes). Send a shorter conversation.",
                       code="request_too_large")
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise too_big
    size, chunks = 0, []
    async for piece in request.stream():
        size += len(piece)
        if size > limit:
            raise too_big
        chunks.append(piece)
    return b"".join(chunks)


def validated(raw: bytes, model: type[M], rules: Mapping[str, str]) -> tuple[M, dict]:
    """The body as `model`, and as the JSON object it was; an ApiError (400) naming the bad
    field otherwise (a top-level field in `rules` with what it must be)."""
    try:
        data = strict_loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        raise bad_request(f"The request body is not valid JSON ({exc}). Send a JSON object "
                          "with Content-Type: application/json.", code="invalid_json") from None
    except RecursionError:
        raise too_deep() from None
    if not isinstance(data, dict):
        raise bad_request("The request body must be a JSON object.", code="invalid_json")
    if not (raw.isascii() and b"\\u" not in raw) and (where := not_unicode(data)) is not None:
        raise bad_request(f"Invalid value for '{where}': it holds a lone surrogate (a \\ud800-"
                          "\\udfff escape without its pair), which is not a character. Send "
                          "the text as valid Unicode.", param=where)
    try:
        return model.model_validate(data), data
    except ValidationError as exc:
        raise validation_error(exc, rules) from None
    except RecursionError:
        raise too_deep() from None


def validation_error(err: ValidationError, rules: Mapping[str, str] | None = None,
                     prefix: str = "") -> ApiError:
    """The 400 for the first error: a top-level field of `rules` named as the API names it,
    with what it must be (not pydantic's union members); any other field with pydantic's
    message, its `param` prefixed with `prefix`."""
    first = err.errors()[0]
    param = prefix + ".".join(str(p) for p in first["loc"])
    if first["type"] == "missing":
        return bad_request(f"Missing required parameter: '{param}'.", param=param,
                           code="missing_required_parameter")
    field = str(first["loc"][0]) if first["loc"] and not prefix else ""
    if rules and field in rules:
        got = first.get("input")
        return bad_request(f"Invalid value for '{field}': it must be {rules[field]} (got "
                           f"{json.dumps(got) if _jsonable(got) else repr(got)}).",
                           param=field)
    return bad_request(f"Invalid value for '{param}': {first['msg']}.", param=param)


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def not_unicode(data: Any) -> str | None:
    """The field (dotted, as `param` names it) of the first string in `data`, or key, that
    holds a lone surrogate: JSON's `\\ud800` escapes decode to one, and no trace, log or
    model can take it as text."""
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, str):
            if not _encodable(value):
                return where
        elif isinstance(value, dict):
            for key in value:
                if not _encodable(key):
                    return where or "(a key)"
            stack.extend((f"{where}.{k}" if where else k, v)
                         for k, v in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend((f"{where}.{i}", v) for i, v in reversed(list(enumerate(value))))
    return None


def _encodable(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def too_deep() -> Exception:
    return bad_request("The request body is nested too deeply to read. Send the messages as "
                       "the API describes them (no deeper than a few levels).",
                       code="invalid_json")
