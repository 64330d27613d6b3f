"""A free localhost port, for tests and scripts that start servers of their own (standard
library only)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A localhost port nothing listens on (bound once, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
