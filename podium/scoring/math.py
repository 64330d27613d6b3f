"""MATH500 grading (PAPER.md §7.3, D19): the reference code's legacy normaliser with its
fallbacks, and symbolic equivalence with `math_verify`, run in a process pool.

math-verify is not thread-safe and times out with SIGALRM, so it only runs in the main thread of
worker *processes*: `MathVerifier` owns a `ProcessPoolExecutor` plus one dispatcher thread that
keeps at most `max_workers` comparisons in flight and gives each a hard deadline from the moment
it is handed to a worker. A worker that overruns is killed and the pool restarted (the other
in-flight comparisons are re-queued); a comparison that breaks the pool is retried once, alone,
then reported as `worker_crash`. Nothing raises on bad model output. `verify_serial` is the naive
in-process baseline for benchmarks. Code that creates a `MathVerifier` in a script must guard
its entry point with `if __name__ == "__main__":` (the default "spawn" start method).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import queue
import re
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from podium.scoring.base import Grade, extract_answer

log = logging.getLogger(__name__)

# ----------------------------------------------------------------------------- legacy grader
_TEXT_CMDS = ("text", "textrm", "textbf", "mbox", "mathrm")
_SPACING = re.compile(r"\\\\|\\[,!;: ]|\\q?quad(?![a-zA-Z])|~")  # keeps "\\" rows
_LEADING_VAR = re.compile(r"^\\?[A-Za-z]+(?:_\{?\w+\}?)?=(?!=)")
_SIZERS = re.compile(r"\\(?:left|right|[bB]igg?[lr]?)(?![a-zA-Z])")
_DEGREE = re.compile(r"\^\\circ|\\circ|°|\\degree|degrees?$")
_THOUSANDS = re.compile(r"^-?\d{1,3}(,\d{3})+(\.\d+)?$")


def _arg(s: str, i: int) -> tuple[str, int] | None:
    """The TeX argument at s[i:] (a brace group, a control word or one char) and the end index."""
    while i < len(s) and s[i].isspace():
        i += 1
    if i >= len(s):
        return None
    if s[i] == "{":
        depth = 0
        for j in range(i, len(s)):
            depth += {"{": 1, "}": -1}.get(s[j], 0)
            if depth == 0:
                return s[i + 1:j], j + 1
        return None
    if s[i] == "\\":
        m = re.match(r"\\(?:[a-zA-Z]+|.)", s[i:])
        return (m.group(0), i + m.end()) if m else None
    return s[i], i + 1


def _sub_cmd(s: str, name: str, fn, nargs: int = 1) -> str:
    """Replace every `\\name{a}...` (nargs arguments) with fn(*args); args are processed too."""
    pattern = re.compile(r"\\" + name + r"(?![a-zA-Z])")
    out, pos = [], 0
    while (m := pattern.search(s, pos)) is not None:
        args, end = [], m.end()
        for _ in range(nargs):
            got = _arg(s, end)
            if got is None:
                break
            args.append(_sub_cmd(got[0], name, fn, nargs))
            end = got[1]
        if len(args) < nargs:  # malformed: keep the text as it is
            out.append(s[pos:m.end()])
            pos = m.end()
            continue
        out.append(s[pos:m.start()] + fn(*args))
        pos = end
    return "".join(out) + s[pos:]


def legacy_normalize(s: str | None) -> str:
    """The reference normaliser, applied to both sides: strip `\\boxed{}`, environments, `$`
    and `\\[ \\]` / `\\( \\)`; remove whitespace (LaTeX spacing `\\, \\! \\; \\quad ~` counts as
    whitespace); `\\dfrac`/`\\tfrac` -> `\\frac`; `\\sqrt{x}` -> `\\sqrtx`; drop a leading `var=`;
    unwrap `\\text{}` (and `\\textrm \\textbf \\mbox \\mathrm`); `\\frac{a}{b}` -> `(a/b)`; drop
    `\\left \\right \\big`; remove single-level braces (one pass; `\\{ \\}` are kept)."""
    if s is None:
        return ""
    s = str(s).strip()
    for box in ("boxed", "fbox"):
        s = _sub_cmd(s, box, lambda a: a)
    s = re.sub(r"\\(?:begin|end)\{[^{}]*\}", "", s)
    for delim in ("\\[", "\\]", "\\(", "\\)", "\\$", "$"):
        s = s.replace(delim, "")
    s = re.sub(r"\s+", "", _SPACING.sub(lambda m: m.group(0) if m.group(0) == "\\\\" else "", s))
    s = re.sub(r"\\[dt]frac(?![a-zA-Z])", r"\\frac", s)
    s = _sub_cmd(s, "sqrt", lambda a: "\\sqrt" + a)
    s = _LEADING_VAR.sub("", s)
    for cmd in _TEXT_CMDS:
        s = _sub_cmd(s, cmd, lambda a: a)
    s = _sub_cmd(s, "frac", lambda a, b: f"({a}/{b})", nargs=2)
    s = _SIZERS.sub("", s)
    s = s.replace("\\{", "\x00").replace("\\}", "\x01")
    s = re.sub(r"\{([^{}]*)\}", r"\1", s)
    return s.replace("\x00", "\\{").replace("\x01", "\\}")


def _split_top(s: str) -> list[str]:
    """Split on commas outside (), [], {}."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in s:
        depth += 1 if ch in "([{" else -1 if ch in ")]}" else 0
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    return [*parts, "".join(cur)]


