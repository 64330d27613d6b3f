"""Text shown as text: what a model, an endpoint or a client wrote, made safe to print or log.

A control character (an ANSI escape, a carriage return, BEL, a C1 control), a format character
(a right-to-left override) or a lone surrogate in such text would drive the terminal that shows
it, or forge a line of the log that records it. `printable` writes each one as its Python
escape (`\\x1b`, `\\u202e`) and leaves every printable character as it is. The CLI keeps line
breaks and tabs (`keep`); a log line keeps none.
"""

from __future__ import annotations


def printable(text: str, keep: str = "") -> str:
    """`text` with each character that is not printable (`str.isprintable`), other than
    those in `keep`, written as its Python escape."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c in keep
                   else c.encode("unicode_escape", "backslashreplace").decode("ascii")
                   for c in text)
