"""An on-disk response cache (SQLite), so that re-running a question repeats no paid call.

The key rule: a call is keyed by WHAT is asked, never by WHERE or by WHOM. `cache_key` hashes
the backend, model, messages, sampling settings, grammar, `sample_id` and, when a call has
them, its tools, tool choice and `parallel_tool_calls`; it leaves out
base_url, api_key_env, name, price, description, timeouts, retries and concurrency, so a model
moved to another endpoint or renamed keeps its cache. Workers with the same model and sampling
settings share entries (same request, same answer distribution); `sample_id` keeps the G
samples of one question apart. Only the sha256 of the key material and the response are
stored, so no URL or secret can be in the file; it is created owner-only (0600, in a 0700
folder when podium creates it), since it holds full prompts and replies.

Writers: one SQLite file is shared by many tasks, threads and processes (WAL journal, a 30 s
busy timeout, one connection per thread, a retry loop on "database is locked"). The first
writer of a key wins (`INSERT OR IGNORE`): once cached, a request keeps its answer.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from podium.config import ModelSpec
from podium.errors import ConfigError
from podium.files import private_file
from podium.llm.base import (
    ChatClient,
    ChatResponse,
    ClientWrapper,
    Message,
    Sampling,
    TextSink,
    applied,
    sampling_kw,
    stream_kw,
)
from podium.llm.tools import Tool, ToolCall, ToolChoice, tools_kw, tools_openai

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
_SAMPLING = ("temperature", "top_p", "max_tokens", "stop", "seed", "extra_body",
             "max_tokens_param", "reasoning_effort", "thinking", "thinking_budget")
_STORED = ("text", "prompt_tokens", "completion_tokens", "reasoning_tokens", "finish_reason",
           "model", "request_id", "prefill", "extra")
_COLUMNS = ["key", "response", "created"]
_LOCK_TRIES = 8


def cache_key(spec: ModelSpec, messages: list[Message] | list[dict], *, grammar: str | None,
              sample_id: int | str, tools: Sequence[Tool] | None = None,
              tool_choice: ToolChoice | None = None,
              parallel_tool_calls: bool | None = None) -> str:
    """sha256 hex of the canonical JSON of everything that shapes the answer (see above)."""
    material: dict[str, Any] = {"v": FORMAT_VERSION, "backend": spec.backend, "model": spec.model,
                                "messages": messages, "grammar": grammar, "sample_id": sample_id}
    # keyed only when given, so that the keys of calls without tools stay as they were
    material.update(tools_openai(tools, tool_choice, parallel_tool_calls))
    material.update({k: getattr(spec, k) for k in _SAMPLING})
    if spec.prefill != "message":  # keyed only when set, so that earlier keys stay valid
        material.update(prefill=spec.prefill, chat_template=spec.chat_template)
    if spec.backend == "function":
        material["function"] = spec.function
    blob = json.dumps(material, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def default_cache_path() -> Path:
    """$PODIUM_CACHE_DIR/responses.sqlite, else ~/.cache/podium/responses.sqlite."""
    base = os.environ.get("PODIUM_CACHE_DIR")
    return (Path(base) if base else Path.home() / ".cache" / "podium") / "responses.sqlite"


def _locked(exc: sqlite3.OperationalError) -> bool:
    msg = str(exc).lower()
    return "locked" in msg or "busy" in msg


def what_to_do(path: Path) -> str:
    """The fix for a cache at `path` that cannot be used: deleting it is named only for a
    file that is a podium response cache (never a folder, a link, nor a file podium did not
    make)."""
    other = "set another cache_path under [run] in the pool file, or run with --no-cache."
    if _is_podium_cache(path):
        return f"Delete {path} (it only holds cached replies), {other}"
    return other[0].upper() + other[1:]


def _is_podium_cache(path: Path) -> bool:
    """Whether `path` is a file holding podium's responses table (looked at read-only)."""
    if path.is_symlink() or not path.is_file():
        return False
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=1.0)
        try:
            cols = [row[1] for row in conn.execute("PRAGMA table_info(responses)")]
        finally:
            conn.close()
    except (OSError, sqlite3.Error):
        return False
    return cols == _COLUMNS