def _unwrap_outer(s: str) -> str:
    """"(C)" -> "C"; "(1)+(2)" is not wrapped as a whole and stays."""
    if len(s) < 2 or s[0] + s[-1] not in ("()", "[]", "{}"):
        return s
    depth = 0
    for ch in s[1:-1]:
        depth += 1 if ch in "([{" else -1 if ch in ")]}" else 0
        if depth < 0:
            return s
    return s[1:-1] if depth == 0 else s


def _pm_set(s: str) -> list[str]:
    out = []
    for part in _split_top(s):
        out += [part.replace("\\pm", "+"), part.replace("\\pm", "-")] if "\\pm" in part else [part]
    return sorted(out)


def _no_paren_fraction(s: str) -> str:
    s = re.sub(r"\(([^()]+)\)/\(([^()]+)\)", r"\1/\2", s)
    prev = None
    while prev != s:
        prev, s = s, re.sub(r"\(([^()/]+/[^()/]+)\)", r"\1", s)
    return s


LEGACY_MAX_CHARS = 1000  # podium's guard: the longest MATH500 answer has 53 characters


def legacy_match(pred: str | None, gold: str | None) -> str | None:
    """Which legacy rule accepts `pred` for `gold` ("exact" or a fallback's name), or None.
    Answers over LEGACY_MAX_CHARS are not normalised (the brace scan is quadratic and deep
    nesting recurses): they never match here, and symbolic grading still sees them."""
    if pred is None or gold is None or len(pred) > LEGACY_MAX_CHARS:
        return None
    try:
        return _legacy_match(pred, gold)
    except RecursionError:
        return None


def _legacy_match(pred: str, gold: str) -> str | None:
    a, b = legacy_normalize(pred), legacy_normalize(gold)
    if not a or not b:
        return None
    if a == b:
        return "exact"
    pa, pb = _split_top(a), _split_top(b)
    if (len(pa) > 1 or len(pb) > 1) and not (_THOUSANDS.match(a) or _THOUSANDS.match(b)) \
            and sorted(pa) == sorted(pb):
        return "comma_list"
    if ("=" in a) != ("=" in b) and a.rsplit("=", 1)[-1] == b.rsplit("=", 1)[-1]:
        return "after_equals"
    if _DEGREE.sub("", a) == _DEGREE.sub("", b) != "":
        return "no_degree"
    ref = _unwrap_outer(b)
    if a == ref or a.lower() in (b.lower(), ref.lower()):
        return "reference_unwrapped"
    if ("\\in" in a or "\\in" in b) and a.split("\\in", 1)[-1] == b.split("\\in", 1)[-1]:
        return "in_rhs"
    if _no_paren_fraction(a) == _no_paren_fraction(b):
        return "paren_fraction"
    if ("\\pm" in a or "\\pm" in b) and _pm_set(a) == _pm_set(b):
        return "pm_expansion"
    if re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", a) == re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", b):
        return "thousands"
    return None


def legacy_equal(pred: str | None, gold: str | None) -> bool:
    """The reference MATH500 grader: normalised exact match, then its fallbacks."""
    return legacy_match(pred, gold) is not None


# ----------------------------------------------------------------------------- math-verify
class Verdict(NamedTuple):
    equal: bool
    reason: str = ""  # "" when equal; mismatch, unparsed, timeout, worker_crash, error: ...


