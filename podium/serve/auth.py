"""API keys: where they come from, and the one check every protected route makes.

Keys come from an environment variable (`--api-key-env NAME`: one key) or a file
(`--api-key-file PATH`: one key a line; blank lines and `#` comments are skipped), or both.
A server with no key runs only with `--no-auth` on a loopback address, so an open server is
never reachable from another machine by accident.

A client sends `Authorization: Bearer KEY`. The key is compared with every configured key by
`hmac.compare_digest` (constant time, and every key is compared, so timing tells nothing about
which key nearly matched). Keys are never logged, stored in traces, or echoed in an error.

The check names who asked: `owner_of(key)`, a salted SHA-256 of the key (never the key), which
the server stores with each trace so that a key reads only its own traces. A server without
keys (`--no-auth`, loopback only) has one user, who reads every trace.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import os
from pathlib import Path

from podium.errors import ConfigError
from podium.redact import register
from podium.serve.errors import ApiError

LOOPBACK_NAMES = {"localhost"}


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def load_keys(env: str | None, file: str | None) -> tuple[str, ...]:
    """The configured keys (empty: none configured). ConfigError names the flag to fix."""
    keys: list[str] = []
    if env:
        value = os.environ.get(env, "").strip()
        if not value:
            raise ConfigError(f"--api-key-env {env}: the environment variable {env} is not set "
                              "or empty. Export the key first (export "
                              f"{env}=...), or pass --api-key-file.")
        keys.append(value)
    if file:
        path = Path(file)
        try:
            text = path.read_text("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise ConfigError(f"--api-key-file {file} cannot be read ({why}). Pass a text "
                              "file with one key a line.") from None
        found = []
        for number, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if any(ord(c) < 32 or ord(c) == 127 or c.isspace() for c in line):
                raise ConfigError(f"--api-key-file {file}, line {number}: a key holds a control "
                                  "character or a space (no client can send it in an "
                                  "Authorization header). Put one key a line, nothing else.")
            found.append(line)
        if not found:
            raise ConfigError(f"--api-key-file {file} holds no key. Put one key a line in it.")
        keys.extend(found)
    for key in keys:  # a client's key is scrubbed from every message too (podium.redact)
        register(key)
    return tuple(keys)


def check_auth_setup(keys: tuple[str, ...], no_auth: bool, host: str) -> None:
    """Refuse a server that anyone could reach without a key."""
    if no_auth and keys:
        raise ConfigError("--no-auth was given together with --api-key-env/--api-key-file. "
                          "Pass either the keys or --no-auth, not both.")
    if not keys and not no_auth:
        raise ConfigError("No API key is configured. Pass --api-key-env NAME (a variable "
                          "holding the key) or --api-key-file PATH (one key a line); for a "
                          "local test without keys pass --no-auth with --host 127.0.0.1.")
    if no_auth and not is_loopback(host):
        raise ConfigError(f"--no-auth serves without keys, which is allowed on a loopback "
                          f"address only, and --host is {host}. Use --host 127.0.0.1, or "
                          "configure keys with --api-key-env or --api-key-file.")


def owner_of(key: bytes) -> str:
    """Who a key is, as stored with its traces: not the key, nor anything served back."""
    return "key-" + hashlib.sha256(b"podium trace owner\0" + key).hexdigest()[:24]


class KeyCheck:
    """Checks a request's `Authorization` header against the configured keys."""

    def __init__(self, keys: tuple[str, ...]) -> None:
        self._keys = tuple(k.encode("utf-8") for k in keys)

    @property
    def enabled(self) -> bool:
        return bool(self._keys)

    def __call__(self, header: str | None, *, basic: bool = False) -> str | None:
        """The owner of the key sent (`owner_of`; None when the server has no keys).
        `basic`: also take HTTP Basic auth with the key as the password (any user name), so
        that a browser can open the trace pages: it asks for the key itself."""
        if not self._keys:
            return None
        scheme, _, token = (header or "").partition(" ")
        given = b""
        if scheme.lower() == "bearer":
            given = token.strip().encode("utf-8")
        elif basic and scheme.lower() == "basic":
            try:
                given = base64.b64decode(token.strip(), validate=True).partition(b":")[2]
            except ValueError:
                given = b""
        ok = False
        for key in self._keys:  # compare with all of them: no early exit
            ok |= hmac.compare_digest(given, key)
        challenge = {"WWW-Authenticate": 'Basic realm="podium traces"' if basic else "Bearer"}
        if not given:
            raise ApiError(401, "No API key was sent. Send the header 'Authorization: Bearer "
                           "KEY' (the openai client's api_key).", code="missing_api_key",
                           headers=challenge)
        if not ok:
            raise ApiError(401, "The API key is not valid for this server. Use a key from the "
                           "server's --api-key-env or --api-key-file.", code="invalid_api_key",
                           headers=challenge)
        return owner_of(given)