class ResponseCache:
    """key -> ChatResponse in one SQLite file; safe for concurrent threads and processes."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        self._conns: dict[int, sqlite3.Connection] = {}
        self._lock = threading.Lock()
        self._pid = os.getpid()
        try:
            private_file(self.path)  # 0600: it holds full prompts and replies (podium.files)
            self._retry(self._setup)
        except (OSError, sqlite3.DatabaseError) as e:
            self.close()
            raise ConfigError(f"Response cache {self.path} cannot be used: {e}. "
                              f"{what_to_do(self.path)}") from None
        except ValueError as e:
            self.close()
            raise ConfigError(f"Response cache {self.path} {e}. {what_to_do(self.path)}") from None

    def _setup(self, conn: sqlite3.Connection) -> None:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE IF NOT EXISTS responses "
                     "(key TEXT PRIMARY KEY, response TEXT NOT NULL, created REAL)")
        cols = [row[1] for row in conn.execute("PRAGMA table_info(responses)")]
        if cols != _COLUMNS:
            raise ValueError(f"is not a podium response cache (table columns {cols})")

    def _conn(self) -> sqlite3.Connection:
        with self._lock:
            if os.getpid() != self._pid:  # forked: never touch the parent's connections
                self._conns, self._pid = {}, os.getpid()
            conn = self._conns.get(threading.get_ident())
            if conn is None:
                conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None,
                                       check_same_thread=False)
                conn.execute("PRAGMA busy_timeout=30000")
                self._conns[threading.get_ident()] = conn
            return conn

    def _retry(self, op: Any) -> Any:
        for attempt in range(_LOCK_TRIES):
            try:
                return op(self._conn())
            except sqlite3.OperationalError as e:
                if not _locked(e) or attempt == _LOCK_TRIES - 1:
                    raise
                time.sleep(min(0.05 * 2 ** attempt, 1.0))

    def get(self, key: str) -> ChatResponse | None:
        """The stored response (cache_hit=True, latency 0, no retries), or None."""
        try:
            row = self._retry(lambda c: c.execute(
                "SELECT response FROM responses WHERE key = ?", (key,)).fetchone())
            if row is None:
                return None
            stored = json.loads(row[0])
            fields = {k: v for k, v in stored.items() if k in _STORED}
            calls = tuple(ToolCall(**call) for call in stored.get("tool_calls") or [])
            return ChatResponse(**fields, tool_calls=calls, cache_hit=True, latency_s=0.0,
                                retries=())
        except (sqlite3.DatabaseError, ValueError, TypeError) as e:  # a miss, never a crash
            log.warning("response cache %s: read failed (%s); treating as a miss", self.path, e)
            return None

    def put(self, key: str, response: ChatResponse) -> None:
        """Store a response; the first writer of a key wins. Never raises on cache trouble."""
        try:
            stored = {k: getattr(response, k) for k in _STORED}
            if response.tool_calls:
                stored["tool_calls"] = [dataclasses.asdict(c) for c in response.tool_calls]
            blob = json.dumps(stored, ensure_ascii=False)
        except (TypeError, ValueError) as e:
            log.warning("response cache: not storing a reply whose extra is not JSON (%s)", e)
            return
        try:
            self._retry(lambda c: c.execute(
                "INSERT OR IGNORE INTO responses (key, response, created) VALUES (?, ?, ?)",
                (key, blob, time.time())))
        except sqlite3.DatabaseError as e:
            log.warning("response cache %s: write failed (%s); reply not cached", self.path, e)

    def __len__(self) -> int:
        return self._retry(lambda c: c.execute("SELECT count(*) FROM responses").fetchone()[0])

    def close(self) -> None:
        """Close every connection; a later get/put reopens one."""
        with self._lock:
            conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            conn.close()


class CachedClient(ClientWrapper):
    """Wraps a ChatClient: an identical earlier request (same key) is answered from the cache.

    Concurrent identical requests are de-duplicated: one calls the model, the others wait and
    get its reply as a cache hit (or, if it failed or was empty, make their own call).
    """

    def __init__(self, inner: ChatClient, spec: ModelSpec, cache: ResponseCache) -> None:
        super().__init__(inner)
        self.spec = spec
        self.cache = cache
        self._inflight: dict[tuple[asyncio.AbstractEventLoop, str], asyncio.Future] = {}

    async def chat(self, messages: list[Message], *, grammar: str | None = None,
                   sample_id: int | str = 0, sampling: Sampling | None = None,
                   on_text: TextSink | None = None, tools: Sequence[Tool] | None = None,
                   tool_choice: ToolChoice | None = None,
                   parallel_tool_calls: bool | None = None) -> ChatResponse:
        """The cached reply (whole: nothing is streamed into `on_text`), or the model's,
        streamed into `on_text` as it comes."""
        given = tools_kw(tools, tool_choice, parallel_tool_calls)
        key = cache_key(applied(self.spec, sampling), messages, grammar=grammar,
                        sample_id=sample_id, **given)
        slot = (asyncio.get_running_loop(), key)
        pending = self._inflight.get(slot)
        if pending is not None:  # the same request is in flight: share its cached reply
            shared = await asyncio.shield(pending)
            if shared is not None:
                return shared
            return (await self._call(key, messages, grammar, sample_id, sampling,
                                     on_text, given))[0]
        fut: asyncio.Future = slot[0].create_future()
        self._inflight[slot] = fut
        shared = None
        try:
            shared = await asyncio.to_thread(self.cache.get, key)
            if shared is not None:
                return shared
            resp, shared = await self._call(key, messages, grammar, sample_id, sampling,
                                            on_text, given)
            return resp
        finally:
            del self._inflight[slot]
            if not fut.done():
                fut.set_result(shared)

    async def _call(self, key: str, messages: list[Message], grammar: str | None,
                    sample_id: int | str, sampling: Sampling | None, on_text: TextSink | None,
                    given: dict[str, Any]) -> tuple[ChatResponse, ChatResponse | None]:
        """Ask the model; store a non-empty reply (text or tool calls). Returns it and its
        hit copy (if stored)."""
        resp = await self.inner.chat(messages, grammar=grammar, sample_id=sample_id,
                                     **sampling_kw(sampling), **stream_kw(self.inner, on_text),
                                     **given)
        if not (resp.text or resp.tool_calls) or resp.cache_hit:
            return resp, None
        await asyncio.to_thread(self.cache.put, key, resp)
        return resp, dataclasses.replace(resp, cache_hit=True, latency_s=0.0, retries=())
