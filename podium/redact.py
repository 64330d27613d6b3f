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
