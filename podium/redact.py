r"""The one place secrets are taken out of text: every API key podium reads is registered here,
and the boundaries every message passes scrub them.

A key enters podium in one place (`ModelSpec.api_key`, reading the configured environment
variable) and is registered there. It can come back in any text an endpoint sends: an error
body, a reply that is not a completion, a redirect, a streamed chunk, even a completion's
content (a misconfigured proxy or a debugging endpoint echoing the request's headers). Two
records carry every such text onwards, and both scrub at construction:

* `PodiumError` (and so every `WorkerError`): its message, which becomes the failure in an
  outcome, a trace, an eval result, a log line, a CLI error and a server's error body;
* `ChatResponse`: every string of a reply, where a backend's bytes become podium's: its
  text, model, request id (an `X-Request-Id` header or the reply's `id`), finish reason,
  extras and retry records, however deeply nested (and so a step's record in traces, caches,
  answers, `pool check`'s table and served replies).

Text streamed before its reply is whole (the answer's tokens as its worker writes them, sent
on by `podium serve`) passes through `ScrubbedStream`, which holds back an end of the text
that could be the start of a key, so that a key split across two pieces is still masked
whole.

Where a message quotes an endpoint's text cut to a length, it cuts with `clip`, which scrubs
before the cut.

Log records are scrubbed as they are made, whoever logs them: from the first registered
secret on, the process's log record factory masks every record's message and traceback. The
HTTP libraries log a reply's headers at DEBUG level (an `X-Request-Id` that echoes the key),
and no podium boundary sees those lines.

A registered secret is replaced by `***` wherever it appears, in every encoding a JSON or URL
layer can write it in: each character as itself, as a `\uXXXX` escape (any hex case), `/` as
`\/`, or percent-encoded (`%XX`). An endpoint that writes the key `\u`-escaped in an error
body, or a reply that quotes it so, is masked as surely as one that writes it plainly. Text
without a backslash or a percent sign (nearly all) is searched for the plain key only.

`safe_url` is how a URL is shown: with any `user:password@` masked (a `base_url` may carry
credentials, and a short password cannot be registered; see `MIN_LENGTH`).

Values shorter than `MIN_LENGTH` are not registered (scrubbing a two-letter "key" would
mangle ordinary text); real keys are far longer.
"""

from __future__ import annotations

import logging
import re
import threading
import urllib.parse

MIN_LENGTH = 8
MASK = "***"

_lock = threading.Lock()
_secrets: tuple[str, ...] = ()  # longest first, so a key containing another is masked whole
_patterns: tuple[re.Pattern[str], ...] = ()  # each secret in every encoding, same order
_ENCODED = ("\\", "%")  # text without these holds a secret only as itself
_MAX_WIDTH = 6  # the longest encoding of one character: \uXXXX


def _hex(value: str) -> str:
    """A regex matching the hex digits `value` in either case."""
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else c for c in value)


def _char(c: str) -> str:
    """A regex matching the character `c` written as itself, as a JSON escape or
    percent-encoded."""
    ways = [re.escape(c)]
    if ord(c) <= 0xFFFF:
        ways.append("\\\\u" + _hex(f"{ord(c):04x}"))
    if ord(c) < 0x80:
        ways.append("%" + _hex(f"{ord(c):02x}"))
    if c in '/"\\':
        ways.append(re.escape("\\" + c))
    return "(?:" + "|".join(ways) + ")"


def _encodings(c: str) -> tuple[str, ...]:
    """The ways `_char` writes `c` (hex in lower case), for `ScrubbedStream`'s prefix test."""
    ways = [c]
    if ord(c) <= 0xFFFF:
        ways.append(f"\\u{ord(c):04x}")
    if ord(c) < 0x80:
        ways.append(f"%{ord(c):02x}")
    if c in '/"\\':
        ways.append("\\" + c)
    return tuple(ways)


def register(secret: str | None) -> None:
    """Scrub `secret` from every message from now on (in this process)."""
    global _secrets, _patterns
    if not secret or len(secret) < MIN_LENGTH or secret in _secrets:
        return
    with _lock:
        if not _secrets:
            _scrub_log_records()
        _secrets = tuple(sorted({*_secrets, secret}, key=len, reverse=True))
        _patterns = tuple(re.compile("".join(map(_char, s))) for s in _secrets)


