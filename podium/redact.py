"""The one place secrets are taken out of text: every API key podium reads is registered here,
and the boundaries every message passes scrub them.

A key enters podium in one place (`ModelSpec.api_key`, reading the configured environment
variable) and is registered there. It can come back in any text an endpoint sends: an error
body, a reply that is not a completion, a redirect, a streamed chunk, even a completion's
content (a misconfigured proxy or a debugging endpoint echoing the request's headers). Two
records carry every such text onwards, and both scrub at construction:

* `PodiumError` (and so every `WorkerError`): its message, which becomes the failure in an
  outcome, a trace, an eval result, a log line, a CLI error and a server's error body;
* `ChatResponse`: a reply's text (and so a step's response in traces, caches and answers).

Text streamed before its reply is whole (the answer's tokens as its worker writes them, sent
on by `podium serve`) passes through `ScrubbedStream`, which holds back an end of the text
that could be the start of a key, so that a key split across two pieces is still masked
whole.

Where a message quotes an endpoint's text cut to a length, it cuts with `clip`, which scrubs
before the cut.

A registered secret is replaced by `***` wherever it appears. Values shorter than
`MIN_LENGTH` are not registered (scrubbing a two-letter "key" would mangle ordinary text);
real keys are far longer.
"""

from __future__ import annotations

import threading

MIN_LENGTH = 8
MASK = "***"

_lock = threading.Lock()
_secrets: tuple[str, ...] = ()  # longest first, so a key containing another is masked whole


def register(secret: str | None) -> None:
    """Scrub `secret` from every message from now on (in this process)."""
    global _secrets
    if not secret or len(secret) < MIN_LENGTH or secret in _secrets:
        return
    with _lock:
        _secrets = tuple(sorted({*_secrets, secret}, key=len, reverse=True))


def scrub(text: str) -> str:
    """`text` with every registered secret masked."""
    for secret in _secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def clip(text: str, limit: int) -> str:
    """The first `limit` characters of `text`, scrubbed before the cut: a quote of an
    endpoint's text never ends in half a key, which no later scrub would recognise."""
    return scrub(text)[:limit]


class ScrubbedStream:
    """Streamed text, scrubbed: `add` each piece as it comes, `close` at the end; `sink` gets
    the text with every registered secret masked, as soon as no secret can still be running
    across the next piece: only an end of the text that is the start of a secret waits for
    more text (ordinary text passes at once)."""

    def __init__(self, sink) -> None:
        self.sink = sink
        self._held = ""

    def add(self, piece: str) -> None:
        if not piece:
            return
        text = self._held + piece
        cut = len(text)
        for secret in _secrets:  # the earliest end of the text that could begin a secret
            for start in range(max(len(text) - len(secret) + 1, 0), cut):
                if secret.startswith(text[start:]):
                    cut = start
                    break
        for secret in _secrets:  # a whole secret across the cut moves the cut before it
            start = text.find(secret, max(cut - len(secret) + 1, 0))
            while start != -1 and start < cut:
                if start + len(secret) > cut:
                    cut = start
                    break
                start = text.find(secret, start + 1)
        self._held = text[cut:]
        if cut:
            self.sink(scrub(text[:cut]))

    def close(self) -> None:
        held, self._held = self._held, ""
        if held:
            self.sink(scrub(held))