def _dollars(s: str) -> str:
    """Wrap in `$...$` unless the text already has math delimiters (an escaped `\\$` is not)."""
    return s if re.search(r"(?<!\\)\$|\\[(\[]", s) else f"${s}$"


def mv_check(pred: str, gold: str, timeout: float = 10.0) -> Verdict:
    """One math-verify comparison in this process: both sides wrapped in `$...$` so LaTeX
    parses; parse, parse and verify each get ~timeout/4 (whole seconds, at least 1) through
    math-verify's SIGALRM timeouts, used only in the main thread. Never raises."""
    try:
        from math_verify import parse, verify

        main = threading.current_thread() is threading.main_thread()
        stage = max(1, int(timeout * 0.8 / 3)) if main else None  # parse, parse, verify
        start = time.monotonic()
        p = parse(_dollars(pred), parsing_timeout=stage)
        g = parse(_dollars(gold), parsing_timeout=stage)
        if p and g and verify(g, p, timeout_seconds=stage):
            return Verdict(True)
        # math-verify swallows its own timeouts (it logs them and answers False/[]).
        if stage is not None and time.monotonic() - start >= stage - 0.05:
            return Verdict(False, "timeout")
        return Verdict(False, "mismatch" if p and g else "unparsed")
    except BaseException as exc:  # math_verify's TimeoutException is a BaseException
        name = type(exc).__name__
        return Verdict(False, "timeout" if "Timeout" in name else f"error: {name}")


def verify_serial(pairs, timeout: float = 10.0) -> list[bool]:
    """The naive baseline: math-verify called serially in this process (no pool)."""
    return [mv_check(str(p), str(g), timeout).equal for p, g in pairs]


def _worker_init() -> None:
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)  # it logs whole inputs
    import math_verify  # noqa: F401  (pay the import before the first deadline starts)


def _worker_warm() -> int:
    mv_check("1", "1")
    return os.getpid()


@dataclass(eq=False)
class _Job:
    pred: str
    gold: str
    timeout: float
    outer: Future
    deadline: float = 0.0
    suspect: bool = False  # was in flight when the pool broke: rerun alone


