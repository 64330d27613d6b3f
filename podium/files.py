"""Files that hold prompts and responses: traces and the response cache are private.

A trace or a cached reply holds every prompt and every answer of a run — often a user's
private question, sometimes a company's data. They are created readable by their owner only
(files 0600, folders podium creates 0700), whatever the umask. Folders that already exist are
left as they are (they may be shared on purpose); files podium writes are narrowed to 0600.

Podium never writes through a symbolic link: a link where a private file goes is refused
(`LinkRefused`, an OSError), so its target is never changed or narrowed. `write_whole`
writes a file whole or not at all (a temporary file beside it, renamed over it), so a full
disk leaves the file that was there as it was; `write_private` is that, owner-only. The JSON podium writes is strict
(`strict_json`): never the non-standard NaN or Infinity; what it reads from an endpoint or a
client is read strictly too (`strict_loads`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

FILE_MODE = 0o600
DIR_MODE = 0o700


class LinkRefused(OSError):
    """A private file's path is a symbolic link: podium does not write through it."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(errno.ELOOP, "it is a symbolic link, and podium never writes through "
                         "one (its target would be overwritten); pass the file's own path",
                         str(path))


def file_in_the_way(path: str | Path) -> Path | None:
    """The file that stops `path` from being a folder: `path` itself, or the nearest of its
    parents that exists, when that is not a folder; None when the folder can be made."""
    path = Path(path)
    return next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)


def private_dir(path: str | Path) -> Path:
    """Create `path` (and missing parents) as owner-only folders; existing ones are kept."""
    path = Path(path)
    missing = []
    for folder in (path, *path.parents):
        if folder.exists():
            break
        missing.append(folder)
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=DIR_MODE)
        except FileExistsError:
            continue
        os.chmod(folder, DIR_MODE)  # mkdir's mode is masked by the umask
    return path


def private_file(path: str | Path) -> Path:
    """Make sure `path` exists as an owner-only file (created 0600, or narrowed to 0600); a
    symbolic link there is refused (LinkRefused)."""
    path = Path(path)
    private_dir(path.parent)
    fd = _open_no_link(path, os.O_WRONLY | os.O_CREAT)
    try:
        _narrow(fd)
    finally:
        os.close(fd)
    return path


def write_private(path: str | Path, text: str) -> Path:
    """Write `text` (UTF-8) to `path`, owner-only, whole or not at all (`write_whole`). An
    existing device or pipe (/dev/null, a FIFO) is written in place. A symbolic link at `path`
    is refused (LinkRefused): its target is never touched."""
    path = Path(path)
    private_dir(path.parent)
    kind = _kind(path)
    if kind == "link":
        raise LinkRefused(path)
    if kind == "special":
        fd = _open_no_link(path, os.O_WRONLY)
        with os.fdopen(fd, "wb") as fh:
            fh.write(text.encode("utf-8"))
        return path
    return write_whole(path, text, mode=FILE_MODE)


def write_whole(path: str | Path, text: str, *, mode: int = 0o644) -> Path:
    """Write `text` (UTF-8) to `path` whole or not at all: under a temporary name beside it,
    then renamed over it, so a full disk or a kill leaves what was there. A symbolic link at
    `path` is replaced, never followed. The file gets `mode`."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:64]}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:  # mkstemp: O_EXCL, 0600
            if mode != FILE_MODE:
                os.fchmod(fh.fileno(), mode)
            fh.write(text.encode("utf-8"))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def strict_json(value: Any, **dumps: Any) -> str:
    """`value` as strict JSON (`json.dumps` keywords in `dumps`). A float that is not finite
    (NaN, Infinity: nothing podium computes, but a broken worker can report one) is written
    null, on purpose: the standard has no such numbers and most readers refuse them."""
    try:
        return json.dumps(value, allow_nan=False, **dumps)
    except ValueError:
        return json.dumps(_finite(value), allow_nan=False, **dumps)


def strict_loads(raw: str | bytes) -> Any:
    """`raw` read as strict JSON: NaN, Infinity and -Infinity, which Python's json takes and
    the standard has not, are a ValueError like any bad JSON (nesting too deep to read is
    still a RecursionError, which each reader names in its own words)."""
    return json.loads(raw, parse_constant=_no_constant)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _kind(path: Path) -> str:
    """"absent", "link", "regular" (a file, or a folder: renaming over it fails) or "special"
    (a device, a pipe, a socket)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return "absent"
    if stat.S_ISLNK(mode):
        return "link"
    return "regular" if stat.S_ISREG(mode) or stat.S_ISDIR(mode) else "special"


def _open_no_link(path: Path, flags: int) -> int:
    try:
        return os.open(path, flags | os.O_NOFOLLOW, FILE_MODE)
    except OSError as exc:
        if exc.errno == errno.ELOOP and os.path.islink(path):
            raise LinkRefused(path) from None
        raise


def _narrow(fd: int) -> None:
    """0600 for a regular file (never touch a device or a pipe the user pointed us at)."""
    if stat.S_ISREG(os.fstat(fd).st_mode):
        os.fchmod(fd, FILE_MODE)
