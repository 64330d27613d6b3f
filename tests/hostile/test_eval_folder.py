"""A `podium eval --out` folder under abuse: two runs at once, a resume with other settings,
damaged results and meta files, a file where a folder should be.

Every test runs the real `podium eval` / `podium report` on a pool of `function` workers
(exact, instant): in this process (typer's CliRunner), or as a subprocess where a process of its
own is what is tested (two runs at once, a disk that fills). Each worker call is logged with the
caller's pid, so the tests can count what was paid and by whom.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import PODIUM, podium_in_process

from podium.eval.runner import load_results, read_results

N = 5

# A worker that logs each call (pid); when $GATE is set, it waits for that file to exist; it
# fails like an unreachable endpoint on questions that contain $FAIL.
WORKER_MODULE = """
import os, time
from podium.testing.workers import adder, down

def gated(messages):
    with open(os.environ["CALLS"], "a") as fh:
        fh.write(f"{os.getpid()}\\n")
    if os.environ.get("FAIL") and os.environ["FAIL"] in str(messages):
        down(messages)
    gate = os.environ.get("GATE")
    while gate and not os.path.exists(gate):
        time.sleep(0.05)
    return adder(messages)
"""

POOL = """
[conductor]
backend = "function"
function = "podium.testing.workers:zero"
[[workers]]
name = "adder"
backend = "function"
function = "folder_test_workers:gated"
temperature = {temperature}
rpm = {rpm}
[run]
cache = false
max_steps = {max_steps}
"""


class Folder:
    """A dataset, a pool file and an --out folder in tmp_path, and the commands that use them."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        (tmp / "folder_test_workers.py").write_text(WORKER_MODULE)
        self.data = tmp / "sums.jsonl"
        self.data.write_text("".join(json.dumps({"question": f"What is {i} + {i}?",
                                                 "answer": str(2 * i)}) + "\n"
                                     for i in range(N)))
        self.pool = tmp / "pool.toml"
        self.write_pool()
        self.out = tmp / "run"
        self.calls = tmp / "calls.log"
        self.gate = tmp / "gate"

    def write_pool(self, temperature: float = 0.1, rpm: int = 600, max_steps: int = 5) -> None:
        self.pool.write_text(POOL.format(temperature=temperature, rpm=rpm, max_steps=max_steps))

    def env(self, fail: str = "") -> dict:
        """What the worker reads (in this process the `folder` fixture puts it on sys.path)."""
        return {"CALLS": str(self.calls), "FAIL": fail}

    def process_env(self, gated: bool = False) -> dict:
        env = {**os.environ, "COLUMNS": "200", **self.env(),
               "PYTHONPATH": os.pathsep.join([str(self.tmp), os.environ.get("PYTHONPATH", "")])}
        if gated:
            env["GATE"] = str(self.gate)
        return env

    def eval_args(self, *extra: str) -> list[str]:
        return ["eval", "--task", f"jsonl:{self.data}", "--system", "single:adder", "--repeats",
                "1", "--concurrency", "2", "--out", str(self.out), "--pool", str(self.pool),
                *extra]

    def eval(self, *extra: str, fail: str = "") -> subprocess.CompletedProcess:
        return podium_in_process(*self.eval_args(*extra), env=self.env(fail), columns=200)

    def eval_in_a_process(self, *extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([*PODIUM, *self.eval_args(*extra)], capture_output=True,
                              text=True, timeout=120, env=self.process_env())

    def report(self, *folders: Path) -> subprocess.CompletedProcess:
        return podium_in_process("report", *map(str, folders), "--out",
                                 str(self.tmp / "report"), env=self.env(), columns=200)

    def call_pids(self) -> list[int]:
        return [int(x) for x in self.calls.read_text().split()] if self.calls.exists() else []

    def result_keys(self) -> list[tuple[str, int]]:
        lines = (self.out / "results.jsonl").read_bytes().splitlines()
        return [(json.loads(line)["item"], json.loads(line)["repeat"]) for line in lines]


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture()
def folder(tmp_path, monkeypatch) -> Iterator[Folder]:
    monkeypatch.syspath_prepend(str(tmp_path))
    yield Folder(tmp_path)
    sys.modules.pop("folder_test_workers", None)  # the next test imports its own


def test_a_second_eval_into_a_busy_folder_is_refused_and_names_the_holder(folder):
    first = subprocess.Popen([*PODIUM, *folder.eval_args()], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True,
                             env=folder.process_env(gated=True))
    try:
        deadline = time.monotonic() + 60
        while not folder.call_pids():  # the first run holds the folder, items in flight
            assert first.poll() is None, first.stderr.read()
            assert time.monotonic() < deadline, "the first eval never called its worker"
            time.sleep(0.05)
        second = folder.eval_in_a_process()
        assert second.returncode == 2, second.stderr
        message = flat(second.stderr)
        assert f"pid {first.pid}" in message and "another --out" in message
        assert "Traceback" not in second.stderr
    finally:
        folder.gate.touch()
        _, err = first.communicate(timeout=60)  # reads stderr to its end and closes it
    assert first.returncode == 0, err
    keys = folder.result_keys()
    assert len(keys) == len(set(keys)) == N  # every item recorded once
    assert folder.call_pids() == [first.pid] * N  # and paid once, by the first run only
    # the lock went with its holder: the folder resumes (nothing left to run)
    again = folder.eval_in_a_process()
    assert again.returncode == 0, again.stderr
    assert len(folder.call_pids()) == N


def test_a_resume_with_other_settings_is_refused_naming_what_differs(folder):
    assert folder.eval().returncode == 0
    meta = (folder.out / "meta.json").read_text()
    fp = json.loads(meta)["fingerprint"]
    assert fp["parts"]["workers"][0]["temperature"] == 0.1 and len(fp["hash"]) == 64

    folder.write_pool(temperature=0.5)
    proc = folder.eval()
    assert proc.returncode == 2, proc.stderr
    assert "adder.temperature 0.1 → 0.5" in flat(proc.stderr)

    folder.write_pool(max_steps=3)
    proc = folder.eval("--fallback")
    assert proc.returncode == 2, proc.stderr
    message = flat(proc.stderr)
    assert "run settings: max_steps 5 → 3" in message
    assert "run settings: fallback false → true (--fallback)" in message

    folder.write_pool()
    proc = folder.eval("--option", 'grader="exact"')
    assert proc.returncode == 2 and 'task options: grader (none) → "exact"' in flat(proc.stderr)
    proc = folder.eval("--no-cache")  # the pool already has cache = false: nothing changes
    assert proc.returncode == 0, proc.stderr

    # refusals changed nothing; rate limits are not results: a gentler rpm resumes
    assert (folder.out / "meta.json").read_text().count(fp["hash"]) == 1
    folder.write_pool(rpm=30)
    proc = folder.eval()
    assert proc.returncode == 0, proc.stderr
    assert len(folder.call_pids()) == N and len(folder.result_keys()) == N


def test_retry_errors_with_mended_settings_only_when_no_record_is_kept(folder):
    """The documented fix of an outage (mend the pool file, rerun with --retry-errors) works
    when every record is an error; with graded records in the folder it would mix teams."""
    proc = folder.eval(fail="What is 3 + 3")  # one item's worker is down
    assert proc.returncode == 0, proc.stderr
    assert sorted(r["status"] for r in read_results(folder.out / "results.jsonl").values()) \
        == ["error"] + ["ok"] * (N - 1)
    folder.write_pool(temperature=0.5)
    proc = folder.eval("--retry-errors")
    assert proc.returncode == 2 and "adder.temperature 0.1 → 0.5" in flat(proc.stderr)
    folder.write_pool()
    proc = folder.eval("--retry-errors")
    assert proc.returncode == 0, proc.stderr
    assert {r["status"] for r in read_results(folder.out / "results.jsonl").values()} == {"ok"}
    assert len(folder.call_pids()) == N + 1

    (folder.tmp / "all-down").mkdir()
    other = Folder(folder.tmp / "all-down")
    proc = other.eval(fail="What is")  # every item is an error
    assert proc.returncode == 1, proc.stderr
    other.write_pool(temperature=0.5)
    proc = other.eval("--retry-errors")
    assert proc.returncode == 0, proc.stderr
    assert "the new settings replace them" in flat(proc.stderr)
    meta = json.loads((other.out / "meta.json").read_text())
    assert meta["fingerprint"]["parts"]["workers"][0]["temperature"] == 0.5
    assert {r["status"] for r in read_results(other.out / "results.jsonl").values()} == {"ok"}


def test_a_meta_json_from_before_fingerprints_is_adopted_with_a_warning(folder):
    assert folder.eval().returncode == 0
    meta = json.loads((folder.out / "meta.json").read_text())
    fp = meta.pop("fingerprint")
    (folder.out / "meta.json").write_text(json.dumps(meta))
    proc = folder.eval()
    assert proc.returncode == 0, proc.stderr
    assert "predates settings fingerprints" in flat(proc.stderr)
    assert json.loads((folder.out / "meta.json").read_text())["fingerprint"] == fp
    assert len(folder.call_pids()) == N


def damage(path: Path) -> tuple[bytes, set[str]]:
    """Records 2 and 3 replaced by bad JSON and binary garbage; a garbage line at the end.
    Returns the damaged bytes and the items whose records were lost."""
    lines = path.read_bytes().splitlines(keepends=True)
    assert len(lines) == N
    lost = {json.loads(lines[1])["item"], json.loads(lines[2])["item"]}
    damaged = b"".join([lines[0], b'{"item": "sums/1", "repeat": 0, "sta\n',
                        b"\xff\xfe\x00\x80 garbage \xc3\x28\n", *lines[3:],
                        b"\x00\x01\xfe\xff\x1a\n"])
    path.write_bytes(damaged)
    return damaged, lost


def test_damaged_results_lines_are_kept_aside_reported_and_rerun(folder):
    assert folder.eval().returncode == 0
    results = folder.out / "results.jsonl"
    before = {k: v for k, v in read_results(results).items()}
    damaged, lost = damage(results)

    found = load_results(results)  # reading skips the bad lines, and changes nothing
    assert [n for n, _ in found.bad] == [2, 3, 6] and len(found.records) == N - 2
    assert results.read_bytes() == damaged

    proc = folder.eval()
    assert proc.returncode == 0, proc.stderr
    message = flat(proc.stderr)
    for n in (2, 3, 6):
        assert f"results.jsonl line {n} is not a record" in message
    assert "it will be rerun" in message and "Traceback" not in proc.stderr
    kept = list(folder.out.glob("results.jsonl.damaged-*"))
    assert len(kept) == 1 and kept[0].read_bytes() == damaged  # nothing lost
    assert str(kept[0]) in message
    keys = folder.result_keys()  # the live file is clean again: every item once
    assert len(keys) == len(set(keys)) == N
    assert len(folder.call_pids()) == N + 2  # only the two damaged items ran again
    after = read_results(results)  # the good records are kept as they were
    assert {k: v for k, v in after.items() if k[0] not in lost} == \
        {k: v for k, v in before.items() if k[0] not in lost}
    rerun = results.read_bytes().splitlines()[-2:]  # the lost ones, run again
    assert {json.loads(line)["item"] for line in rerun} == lost
    assert json.loads((folder.out / "summary.json").read_text())["items"] == N
    # a clean file is not copied again
    assert folder.eval().returncode == 0
    assert len(list(folder.out.glob("results.jsonl.damaged-*"))) == 1


def test_report_on_a_damaged_results_file_warns_and_still_renders(folder):
    assert folder.eval().returncode == 0
    damaged, _ = damage(folder.out / "results.jsonl")
    proc = folder.report(folder.out)
    assert proc.returncode == 0, proc.stderr
    message = flat(proc.stderr)
    for n in (2, 3, 6):
        assert f"results.jsonl line {n} is not a record" in message
    assert "Traceback" not in proc.stderr
    assert "single:adder" in (folder.tmp / "report" / "report.md").read_text()
    assert (folder.out / "results.jsonl").read_bytes() == damaged  # a reader changes nothing


@pytest.mark.parametrize("garbage", [b'{"task": "sums", "system": ', b"\x89\xff\x00binary"])
def test_a_damaged_meta_json_is_a_config_error_naming_the_file(folder, garbage):
    assert folder.eval().returncode == 0
    meta = folder.out / "meta.json"
    meta.write_bytes(garbage)
    for proc in (folder.eval(), folder.report(folder.out)):
        assert proc.returncode == 2, proc.stderr
        message = flat(proc.stderr)
        assert f"{meta} is damaged" in message and "--out" in message
        assert "Traceback" not in proc.stderr
    assert len(folder.call_pids()) == N  # nothing ran again
    assert meta.read_bytes() == garbage


def test_a_damaged_meta_json_over_no_records_is_rewritten(folder):
    folder.out.mkdir()
    (folder.out / "meta.json").write_bytes(b"\x00not json")
    proc = folder.eval()
    assert proc.returncode == 0, proc.stderr
    assert json.loads((folder.out / "meta.json").read_text())["task"] == "sums"


def test_out_naming_a_file_is_a_config_error(folder):
    folder.out.write_text("not a folder")
    proc = folder.eval()
    assert proc.returncode == 2, proc.stderr
    assert f"--out {folder.out} is a file; give a folder" in flat(proc.stderr)
    assert "Traceback" not in proc.stderr
    assert folder.out.read_text() == "not a folder"


def test_a_file_changed_under_the_same_path_is_refused_on_resume(folder):
    """The settings name the question file (or a --conductor checkpoint) by path; what is at
    the path is checked too, so a file edited (or a Conductor retrained) in place cannot mix
    its results with the old ones."""
    assert folder.eval().returncode == 0
    meta = json.loads((folder.out / "meta.json").read_text())
    assert list(meta["local_files"]) == [str(folder.data)]
    stat = folder.data.stat()
    os.utime(folder.data, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # edited in place
    proc = folder.eval()
    assert proc.returncode == 2, proc.stderr
    message = flat(proc.stderr)
    assert f"{folder.data} changed since it was started" in message and "another --out" in message
    assert "Traceback" not in proc.stderr
    # a meta.json written before file checks resumes, with a warning
    meta.pop("local_files")
    (folder.out / "meta.json").write_text(json.dumps(meta))
    proc = folder.eval()
    assert proc.returncode == 0, proc.stderr
    assert "predates file checks" in flat(proc.stderr)
    assert len(folder.call_pids()) == N  # nothing was run twice


def test_local_files_see_a_checkpoint_retrained_in_place(tmp_path):
    from podium.eval.folder import local_files

    ckpt = tmp_path / "final"
    (ckpt / "sub").mkdir(parents=True)
    (ckpt / "model.safetensors").write_bytes(b"weights-1")
    (ckpt / "sub" / "config.json").write_text("{}")
    before = local_files([str(ckpt), "gpt-4o", "", None, str(tmp_path / "missing")])
    assert list(before) == [str(ckpt)]  # names and missing paths are not files
    assert local_files([str(ckpt)]) == before  # the same files: the same digest
    (ckpt / "model.safetensors").write_bytes(b"weights-2")  # retrained into the same folder
    stat = (ckpt / "model.safetensors").stat()
    os.utime(ckpt / "model.safetensors", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert local_files([str(ckpt)]) != before


def test_a_resume_under_other_sandbox_isolation_keeps_both_levels(tmp_path):
    from podium.eval.folder import check_meta

    meta = {"task": "t", "system": "s", "split": "test", "seed": 0, "preset": None,
            "fingerprint": {"hash": "h", "parts": {}}, "isolation": "full"}
    records = [{"status": "ok"}]
    check_meta(tmp_path, meta, records=[], retry_errors=False, record_format=1)
    warned: list[str] = []
    weaker = {**meta, "isolation": ["no network namespace"]}
    check_meta(tmp_path, weaker, records=records, retry_errors=False, record_format=1,
               warn=warned.append)
    written = json.loads((tmp_path / "meta.json").read_text())
    assert written["isolation"] == ["no network namespace"]
    assert written["isolation_earlier"] == ["full"]
    assert "graded under sandbox isolation 'full'" in warned[0]
    check_meta(tmp_path, weaker, records=records, retry_errors=False, record_format=1,
               warn=warned.append)  # the same level again: nothing new to keep
    assert json.loads((tmp_path / "meta.json").read_text())["isolation_earlier"] == ["full"]
    assert len(warned) == 1


def retyped(path: Path, line: int, edit) -> None:
    """Replace record `line` (1-based) of `path` by `edit(record)`, serialised as JSON."""
    lines = path.read_bytes().splitlines(keepends=True)
    lines[line - 1] = (json.dumps(edit(json.loads(lines[line - 1]))) + "\n").encode()
    path.write_bytes(b"".join(lines))


WRONG_SHAPES = {
    "a list": lambda rec: [rec],
    "a string for a number": lambda rec: {**rec, "used": {**rec["used"], "calls": "3"}},
    "NaN for a cost": lambda rec: {**rec, "paid": {**rec["paid"], "cost_usd": float("nan")}},
    "a null for a list": lambda rec: {**rec, "used": None},
    "nested too deeply": lambda rec: json.loads("[" * 1000 + "]" * 1000),
}


@pytest.mark.parametrize("shape", sorted(WRONG_SHAPES))
def test_report_skips_a_wrongly_typed_results_line_with_a_warning(folder, shape):
    assert folder.eval().returncode == 0
    results = folder.out / "results.jsonl"
    if shape == "nested too deeply":  # deeper than Python's JSON reader goes
        lines = results.read_bytes().splitlines(keepends=True)
        lines[1] = b"[" * 100_000 + b"]" * 100_000 + b"\n"
        results.write_bytes(b"".join(lines))
    else:
        retyped(results, 2, WRONG_SHAPES[shape])
    damaged = results.read_bytes()
    proc = folder.report(folder.out)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"{results} line 2 is not a record" in flat(proc.stderr)
    assert "single:adder" in (folder.tmp / "report" / "report.md").read_text()
    assert results.read_bytes() == damaged  # a reader changes nothing
    # eval keeps the file aside and reruns that item only
    proc = folder.eval()
    assert proc.returncode == 0, proc.stderr
    assert len(folder.call_pids()) == N + 1
    assert [p.read_bytes() for p in folder.out.glob("results.jsonl.damaged-*")] == [damaged]


@pytest.mark.parametrize("meta", [b"[]", b'{"format": 2}', b'{"task": ["x"], "system": "s", '
                                  b'"format": 2}', b"[" * 100_000 + b"]" * 100_000])
def test_a_wrongly_typed_meta_json_is_a_config_error_naming_the_file(folder, meta):
    assert folder.eval().returncode == 0
    path = folder.out / "meta.json"
    path.write_bytes(meta)
    for proc in (folder.eval(), folder.report(folder.out)):
        assert proc.returncode == 2, proc.stderr
        assert f"{path} is damaged" in flat(proc.stderr) and "Traceback" not in proc.stderr
    assert path.read_bytes() == meta and len(folder.call_pids()) == N


def test_trace_file_names_never_collide_and_take_any_id(folder):
    ids = ["a/b", "a_b", "nul\x00byte", "x" * 300, "../../escape", ".hidden", "é/ü"]
    folder.data.write_text("".join(json.dumps({"id": i, "question": f"What is {n} + 1?",
                                               "answer": str(n + 1)}) + "\n"
                                   for n, i in enumerate(ids)))
    proc = folder.eval("--traces")
    assert proc.returncode == 0, proc.stderr
    traces = folder.out / "traces"
    names = sorted(p.name for p in traces.iterdir())
    assert len(names) == len(ids)  # one file each: none overwrote another
    assert all(len(n.encode()) < 120 and not n.startswith(".") for n in names)
    records = read_results(folder.out / "results.jsonl")
    for item in ids:  # each record names its trace, and the trace is that item's run
        trace = json.loads((traces / records[(item, 0)]["trace_file"]).read_text())
        assert f"What is {ids.index(item)} + 1?" in json.dumps(trace)
    assert not list(folder.tmp.glob("escape*"))


@pytest.fixture
def tiny_disk(tmp_path):
    """A 64 KiB tmpfs mounted at tmp_path/disk (needs root and mount rights; skipped elsewhere)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=False)


def test_an_eval_on_a_full_disk_stops_cleanly_and_resumes(folder, tiny_disk):
    """The results folder is on a real file system that fills mid-run: the error says so,
    every record written stays whole, and the same command resumes once space is freed."""
    questions = [f"What is {i} + {i}? " + "Pad the record out. " * 70 for i in range(N)]
    folder.data.write_text("".join(json.dumps({"question": q, "answer": str(2 * i)}) + "\n"
                                   for i, q in enumerate(questions)))
    folder.out = tiny_disk / "run"
    filler = tiny_disk / "filler"
    filler.write_bytes(b"\0" * (64 * 1024 - 4 * 4096))  # four pages left: lock, meta, 1 for results
    proc = folder.eval_in_a_process("--concurrency", "1")
    assert proc.returncode == 1, proc.stderr
    message = flat(proc.stderr)
    assert "Traceback" not in proc.stderr
    assert "No space left" in message and "rerun with the same command to resume" in message
    raw = (folder.out / "results.jsonl").read_bytes()
    assert raw.endswith(b"\n") or raw == b""  # no torn record
    first = folder.result_keys()
    assert 0 < len(first) < N, message
    paid = len(folder.call_pids())
    filler.unlink()
    proc = folder.eval_in_a_process("--concurrency", "1")
    assert proc.returncode == 0, proc.stderr
    keys = folder.result_keys()
    assert keys[:len(first)] == first and len(keys) == len(set(keys)) == N
    assert len(folder.call_pids()) - paid == N - len(first)  # no recorded item ran again


def test_report_onto_a_file_is_a_clear_error(folder):
    assert folder.eval().returncode == 0
    (folder.tmp / "report").write_text("a file")
    proc = folder.report(folder.out)
    assert proc.returncode == 2, proc.stderr
    assert f"--out {folder.tmp / 'report'} cannot be written" in flat(proc.stderr)
    assert "Traceback" not in proc.stderr and "Unexpected" not in proc.stderr
    assert (folder.tmp / "report").read_text() == "a file"
