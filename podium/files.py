"""Files that hold prompts and responses: traces and the response cache are private.

A trace or a cached reply holds every prompt and every answer of a run — often a user's
private question, sometimes a company's data. They are created readable by their owner only
(files 0600, folders podium creates 0700), whatever the umask. Folders that already exist are
left as they are (they may be shared on purpose); files podium writes are narrowed to 0600.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

FILE_MODE = 0o600
DIR_MODE = 0o700


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
    """Make sure `path` exists as an owner-only file (created 0600, or narrowed to 0600)."""
    path = Path(path)
    private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, FILE_MODE)
    try:
        _narrow(fd)
    finally:
        os.close(fd)
    return path


def write_private(path: str | Path, text: str) -> Path:
    """Write `text` (UTF-8) to `path`, owner-only."""
    path = Path(path)
    private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        _narrow(fh.fileno())
        fh.write(text)
    return path


def _narrow(fd: int) -> None:
    """0600 for a regular file (never touch a device or a pipe the user pointed us at)."""
    if stat.S_ISREG(os.fstat(fd).st_mode):
        os.fchmod(fd, FILE_MODE)