class MathVerifier:
    """Symbolic equivalence via math-verify in a process pool; thread- and asyncio-safe."""

    def __init__(self, max_workers: int | None = None, *, mp_context: str = "spawn",
                 check=mv_check, start_timeout: float = 120.0):
        """`check` is a picklable module-level `(pred, gold, timeout) -> Verdict` (tests inject
        hangs and crashes through it)."""
        self.max_workers = max(1, max_workers or min(4, os.cpu_count() or 1))
        self._ctx = multiprocessing.get_context(mp_context)
        self._check, self._start_timeout = check, start_timeout
        self._events: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = self._closing = False
        # Owned by the dispatcher thread only:
        self._pool: ProcessPoolExecutor | None = None
        self._gen = self._warming = self._start_failures = 0
        self._warm_deadline = 0.0
        self._queue: deque[_Job] = deque()
        self._inflight: dict[Future, _Job] = {}
        self._stats = Counter(pool_starts=0, restarts=0, timeouts=0, crashes=0)

    # -- public API
    def submit(self, pred: Any, gold: Any, timeout: float = 10.0) -> Future:
        """A future of a `Verdict`; it always resolves (at worst by the deadline)."""
        outer: Future = Future()
        if pred is None or gold is None or not str(pred).strip() or not str(gold).strip():
            outer.set_result(Verdict(False, "no_answer"))
            return outer
        with self._lock:
            if self._closed:
                raise RuntimeError("MathVerifier is closed")
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="math-verifier",
                                                daemon=True)
                self._thread.start()
            self._events.put(("job", _Job(str(pred), str(gold), float(timeout), outer)))
        return outer

    def check(self, pred: Any, gold: Any, timeout: float = 10.0) -> Verdict:
        return self.submit(pred, gold, timeout).result()

    async def acheck(self, pred: Any, gold: Any, timeout: float = 10.0) -> Verdict:
        return await asyncio.wrap_future(self.submit(pred, gold, timeout))

    def equal(self, pred: Any, gold: Any, timeout: float = 10.0) -> bool:
        return self.check(pred, gold, timeout).equal

    async def aequal(self, pred: Any, gold: Any, timeout: float = 10.0) -> bool:
        return (await self.acheck(pred, gold, timeout)).equal

    def check_many(self, pairs, timeout: float = 10.0) -> list[Verdict]:
        futures = [self.submit(p, g, timeout) for p, g in pairs]
        return [f.result() for f in futures]

    def equal_many(self, pairs, timeout: float = 10.0) -> list[bool]:
        return [v.equal for v in self.check_many(pairs, timeout)]

    @property
    def stats(self) -> dict[str, int]:
        """Counters: pool_starts, restarts, timeouts, crashes."""
        return dict(self._stats)

    def close(self) -> None:
        """Finish queued work, then stop the workers. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
            if thread is not None:
                self._events.put(("close",))
        if thread is not None:
            thread.join()

    def __enter__(self) -> MathVerifier:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- dispatcher thread
    def _run(self) -> None:
        while True:
            deadlines = [j.deadline for j in self._inflight.values()]
            if self._warming:
                deadlines.append(self._warm_deadline)
            wait = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
            try:
                event = self._events.get(timeout=wait)
            except queue.Empty:
                event = None
            try:
                if event is not None:
                    self._handle(event)
                self._expire()
                self._pump()
                if self._closing and not self._queue and not self._inflight:
                    if self._pool is not None:
                        self._pool.shutdown(wait=True)
                    return
            except Exception as exc:  # a dispatcher bug must not leave callers waiting
                log.exception("MathVerifier dispatcher error")
                for job in [*self._queue, *self._inflight.values()]:
                    self._resolve(job, Verdict(False, f"grader_error: {exc!r}"))
                self._queue.clear()
                self._inflight.clear()
                with contextlib.suppress(Exception):
                    self._recycle()

    def _handle(self, event: tuple) -> None:
        kind = event[0]
        if kind == "job":
            self._queue.append(event[1])
        elif kind == "close":
            self._closing = True
        elif event[1] != self._gen:  # a stale pool's callback
            return
        elif kind == "warm":
            self._warming -= 1
            if event[2].cancelled() or event[2].exception() is not None:
                self._start_failed()
            elif self._warming == 0:
                self._start_failures = 0
        elif kind == "done" and (job := self._inflight.pop(event[2], None)) is not None:
            fut = event[2]
            exc = BrokenProcessPool("cancelled") if fut.cancelled() else fut.exception()
            if exc is None:
                self._resolve(job, fut.result())
            elif isinstance(exc, BrokenProcessPool):
                self._stats["crashes"] += 1
                if job.suspect:  # it ran alone: it is the culprit
                    self._resolve(job, Verdict(False, "worker_crash"))
                else:
                    job.suspect = True
                    self._queue.appendleft(job)
                for other in self._inflight.values():
                    other.suspect = True
                self._recycle()
            else:
                self._resolve(job, Verdict(False, f"error: {type(exc).__name__}"))

    def _start_failed(self) -> None:
        self._start_failures += 1
        self._recycle()
        if self._start_failures >= 2:
            for job in self._queue:
                self._resolve(job, Verdict(False, "pool_unavailable"))
            self._queue.clear()
            self._start_failures = 0

    def _expire(self) -> None:
        now = time.monotonic()
        if self._warming and now >= self._warm_deadline:
            self._start_failed()
        expired = [f for f, j in self._inflight.items() if j.deadline <= now]
        for fut in expired:
            self._stats["timeouts"] += 1
            self._resolve(self._inflight.pop(fut), Verdict(False, "timeout"))
        if expired:
            self._recycle()  # the overrunning worker must die; the others are re-queued

    def _pump(self) -> None:
        if not self._queue:
            return
        pool = self._pool if self._pool is not None else self._start_pool()
        if self._warming:
            return
        while self._queue and len(self._inflight) < self.max_workers:
            job = self._queue[0]
            if any(j.suspect for j in self._inflight.values()) or (job.suspect and self._inflight):
                return
            self._queue.popleft()
            if job.outer.done():  # cancelled by its caller
                continue
            try:
                fut = pool.submit(self._check, job.pred, job.gold, job.timeout)
            except (BrokenProcessPool, RuntimeError):
                self._queue.appendleft(job)
                self._recycle()
                return
            job.deadline = time.monotonic() + job.timeout
            self._inflight[fut] = job
            fut.add_done_callback(self._reporter("done"))

    def _reporter(self, kind: str) -> Callable[[Future], None]:
        """A future's done callback: puts (kind, this pool's generation, the future) on the
        event queue."""
        gen = self._gen
        return lambda fut: self._events.put((kind, gen, fut))

    def _start_pool(self) -> ProcessPoolExecutor:
        self._stats["pool_starts"] += 1
        pool = self._pool = ProcessPoolExecutor(self.max_workers, mp_context=self._ctx,
                                                initializer=_worker_init)
        self._warming = self.max_workers
        self._warm_deadline = time.monotonic() + self._start_timeout
        for _ in range(self.max_workers):  # spawns every worker and waits for their imports
            pool.submit(_worker_warm).add_done_callback(self._reporter("warm"))
        return pool

    def _recycle(self) -> None:
        """Kill the pool's workers; re-queue what was in flight; start afresh on demand."""
        pool, self._pool = self._pool, None
        self._gen += 1
        self._warming = 0
        for job in reversed(list(self._inflight.values())):
            self._queue.appendleft(job)
        self._inflight.clear()
        if pool is not None:
            self._stats["restarts"] += 1
            processes = list((getattr(pool, "_processes", None) or {}).values())
            for proc in processes:
                with contextlib.suppress(Exception):  # already gone
                    proc.kill()
            pool.shutdown(wait=False, cancel_futures=True)

    @staticmethod
    def _resolve(job: _Job, verdict: Verdict) -> None:
        with contextlib.suppress(InvalidStateError):  # cancelled by its caller
            job.outer.set_result(verdict)


