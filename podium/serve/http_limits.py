"""The bound on a request's head (its request line and headers), which uvicorn leaves open.

`--max-request-bytes` bounds a body as it is read (`podium.serve.body`), but a body
comes after the head, and the head is read whole before any route, or the key check, sees
the request. uvicorn's h11 parser stops at `h11_max_incomplete_event_size`; its httptools
parser, the one it picks when the `serve` extra is installed, has no bound at all: four 30 MB
`Authorization` headers, sent without a key, grew the server by 151 MB.

`uvicorn_options` gives uvicorn both bounds, `MAX_HEAD_BYTES` each: h11 answers a longer head
with a 400 and closes the connection; `BoundedHttpTools`, uvicorn's httptools protocol with a
count of the bytes read while a head is incomplete, answers it with a 431 (Request Header
Fields Too Large) and closes the connection, having held at most one read (256 KiB) more.
"""

from __future__ import annotations

from typing import Any

MAX_HEAD_BYTES = 64 * 1024  # a request line and headers; nginx takes 32 KiB, Node.js 16 KiB

REFUSAL = (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json"
           b"\r\nconnection: close\r\ncontent-length: %d\r\n\r\n%s")
MESSAGE = (b'{"error": {"message": "The request\'s headers are larger than this server\'s limit '
           b'of %d bytes. Send shorter headers.", "type": "invalid_request_error", "param": '
           b'null, "code": "headers_too_large"}}' % MAX_HEAD_BYTES)


def uvicorn_options() -> dict[str, Any]:
    """uvicorn.Config's options that bound a request's head, whichever parser it runs."""
    options: dict[str, Any] = {"h11_max_incomplete_event_size": MAX_HEAD_BYTES}
    try:
        import httptools  # noqa: F401 - the parser BoundedHttpTools runs
    except ImportError:
        return {**options, "http": "h11"}
    return {**options, "http": __getattr__("BoundedHttpTools")}


def _bounded_httptools() -> type:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class Bounded(HttpToolsProtocol):
        """uvicorn's httptools protocol, refusing a head longer than MAX_HEAD_BYTES."""

        head_bytes = 0
        reading_head = False

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self.head_bytes, self.reading_head = 0, True

        def on_headers_complete(self) -> None:
            self.reading_head = False
            super().on_headers_complete()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if not self.reading_head or self.transport.is_closing():
                return
            self.head_bytes += len(data)
            if self.head_bytes > MAX_HEAD_BYTES:
                self.reading_head = False
                self.transport.write(REFUSAL % (len(MESSAGE), MESSAGE))
                self.transport.close()
                # what it holds of the head goes now, not at the close (as uvicorn's own
                # connection_lost does: its type says always a parser)
                self.parser = None  # type: ignore[assignment]

    Bounded.__name__ = Bounded.__qualname__ = "BoundedHttpTools"
    Bounded.__module__ = __name__
    return Bounded


def __getattr__(name: str) -> Any:
    """`BoundedHttpTools`, built on first use (it needs uvicorn and httptools)."""
    if name == "BoundedHttpTools":
        cls = _bounded_httptools()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