def _scrub_log_records() -> None:
    """Make every log record of the process, from now on, with its message and traceback
    scrubbed (a record is made only when its level is logged: the rest cost nothing)."""
    make = logging.getLogRecordFactory()

    def scrubbed(*args, **kwargs) -> logging.LogRecord:
        record = make(*args, **kwargs)
        message = record.getMessage()
        clean = scrub(message)
        if clean != message:
            record.msg, record.args = clean, ()
        if record.exc_info and not record.exc_text:
            record.exc_text = scrub(logging.Formatter().formatException(record.exc_info))
        return record

    logging.setLogRecordFactory(scrubbed)


def scrub(text: str) -> str:
    """`text` with every registered secret masked, in any of its encodings."""
    if not _secrets:
        return text
    if any(mark in text for mark in _ENCODED):
        for pattern in _patterns:
            text = pattern.sub(MASK, text)
        return text
    for secret in _secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def scrub_all(value):
    """`value` with every string in it scrubbed: a string, or the strings in a dict's keys and
    values, a list or a tuple, however deeply nested (other values as they are)."""
    if isinstance(value, str):
        return scrub(value)
    if not _secrets:
        return value
    if isinstance(value, dict):
        return {scrub_all(k): scrub_all(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(scrub_all(v) for v in value)
    return value


def safe_url(url: str | None) -> str | None:
    """`url` as podium shows it: any `user:password@` replaced by `***@`."""
    if not url or "@" not in url:
        return url
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:  # not a URL: everything up to its last @ may be credentials
        return f"{MASK}@{url.rpartition('@')[2]}"
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{MASK}@{host}"))


def url_credentials(url: str | None) -> tuple[str, ...]:
    """The password and the `user:password` of a URL's userinfo (none when it has none)."""
    try:
        parts = urllib.parse.urlsplit(url or "")
    except ValueError:
        return ()
    if "@" not in parts.netloc:
        return ()
    userinfo = parts.netloc.rpartition("@")[0]
    user, _, password = userinfo.partition(":")
    found = [userinfo, urllib.parse.unquote(userinfo)]
    if password:
        found += [password, urllib.parse.unquote(password)]
    return tuple(dict.fromkeys(found))


def clip(text: str, limit: int) -> str:
    """The first `limit` characters of `text`, scrubbed before the cut: a quote of an
    endpoint's text never ends in half a key, which no later scrub would recognise."""
    return scrub(text)[:limit]


def _could_begin(secret: str, tail: str) -> bool:
    """Whether `tail` is the start of `secret` (or all of it) in some encoding: text that
    more text could still make into a secret."""
    positions = {0}
    for c in secret:
        following: set[int] = set()
        for at in positions:
            rest = tail[at:]
            for way in _encodings(c):
                part = rest[:len(way)]
                same = part == way if len(way) == 1 else part.lower() == way[:len(part)]
                if same and len(part) < len(way):
                    return True  # the text ends inside this character's encoding
                if same:
                    following.add(at + len(way))
        if len(tail) in following:
            return True  # ends after a character of the secret, before its last
        positions = {p for p in following if p < len(tail)}
        if not positions:
            return False
    return False


class ScrubbedStream:
    """Streamed text, scrubbed: `add` each piece as it comes, `close` at the end; `sink` gets
    the text with every registered secret masked, as soon as no secret can still be running
    across the next piece: only an end of the text that could be the start of a secret (in
    any of its encodings) waits for more text (ordinary text passes at once)."""

    def __init__(self, sink) -> None:
        self.sink = sink
        self._held = ""

    def _cut(self, text: str) -> int:
        """Where the text that may go now ends."""
        cut = len(text)
        for secret in _secrets:  # the earliest end of the text that could begin a secret
            width = len(secret) * _MAX_WIDTH
            for start in range(max(len(text) - width + 1, 0), cut):
                if text[start] in (secret[0], "\\", "%") and _could_begin(secret,
                                                                           text[start:]):
                    cut = start
                    break
        moved = True
        while moved:  # a whole secret across the cut moves the cut before it
            moved = False
            for pattern in _patterns:
                for match in pattern.finditer(text):
                    if match.start() < cut < match.end():
                        cut, moved = match.start(), True
        return cut

    def add(self, piece: str) -> None:
        if not piece:
            return
        text = self._held + piece
        cut = self._cut(text) if _secrets else len(text)
        self._held = text[cut:]
        if cut:
            self.sink(scrub(text[:cut]))

    def close(self) -> None:
        held, self._held = self._held, ""
        if held:
            self.sink(scrub(held))
