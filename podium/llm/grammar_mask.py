"""Grammar-held decoding for the embedded model, through llguidance.

llama.cpp's own grammar sampler checks the grammar against every token of the vocabulary
(49,152 for SmolLM2) at every step: for the workflow grammar that added about 13 ms to a 28 ms
token on 2 idle cores, more under load (`benchmarks/embedded_grammar.py`). llguidance computes
the same mask from a token trie in about a millisecond. `GrammarMasks` turns a GBNF grammar
into a `GrammarMask`, a llama-cpp-python logits processor that sets the logit of every token
the grammar refuses to -inf; the sampler chain after it (penalties, top-k, top-p, temperature)
is llama.cpp's as before, and the end token is allowed only once the grammar is complete.
Where the grammar forces text (`model_id = [`), llguidance allows only the tokenizer's own
split of it; the texts admitted are the GBNF's.

The GBNF text goes through llguidance's own converter with its root wrapped in one more rule:
a grammar without recursion (every workflow grammar) then becomes a single lexeme, matched
exactly. Left as several lexemes, `reason "\\n" workflow` would meet llguidance's greedy lexer,
which reads the line after a reasoning line as more reasoning and so refuses the lists until
the last reasoning line allowed.

llguidance belongs with the `local` extra; where it is not installed, `available()` is False
and the embedded backend leaves the grammar to llama.cpp (the same language, slower).
"""

from __future__ import annotations

import importlib.util
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # numpy comes with llama-cpp-python; an install without it imports this too
    import numpy as np

MAX_GRAMMARS = 256  # compiled grammars kept per model (a pool's sub-pools and budgets vary them)
# An item repeated at most 0 times (`("\n" text){0,0}`: one reasoning line) is nothing in GBNF
# and an error in llguidance. The items, string literals and character classes whole (so that
# nothing inside a literal is taken for an item), each with its repetition:
ITEM = re.compile(r'''(?:\((?:[^()"]|"(?:[^"\\]|\\.)*")*\)|"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]'''
                  r"|[A-Za-z][\w-]*)(?P<never>\{0(?:,0)?\})?")


def available() -> bool:
    return importlib.util.find_spec("llguidance") is not None


def lark_of(gbnf: str) -> str:
    """llguidance's grammar for a GBNF text, its root wrapped so that a grammar without
    recursion is one lexeme (see the module docstring). Raises ValueError on a bad grammar."""
    import llguidance

    if not re.search(r"(?m)^root\s*::=", gbnf):
        raise ValueError("the grammar has no root rule")
    kept = ITEM.sub(lambda m: "" if m["never"] else m[0], gbnf)
    wrapped = re.sub(r"(?m)^root(\s*::=)", r"held-root\1", kept)
    return llguidance.grammar_from("gbnf", wrapped + "\nroot ::= held-root\n")


class GrammarMask:
    """A logits processor holding one generation to a grammar. Before each token it feeds the
    matcher the tokens sampled since the last call (everything past the prompt, which is what
    `input_ids` holds at the first call), then masks what the grammar refuses.

    llama.cpp calls it through a ctypes callback, which swallows exceptions: a failure is kept
    in `error` instead, and every token but the end token is masked, so that generation ends;
    the caller raises it."""

    def __init__(self, matcher: Any, n_vocab: int, eos: int) -> None:
        import numpy as np

        self._matcher, self._n_vocab, self._eos = matcher, n_vocab, eos
        self._bits = np.zeros((n_vocab + 31) // 32, dtype=np.int32)
        self._start: int | None = None
        self._fed = 0
        self.error: str | None = None

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        import numpy as np

        try:
            if self.error is None:
                self._feed(input_ids)
                self._matcher.unsafe_compute_mask_ptr(self._bits.ctypes.data, self._bits.nbytes)
                allowed = np.unpackbits(self._bits.view(np.uint8), bitorder="little")
                scores[allowed[:self._n_vocab] == 0] = -np.inf
                return scores
        except Exception as exc:  # kept for the caller (see the class docstring)
            self.error = f"{type(exc).__name__}: {exc}"
        scores[:] = -np.inf
        scores[self._eos] = 0.0
        return scores

    def _feed(self, input_ids: np.ndarray) -> None:
        if self._start is None:
            self._start = len(input_ids)
        for token in input_ids[self._start + self._fed:]:
            if not self._matcher.consume_token(int(token)):
                raise RuntimeError(self._matcher.get_error() or f"token {token} refused")
            self._fed += 1


class GrammarMasks:
    """llguidance for one loaded llama.cpp model: its tokenizer, built at the first grammar
    (about a second), and a compiled matcher per grammar text, copied for each generation.
    Not thread-safe: the embedded backend uses it under the model's lock."""

    def __init__(self, llm: Any) -> None:
        self._llm = llm
        self._tokenizer: Any = None
        self._matchers: dict[str, Any] = {}

    def mask(self, grammar: str) -> GrammarMask:
        """A fresh processor for one generation held to the GBNF `grammar`."""
        matcher = self._matchers.get(grammar)
        if matcher is None:
            matcher = self._compile(grammar)
            if len(self._matchers) >= MAX_GRAMMARS:
                self._matchers.pop(next(iter(self._matchers)))
            self._matchers[grammar] = matcher
        return GrammarMask(matcher.deep_copy(), self._llm.n_vocab(), self._llm.token_eos())

    def _compile(self, grammar: str) -> Any:
        import llguidance
        from llguidance.llamacpp import lltokenizer_from_vocab

        if self._tokenizer is None:
            self._tokenizer = lltokenizer_from_vocab(self._llm._model.vocab)
        matcher = llguidance.LLMatcher(self._tokenizer, lark_of(grammar), log_level=0)
        if matcher.is_error():
            raise ValueError(f"the grammar does not compile: {matcher.get_error()}")
        return matcher