# ----------------------------------------------------------------------------- graders
def _answer(response: str | None, extract: bool) -> str | None:
    text = extract_answer(response) if extract else response
    return text.strip() if text and text.strip() else None


def _pre(response: str | None, gold: str, mode: str, verifier: MathVerifier | None,
         extract: bool) -> Grade | tuple[str, MathVerifier]:
    """A grade the cheap checks settle, or the answer and the verifier to ask."""
    if mode not in ("symbolic", "legacy"):
        raise ValueError(f"grade_math: mode={mode!r}; use 'symbolic' or 'legacy'")
    if mode == "symbolic" and verifier is None:
        raise ValueError("grade_math: mode='symbolic' needs a MathVerifier (verifier=...)")
    answer = _answer(response, extract)
    if answer is None:
        return Grade.of(False, None, "no_answer", mode=mode)
    rule = legacy_match(answer, gold)
    if rule is not None:
        return Grade.of(True, answer, mode=mode, path="legacy", rule=rule)
    if mode == "legacy":
        return Grade.of(False, answer, "mismatch", mode=mode, path="legacy")
    assert verifier is not None  # symbolic: checked on entry
    return answer, verifier


# Verdicts that say the comparison could not be made (not that the answer is wrong).
_POOL_FAILURES = ("worker_crash", "pool_unavailable", "error")


def _post(answer: str, verdict: Verdict) -> Grade:
    if verdict.reason.startswith(_POOL_FAILURES):
        return Grade.grader_error(f"math-verify {verdict.reason}", answer, mode="symbolic",
                                  path="math_verify")
    return Grade.of(verdict.equal, answer, verdict.reason, mode="symbolic", path="math_verify")


def grade_math(response: str | None, gold: str, *, mode: Literal["symbolic", "legacy"] = "symbolic",
               verifier: MathVerifier | None = None, extract: bool = True,
               timeout: float = 10.0) -> Grade:
    """Grade a MATH-style answer. `extract=True` reads the first `<answer>` tag (none ->
    `no_answer`); `extract=False` grades the text as given. "legacy" = the reference grader;
    "symbolic" = legacy first (cheap), then math-verify in `verifier`'s pool. `details` record
    the path ("legacy" with its `rule`, or "math_verify")."""
    got = _pre(response, gold, mode, verifier, extract)
    if isinstance(got, Grade):
        return got
    answer, checker = got
    return _post(answer, checker.check(answer, gold, timeout))


async def agrade_math(response: str | None, gold: str, *,
                      mode: Literal["symbolic", "legacy"] = "symbolic",
                      verifier: MathVerifier | None = None, extract: bool = True,
                      timeout: float = 10.0) -> Grade:
    """`grade_math` for asyncio callers: the math-verify call does not block the loop."""
    got = _pre(response, gold, mode, verifier, extract)
    if isinstance(got, Grade):
        return got
    answer, checker = got
    return _post(answer, await checker.acheck(answer, gold, timeout))
