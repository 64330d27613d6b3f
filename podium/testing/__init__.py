"""Test and benchmark helpers for podium (not used at run time).

`ScriptedServer` runs a small OpenAI-compatible HTTP server in a subprocess whose replies take
a set latency, which counts how many requests were in flight at once and which can be told to
fail; see `podium.testing.scripted_server`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from podium.testing.scripted_server import FAULTS, ScriptedServer, ServerConfig

__all__ = ["FAULTS", "ScriptedServer", "ServerConfig"]


def __getattr__(name: str) -> Any:
    # Imported lazily so that `python -m podium.testing.scripted_server` does not import the
    # module twice (once as a package member, once as __main__).
    if name in __all__:
        from podium.testing import scripted_server

        return getattr(scripted_server, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
