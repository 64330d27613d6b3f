"""A model's chat template, rendered here: for servers that cannot continue an assistant prefill.

`prefill = "completions"` (see `podium.config.ModelSpec.prefill`) sends a prefilled request to
`/v1/completions` as one prompt: the conversation before the prefill rendered with the model's
chat template and its generation prompt (the opening of an assistant turn), then the prefill
text, which the model continues token by token. The embedded backend and llama.cpp's
`llama-server` build the same prompt. It is meant for servers whose chat endpoint always closes
a trailing assistant message and opens a new turn, such as `python -m llama_cpp.server`.

`chat_template` names the template: a `.gguf` file (its `tokenizer.chat_template`, BOS and EOS
tokens, read from the header without loading the weights), a Hugging Face
`tokenizer_config.json`, any other file (the Jinja text), or the Jinja text itself. Templates are
rendered the way Hugging Face `apply_chat_template` renders them (a sandboxed Jinja
environment, `trim_blocks`, `lstrip_blocks`, `raise_exception`, `strftime_now`, `tojson`), and
each source is read once per process.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any, BinaryIO

from podium.errors import ConfigError
from podium.llm.base import Message, split_prefill


@dataclass(frozen=True)
class ChatTemplate:
    text: str
    bos_token: str = ""
    eos_token: str = ""
    source: str = "<inline>"

    def render(self, messages: list[Message], **kwargs: Any) -> str:
        """The prompt that continues `messages`' trailing assistant message (if any):
        the earlier messages with the generation prompt, then the prefill text."""
        history, prefill = split_prefill(messages)
        try:
            prompt = _compile(self.text).render(
                messages=history, add_generation_prompt=True, bos_token=self.bos_token,
                eos_token=self.eos_token, **kwargs)
        except Exception as exc:  # a template error: the template or its source is wrong
            raise ConfigError(f"The chat template from {self.source} failed to render: "
                              f"{type(exc).__name__}: {exc}. Check chat_template in the pool "
                              "file.") from None
        return prompt + (prefill or "")


def is_inline(source: str) -> bool:
    """True when `chat_template` holds Jinja text rather than a path."""
    return "{{" in source or "{%" in source


@lru_cache(maxsize=32)
def load_chat_template(source: str) -> ChatTemplate:
    """The template named by a pool entry's `chat_template`; ConfigError naming the fix."""
    if is_inline(source):
        return ChatTemplate(source)
    path = Path(source).expanduser()
    if not path.is_file():
        raise ConfigError(f"chat_template {source!r} is neither Jinja text nor an existing file. "
                          "Set it to the model's .gguf, its tokenizer_config.json, a .jinja "
                          "file or the template text.")
    if path.suffix == ".gguf":
        return _from_gguf(path)
    if path.suffix == ".json":
        return _from_tokenizer_config(path)
    return ChatTemplate(path.read_text("utf-8"), source=str(path))


@lru_cache(maxsize=32)
def _compile(text: str) -> Any:
    try:
        from jinja2 import ext
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        raise ConfigError("prefill = \"completions\" renders the chat template with jinja2, "
                          "which is not installed: pip install jinja2.") from None

    def raise_exception(message: str) -> None:
        raise ValueError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[ext.loopcontrols])
    env.filters["tojson"] = lambda x, indent=None, ensure_ascii=False, separators=None, \
        sort_keys=False: json.dumps(x, indent=indent, ensure_ascii=ensure_ascii,
                                    separators=separators, sort_keys=sort_keys)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(text)


def _token_text(value: Any) -> str:
    if isinstance(value, dict):  # {"content": "<s>", "lstrip": false, ...}
        return str(value.get("content") or "")
    return str(value or "")


def _from_tokenizer_config(path: Path) -> ChatTemplate:
    try:
        data = json.loads(path.read_text("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"chat_template {path} is not valid JSON: {exc}.") from None
    template = data.get("chat_template")
    if isinstance(template, list):  # named templates: [{"name": "default", "template": ...}]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    if not isinstance(template, str) or not template:
        raise ConfigError(f"{path} has no chat_template; point chat_template at the model's "
                          "tokenizer_config.json, its .gguf or a .jinja file.")
    return ChatTemplate(template, _token_text(data.get("bos_token")),
                        _token_text(data.get("eos_token")), str(path))


# GGUF value types (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md)
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
            12: "d"}
_STRING, _ARRAY = 8, 9
_WANTED = {"tokenizer.chat_template", "tokenizer.ggml.tokens", "tokenizer.ggml.bos_token_id",
           "tokenizer.ggml.eos_token_id"}


def _read(fh: BinaryIO, fmt: str) -> Any:
    size = struct.calcsize("<" + fmt)
    data = fh.read(size)
    if len(data) != size:
        raise EOFError
    return struct.unpack("<" + fmt, data)[0]


def _string(fh: BinaryIO, keep: bool = True) -> str | None:
    n = _read(fh, "Q")
    if not keep:
        fh.seek(n, 1)
        return None
    return fh.read(n).decode("utf-8", errors="replace")


def _value(fh: BinaryIO, kind: int, keep: bool) -> Any:
    if kind == _STRING:
        return _string(fh, keep)
    if kind == _ARRAY:
        item, count = _read(fh, "I"), _read(fh, "Q")
        if item in _SCALARS and not keep:
            fh.seek(struct.calcsize("<" + _SCALARS[item]) * count, 1)
            return None
        values = [_value(fh, item, keep) for _ in range(count)]
        return values if keep else None
    if kind in _SCALARS:
        return _read(fh, _SCALARS[kind])
    raise ValueError(f"unknown GGUF value type {kind}")


def gguf_metadata(path: Path, keys: set[str] = _WANTED) -> dict[str, Any]:
    """The header key/value pairs named in `keys` (the tensors are never read)."""
    out: dict[str, Any] = {}
    with open(path, "rb") as fh:
        if fh.read(4) != b"GGUF":
            raise ValueError("not a GGUF file")
        version = _read(fh, "I")
        if version < 2:
            raise ValueError(f"GGUF version {version} is too old")
        _read(fh, "Q")  # tensor count
        for _ in range(_read(fh, "Q")):
            key = _string(fh)
            keep = key in keys
            value = _value(fh, _read(fh, "I"), keep)
            if keep:
                out[key] = value  # type: ignore[index]
    return out


def _from_gguf(path: Path) -> ChatTemplate:
    try:
        meta = gguf_metadata(path)
    except (OSError, ValueError, EOFError, struct.error) as exc:
        raise ConfigError(f"chat_template {path} could not be read as a GGUF file ({exc}); "
                          "point it at the model file the server loads.") from None
    template = meta.get("tokenizer.chat_template")
    if not template:
        raise ConfigError(f"{path} has no chat template; use an instruction-tuned GGUF or set "
                          "chat_template to a .jinja file.")
    tokens = meta.get("tokenizer.ggml.tokens") or []

    def token(key: str) -> str:
        i = meta.get(key)
        return tokens[i] if isinstance(i, int) and 0 <= i < len(tokens) else ""

    return ChatTemplate(template, token("tokenizer.ggml.bos_token_id"),
                        token("tokenizer.ggml.eos_token_id"), str(path))
