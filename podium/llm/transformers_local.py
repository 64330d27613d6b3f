"""A model run in process with transformers: a Conductor checkpoint straight from `podium train`.

`backend = "transformers"` with `model` = a Hugging Face model directory (a `podium train`
checkpoint, its `final/` folder) generates on this machine, on the GPU when there is one. It
needs the `train` extra (torch, transformers), imported only when such a model is used, so
inference with the other backends never needs torch.

The prompt is rendered with the model's own chat template; a trailing assistant message is a
true prefill (the template continues it), as in the embedded backend and in training. One
loaded model is shared by every pool entry naming the same directory, and calls to it are
serialised. A GBNF grammar (a constrained Conductor) is applied with xgrammar, as in training
with `[rollout] constrained`, when xgrammar is installed (it is in the `train` extra). It
takes no tools (`supports_tools` is false; given them, a `ConfigError`).
"""

from __future__ import annotations

import asyncio
import importlib.util
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from podium.config import ModelSpec
from podium.errors import ConfigError, WorkerError
from podium.llm.base import ChatResponse, Message, NoGrammar, Sampling, applied
from podium.llm.tools import Tool, ToolChoice, refuse_tools, tools_kw

INSTALL = ("The transformers backend needs the `train` extra: pip install 'podium[train]' "
           "(torch, transformers).")

_LOADED: dict[str, tuple[Any, Any, threading.Lock]] = {}
_LOAD_LOCK = threading.Lock()
_COMPILERS: dict[str, Any] = {}  # model directory -> xgrammar GrammarCompiler


def _load(path: str) -> tuple[Any, Any, threading.Lock]:
    with _LOAD_LOCK:
        if path not in _LOADED:
            try:
                import torch
                from transformers import AutoModelForCausalLM, AutoTokenizer
            except ImportError:
                raise ConfigError(INSTALL) from None
            dtype = torch.bfloat16 if torch.cuda.is_available() else torch.float32
            tokenizer = AutoTokenizer.from_pretrained(path)
            model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
            # (transformers wraps `to` in a decorator whose type drops the bound `self`)
            model.to("cuda" if torch.cuda.is_available() else "cpu").eval()  # type: ignore[arg-type]
            _LOADED[path] = (model, tokenizer, threading.Lock())
        return _LOADED[path]


def _grammar_processor(path: str, model: Any, tokenizer: Any, grammar: str) -> Any:
    import xgrammar as xgr

    with _LOAD_LOCK:
        if path not in _COMPILERS:
            info = xgr.TokenizerInfo.from_huggingface(tokenizer,
                                                      vocab_size=model.config.vocab_size)
            _COMPILERS[path] = xgr.GrammarCompiler(info)
    return xgr.contrib.hf.LogitsProcessor(_COMPILERS[path].compile_grammar(grammar))


class TransformersClient(NoGrammar):
    """A Conductor (or worker) checkpoint generating in process."""

    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec
        self.name = spec.name
        path = Path(spec.model).expanduser()
        if not (path / "config.json").is_file():
            raise ConfigError(f"Model {spec.name!r}: {path} is not a Hugging Face model "
                              "directory (no config.json). Point model (or --conductor) at a "
                              "`podium train` checkpoint such as runs/train/NAME/final.")
        self._path = str(path)

    @property
    def supports_grammar(self) -> bool:
        return importlib.util.find_spec("xgrammar") is not None

    def _generate(self, messages: list[Message], grammar: str | None = None,
                  sampling: Sampling | None = None) -> ChatResponse:
        import torch

        model, tokenizer, lock = _load(self._path)
        prefill = bool(messages) and messages[-1]["role"] == "assistant"
        text = tokenizer.apply_chat_template(messages, tokenize=False,
                                             continue_final_message=prefill,
                                             add_generation_prompt=not prefill)
        inputs = tokenizer(text, return_tensors="pt", add_special_tokens=False).to(model.device)
        s = applied(self.spec, sampling)
        temperature = 0.8 if s.temperature is None else s.temperature
        kwargs: dict[str, Any] = {"max_new_tokens": s.max_tokens or 256,
                                  "pad_token_id": tokenizer.pad_token_id or tokenizer.eos_token_id}
        if temperature > 0:
            kwargs.update(do_sample=True, temperature=temperature, top_p=s.top_p or 1.0)
        else:
            kwargs.update(do_sample=False)
        if grammar is not None:
            kwargs["logits_processor"] = [_grammar_processor(self._path, model, tokenizer,
                                                             grammar)]
        start = time.perf_counter()
        with lock, torch.no_grad():
            if s.seed is not None:
                torch.manual_seed(s.seed)
            out = model.generate(**inputs, **kwargs)
        new = out[0][inputs["input_ids"].shape[1]:]
        finished = bool(len(new)) and int(new[-1]) == tokenizer.eos_token_id
        return ChatResponse(
            text=tokenizer.decode(new, skip_special_tokens=True),
            prompt_tokens=int(inputs["input_ids"].shape[1]), completion_tokens=len(new),
            finish_reason="stop" if finished else "length",
            latency_s=time.perf_counter() - start, model=Path(self._path).name,
            prefill="continued" if prefill else "none")

    @property
    def supports_tools(self) -> bool:
        return False  # its chat format has no tool calls

    async def chat(self, messages: list[Message], *, grammar: str | None = None,
                   sample_id: int | str = 0, sampling: Sampling | None = None,
                   tools: Sequence[Tool] | None = None, tool_choice: ToolChoice | None = None,
                   parallel_tool_calls: bool | None = None) -> ChatResponse:
        if tools_kw(tools, tool_choice, parallel_tool_calls):
            refuse_tools(self.name, self.spec.backend)
        if grammar is not None and not self.supports_grammar:
            self.refuse_grammar(grammar)
        try:
            return await asyncio.to_thread(self._generate, messages, grammar, sampling)
        except (WorkerError, ConfigError):
            raise
        except Exception as exc:  # a torch or tokenizer failure: one error kind, recorded
            raise WorkerError(self.name, "other", f"transformers failed: "
                              f"{type(exc).__name__}: {exc}"[:400]) from None

    async def aclose(self) -> None:
        return None
