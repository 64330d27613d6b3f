"""`podium export CHECKPOINT --gguf OUT`: a trained SmolLM2-family Conductor as a GGUF file.

The reverse of the GGUF -> trainable conversion in `podium.train.model`: the checkpoint's
weights are written under llama.cpp's tensor names (the query and key projections permuted back
to llama.cpp's rotary layout), in F32 or F16, and every other key — tokenizer, chat template,
hyper-parameters — is copied from a template GGUF of the same family (default: the bundled
SmolLM2-135M-Instruct the policy was converted from). The result runs on the embedded
llama.cpp backend: offline, grammar-constrained when asked (`--conductor OUT.gguf`). The
checkpoint's Conductor card is written beside it (`OUT.podium-conductor.json`), so the pool
check and the prompt settings travel with the file.

An export cannot half-finish: the GGUF is written under a temporary name in the target folder
(`.OUT.partial`), the card is written, and only then is the GGUF renamed to OUT. A failure on
the way (a full disk, a card that cannot be written) leaves neither file, and a GGUF without
its card is refused by `--conductor` anyway (`podium.checkpoint`). The checkpoint is checked
before anything is written: a missing, empty or truncated folder, or one without a card, is a
`ConfigError` naming it.

Only llama-architecture checkpoints whose shape matches the template are exported; anything
else is refused with the mismatch named.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any, Literal

from podium.checkpoint import card_path, read_card
from podium.errors import ConfigError

_SHAPE_KEYS = {  # GGUF key -> transformers config attribute
    "llama.block_count": "num_hidden_layers",
    "llama.embedding_length": "hidden_size",
    "llama.feed_forward_length": "intermediate_size",
    "llama.attention.head_count": "num_attention_heads",
    "llama.attention.head_count_kv": "num_key_value_heads",
    "llama.vocab_size": "vocab_size",
}


def _permute(w: Any, heads: int) -> Any:
    """llama.cpp's layout of a q/k projection (the inverse of transformers' GGUF loader)."""
    return (w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def _field(reader: Any, key: str) -> Any:
    field = reader.get_field(key)
    return field.contents() if field is not None else None


def export_gguf(checkpoint: str | Path, out: str | Path, *, like: str | Path | None = None,
                dtype: Literal["f32", "f16"] = "f16") -> Path:
    """Write `checkpoint` (a `podium train` folder) as the GGUF file `out`, with its card
    beside it, copying every key but the weights from `like` (default: the bundled
    SmolLM2 GGUF); return `out`. A `ConfigError` names a checkpoint that cannot be
    exported."""
    import gguf
    from transformers import AutoConfig

    from podium.llm.embedded import bundled_gguf

    checkpoint, out = Path(checkpoint), Path(out)
    if out.suffix != ".gguf" or out.is_dir():
        raise ConfigError(f"--gguf {out}: name the .gguf file to write (e.g. conductor.gguf).")
    card = _checked_checkpoint(checkpoint)
    like = Path(like) if like else bundled_gguf()
    try:
        config = AutoConfig.from_pretrained(checkpoint)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{checkpoint}/config.json cannot be read ({exc}); the checkpoint "
                          "is damaged: export another one.") from None
    reader = gguf.GGUFReader(str(like))
    if config.model_type != "llama" or _field(reader, "general.architecture") != "llama":
        raise ConfigError(f"{checkpoint} is a {config.model_type!r} model; podium export writes "
                          "llama-family (SmolLM2) Conductors only.")
    wrong = [f"{key} {_field(reader, key)} vs {getattr(config, attr, None)}"
             for key, attr in _SHAPE_KEYS.items()
             if _field(reader, key) != getattr(config, attr, None)]
    if wrong:
        raise ConfigError(f"{checkpoint} does not have the shape of {like.name} ("
                          + "; ".join(wrong) + "). Pass --like with a GGUF of its base model.")
    state = _load_state(checkpoint)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, config.num_hidden_layers)
    partial = out.with_name(f".{out.name}.partial")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        _write(partial, state, names, config, reader, gguf, dtype, checkpoint)
        _write_atomic(card_path(out), json.dumps({**card, "exported_from": str(checkpoint)},
                                                 indent=2, ensure_ascii=False))
        os.replace(partial, out)  # the GGUF appears only once its card is beside it
    except OSError as exc:
        raise ConfigError(f"Writing {out} failed ({type(exc).__name__}: {exc}); nothing was "
                          "exported. Free the path (or the disk) and export again.") from None
    finally:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
    return out


def _write(path: Path, state: dict, names: Any, config: Any, reader: Any, gguf: Any,
           dtype: str, checkpoint: Path) -> None:
    import numpy as np
    import torch

    writer = gguf.GGUFWriter(str(path), "llama")
    _copy_metadata(reader, writer, gguf, dtype)
    for name, tensor in state.items():
        if name == "lm_head.weight" and config.tie_word_embeddings:
            continue
        target = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if target is None:
            raise ConfigError(f"{checkpoint}: no GGUF name for tensor {name!r}.")
        data = tensor.to(torch.float32).numpy()
        if name.endswith("q_proj.weight"):
            data = _permute(data, config.num_attention_heads)
        elif name.endswith("k_proj.weight"):
            data = _permute(data, config.num_key_value_heads)
        if dtype == "f16" and data.ndim > 1:
            data = data.astype(np.float16)
        writer.add_tensor(target, np.ascontiguousarray(data))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _write_atomic(path: Path, text: str) -> None:
    """`text` into `path` through a temporary file beside it: all of it or nothing."""
    tmp = path.with_name(f".{path.name}.partial")
    try:
        tmp.write_text(text, "utf-8")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _checked_checkpoint(checkpoint: Path) -> dict[str, Any]:
    """The card of a checkpoint folder fit to export; a ConfigError naming what is wrong."""
    which = "pass the folder podium train wrote (e.g. runs/train/NAME/final)"
    if not checkpoint.exists():
        raise ConfigError(f"{checkpoint}: no such checkpoint; {which}.")
    if not checkpoint.is_dir():
        raise ConfigError(f"{checkpoint} is a file, not a checkpoint folder; {which}.")
    if not (checkpoint / "config.json").is_file():
        raise ConfigError(f"{checkpoint} holds no config.json, so it is not a model "
                          f"checkpoint (or its writing did not finish); {which}.")
    card = read_card(checkpoint)
    if card is None:
        raise ConfigError(f"{checkpoint} has no Conductor card ({card_path(checkpoint).name}): "
                          "without it the GGUF could not be run with its pool and prompt "
                          f"settings. {which[0].upper()}{which[1:]}.")
    return card


def _load_state(checkpoint: Path) -> dict[str, Any]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    files = sorted(checkpoint.glob("*.safetensors"))
    if not files:
        raise ConfigError(f"{checkpoint} holds no .safetensors weights; pass the folder podium "
                          "train wrote (e.g. runs/train/NAME/final).")
    state: dict[str, Any] = {}
    for f in files:
        try:
            state.update(load_file(str(f)))
        except (SafetensorError, OSError) as exc:
            raise ConfigError(f"{f} cannot be read ({exc}): the checkpoint is truncated or "
                              "damaged; export another checkpoint (its writing may not have "
                              "finished).") from None
    return state


def _copy_metadata(reader: Any, writer: Any, gguf: Any, dtype: str) -> None:
    file_type = gguf.LlamaFileType.ALL_F32 if dtype == "f32" else gguf.LlamaFileType.MOSTLY_F16
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name in (
                "general.architecture", "general.file_type", "general.name",
                "general.quantization_version"):
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), kind, sub_type=sub)
    writer.add_name("podium conductor")
    writer.add_file_type(file_type)
