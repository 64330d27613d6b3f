"""`podium trace view FILE`: draw a saved trace in a browser (podium.viewer)."""

from __future__ import annotations

import errno
import json
from pathlib import Path

from podium.cli.output import visible
from podium.errors import ConfigError
from podium.files import write_private


def view(path: str, out: str | None, open_browser: bool) -> int:
    """Write the viewer page for the trace in `path` and open it; print where it is."""
    src = Path(path)
    if not src.is_file():
        raise ConfigError(f"Trace file {src} does not exist. Pass a file written by podium ask "
                          "--trace, podium eval --traces (OUT/traces/*.json) or podium serve "
                          "(--trace-dir).")
    try:
        data = json.loads(src.read_text("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{src} is not a trace (not JSON: {exc}). Pass a trace file written "
                          "by podium.") from None
    except RecursionError:
        raise ConfigError(f"{src} is not a trace (JSON nested too deeply to read). Pass a trace "
                          "file written by podium.") from None
    if not isinstance(data, dict) or "steps" not in data or "question" not in data:
        raise ConfigError(f"{src} is JSON but not a podium trace (no question and steps). Pass "
                          "a trace file written by podium ask --trace, eval --traces or serve.")
    from podium.viewer import trace_page

    try:
        html = trace_page(data, title=src.name)
    except (TypeError, KeyError, AttributeError, ValueError, RecursionError) as exc:
        raise ConfigError(f"{src} has a question and steps but is not a podium trace "
                          f"({type(exc).__name__}: {str(exc)[:120]}): a field holds another "
                          "shape. Pass a trace file written by podium, unedited.") from None
    page = Path(out) if out else src.with_suffix(".html")
    _write_page(page, html, given=out is not None)
    print(visible(f"Wrote {page}"))
    if open_browser:
        import webbrowser

        webbrowser.open(page.resolve().as_uri())
    return 0


def _write_page(page: Path, html: str, *, given: bool) -> None:
    """Write the page owner-only (it holds the prompts), whole or not at all: a page that
    cannot be written is a ConfigError naming the path; the trace is never touched."""
    where = f"--out {page}" if given else f"The page {page} (beside the trace)"
    try:
        write_private(page, html)
    except OSError as exc:
        why = exc.strerror or str(exc)
        fix = ("free space on that disk, or pass --out a file on another"
               if exc.errno in (errno.ENOSPC, errno.EDQUOT) else
               "pass --out a file path in a folder you can write, e.g. --out trace.html")
        raise ConfigError(f"{where} cannot be written ({why}); {fix}. Nothing else was "
                          "changed.") from None
