"""Prompts the embedded model has read, kept so that a later prompt that starts the same way
is not read again.

One llama.cpp context serves every pool entry naming the same model file, the Conductor and
its workers alike, and llama.cpp keeps only the prompt it read last. So without this, each
question's Conductor prompt (instructions, the worker list and few-shots, then the question:
about 850 tokens on the default pool) is read afresh after the workers' calls of the question
before. `PromptStates` copies the context's state (its KV cache, ~23 KB a token for
SmolLM2-135M) after every prompt of at least `MIN_TOKENS` tokens, and before a prompt is read,
restores the kept state that shares the longest start with it when that is longer than what
the context holds: only the rest is read. Restoring reads no logits (the caller reads the
prompt's last token afresh), so a restored prompt continues exactly as one read from scratch.

States are kept least recently used first out, `budget_bytes` in all; a kept prompt that a
newer one extends is dropped (the newer state holds it). Not thread-safe: the embedded
backend calls it under the model's lock.
"""

from __future__ import annotations

import ctypes
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

MIN_TOKENS = 256  # a shorter prompt is read again in well under a second
BUDGET_BYTES = 128 * 1024 * 1024  # ~5,800 tokens of SmolLM2-135M's context


@dataclass
class _State:
    tokens: np.ndarray  # the prompt tokens the state holds
    data: Any  # llama_state_get_data's copy (a ctypes byte array)
    size: int  # its bytes written


def shared_start(a: np.ndarray, b: Sequence[int] | np.ndarray) -> int:
    """How many tokens `a` and `b` share from the start."""
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != np.asarray(b[:n]))
    return int(differ[0]) if len(differ) else n


class PromptStates:
    """The prompt states kept for one llama.cpp model (see the module)."""

    def __init__(self, budget_bytes: int = BUDGET_BYTES, min_tokens: int = MIN_TOKENS) -> None:
        self.budget_bytes, self.min_tokens = budget_bytes, min_tokens
        self._states: OrderedDict[int, _State] = OrderedDict()
        self._next = 0
        self.restored = 0  # states restored so far (for tests and curiosity)

    @property
    def bytes(self) -> int:
        return sum(s.size for s in self._states.values())

    def __len__(self) -> int:
        return len(self._states)

    def restore(self, llm: Any, tokens: Sequence[int], held: int) -> int:
        """Load into `llm` the kept state sharing the longest start with `tokens`, when that
        is longer than `held` (the start `llm` holds now). Returns how much of `tokens` `llm`
        then holds; the caller sets `llm.n_tokens` to it (llama.cpp drops the rest)."""
        best, longest = None, held
        for key, state in self._states.items():
            n = shared_start(state.tokens, tokens)
            if n > longest:
                best, longest = key, n
        if best is None:
            return held
        import llama_cpp

        state = self._states[best]
        self._states.move_to_end(best)
        if llama_cpp.llama_state_set_data(llm._ctx.ctx, state.data, state.size) != state.size:
            llm.n_tokens = 0  # the context is in no known state: read everything again
            return 0
        llm.input_ids[:len(state.tokens)] = state.tokens
        llm.n_tokens = len(state.tokens)
        self.restored += 1
        return longest

    def save(self, llm: Any) -> None:
        """Keep the state of the prompt `llm` has just read (its first `llm.n_tokens`)."""
        n = int(llm.n_tokens)
        if n < self.min_tokens:
            return
        import llama_cpp

        tokens = np.array(llm.input_ids[:n], dtype=np.intc)
        for key in [k for k, s in self._states.items()
                    if shared_start(s.tokens, tokens) == len(s.tokens)]:
            del self._states[key]  # this prompt extends it
        size = llama_cpp.llama_state_get_size(llm._ctx.ctx)
        if size > self.budget_bytes:
            return
        data = (ctypes.c_uint8 * size)()
        written = int(llama_cpp.llama_state_get_data(llm._ctx.ctx, data, size))
        while self._states and self.bytes + written > self.budget_bytes:
            self._states.popitem(last=False)
        self._states[self._next] = _State(tokens, data, written)
        self._next += 1
