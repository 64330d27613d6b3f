"""Sealed session state: what a tool-call id podium writes carries, so that any server process
can continue the run that made the call without keeping anything.

`SessionSeal.seal(state)` makes a JSON-able dict into a tool-call id, `call_` + a Fernet
token (`cryptography`: AES-128-CBC with an HMAC-SHA256, so the client can neither read nor
change it) of the zlib-compressed JSON, its base64 padding left off (the id is letters,
digits, `_` and `-` only). `open_(call_id)` gives the dict back, or raises `NotOurCall` for
an id that is not one this key sealed: forged, damaged, sealed under another key, or older
than the seal's time to live (a day by default). `opened_results` opens the ids a
continuation's tool results answer, each refusal a 400 naming the field:

    tool_call_id X: not a call this server made (or its session key differs: --session-key-env)

Sizes, measured: a state of English text in chat messages (JSON of 1, 8 and 32 KB) makes
an id of 0.8, 4.9 and 16.9 KB (zlib halves such text; base64 adds a third back); text that
does not compress makes an id a sixth longer than its JSON. Opening one takes under a
millisecond.

**The key.** `podium serve --session-key-env NAME` names an environment variable holding a
secret of at least 32 characters, any text (e.g. `openssl rand -base64 32`); the Fernet key
is derived from it with HKDF-SHA256, so any secret of that strength serves, and the same
secret gives the same key on every machine. Without it each server start draws a random
key: ids it wrote do not open after a restart. `podium serve --processes N` draws one for
its processes and hands it to each (`SESSION_KEY_VAR`), so they share it. The secret and the
key derived from it are registered with `podium.redact`: no log line, error or trace shows
them.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import time
import zlib

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from podium.errors import ConfigError
from podium.redact import register
from podium.serve.conversation import Message
from podium.serve.errors import ApiError, bad_request
from podium.serve.tools import Namer, Turn, chat_namer

PREFIX = "call_"
DEFAULT_TTL_S = 24 * 3600
MIN_SECRET_CHARS = 32
SESSION_KEY_VAR = "PODIUM_SESSION_KEY"  # how `--processes N` hands its processes the secret
_INFO = b"podium serve: tool-call session seal"  # HKDF's context: this key is for this only


class NotOurCall(ValueError):
    """A tool-call id this seal did not make (or no longer opens: expired)."""


def new_secret() -> str:
    """A random secret (a server start's own, when none is configured)."""
    return secrets.token_urlsafe(32)


def load_secret(env: str | None) -> str | None:
    """The secret in the variable `--session-key-env` names (None: no flag). ConfigError
    names the fix when it is unset or too short."""
    if not env:
        return None
    value = os.environ.get(env, "").strip()
    if not value:
        raise ConfigError(f"--session-key-env {env}: the environment variable {env} is not set "
                          f"or empty. Export a secret first (export {env}=$(openssl rand "
                          "-base64 32)), or leave --session-key-env out for a random key per "
                          "server start.")
    register(value)
    if len(value) < MIN_SECRET_CHARS:
        raise ConfigError(f"--session-key-env {env}: the secret in {env} has {len(value)} "
                          f"characters; a session key needs at least {MIN_SECRET_CHARS} (make "
                          "one with: openssl rand -base64 32).")
    return value


def fernet_key(secret: str) -> bytes:
    """The Fernet key `secret` gives (HKDF-SHA256); both are registered with podium.redact."""
    register(secret)
    key = base64.urlsafe_b64encode(HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                                        info=_INFO).derive(secret.encode()))
    register(key.decode())
    return key


class SessionSeal:
    """Seals session state into tool-call ids and opens them (see the module docstring)."""

    def __init__(self, secret: str | None = None, ttl_s: int = DEFAULT_TTL_S) -> None:
        self._fernet = Fernet(fernet_key(secret or new_secret()))
        self.ttl_s = ttl_s

    def seal(self, state: dict, now: float | None = None) -> str:
        """`state` (JSON-able) as a tool-call id: `call_` + its sealed, compressed JSON."""
        data = zlib.compress(json.dumps(state, separators=(",", ":")).encode(), 9)
        token = self._fernet.encrypt_at_time(data, int(time.time() if now is None else now))
        return PREFIX + token.decode().rstrip("=")

    def open_(self, call_id: str, now: float | None = None) -> dict:
        """The state `call_id` carries; NotOurCall when this seal did not make it, or it is
        older than `ttl_s`."""
        if not call_id.startswith(PREFIX) or not call_id.isascii():
            raise NotOurCall(call_id)
        token = call_id[len(PREFIX):]
        token += "=" * (-len(token) % 4)
        try:
            data = self._fernet.decrypt_at_time(token.encode(), self.ttl_s,
                                                int(time.time() if now is None else now))
            state = json.loads(zlib.decompress(data))
        except (InvalidToken, zlib.error, ValueError):
            raise NotOurCall(call_id) from None
        if not isinstance(state, dict):
            raise NotOurCall(call_id)
        return state


def not_ours(call_id: str, param: str) -> ApiError:
    shown = call_id if len(call_id) <= 48 else call_id[:48] + "..."
    return bad_request(f"tool_call_id {shown}: not a call this server made (or its session key "
                       "differs: --session-key-env)", param=param)


def opened_results(messages: list[Message], turn: Turn, seal: SessionSeal,
                   name: Namer = chat_namer) -> list[dict]:
    """The states a continuation's tool results carry, in order: each result's
    `tool_call_id` opened, or a 400 naming it."""
    states = []
    for i in turn.results:
        call_id = messages[i].tool_call_id or ""
        try:
            states.append(seal.open_(call_id))
        except NotOurCall:
            raise not_ours(call_id, name(i, "tool_call_id")) from None
    return states
