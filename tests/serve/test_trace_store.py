"""The trace store of `podium serve`: retention, ids, owner-only files, and the writer process
it hands traces to (batches, a killed or starved writer, a folder that went away)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
import uuid

import pytest
from serve_helpers import KEY, ThreadServer

from podium.serve.traces.files import TraceFiles, new_id
from podium.serve.traces.store import TraceStore
from podium.serve.traces.writer import WRITER, frame


def test_trace_store_keeps_the_newest(tmp_path):
    store = TraceStore(tmp_path / "t", keep=3)
    ids = [new_id() for _ in range(5)]
    for i, tid in enumerate(ids):
        store.files.write(tid, {"n": i})
        time.sleep(0.01)
    assert sorted(p.stem for p in (tmp_path / "t").iterdir()) == sorted(ids[2:])
    assert store.read(ids[0]) is None and store.read(ids[4]) == {"n": 4}
    assert stat.S_IMODE((tmp_path / "t").stat().st_mode) == 0o700
    again = TraceStore(tmp_path / "t", keep=2)  # the order is rebuilt from the files
    assert sorted(p.stem for p in (tmp_path / "t").iterdir()) == sorted(ids[3:])
    assert again.files.path("../x") is None
    assert again.files.path("tr-" + "0" * 31 + "/") is None


def test_a_full_store_reuses_the_oldest_file(tmp_path):
    folder = tmp_path / "t"
    store = TraceStore(folder, keep=2)
    first, second, third = new_id(), new_id(), new_id()
    store.files.write(first, {"question": "x" * 5000, "owner": "someone-else"})
    os.chmod(folder / f"{first}.json", 0o644)  # e.g. written by hand: made private again
    inode = (folder / f"{first}.json").stat().st_ino
    store.files.write(second, {"n": 2})
    store.files.write(third, {"n": 3})  # the folder is full: `first`'s file becomes `third`'s
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [f"{second}.json", f"{third}.json"])
    reused = folder / f"{third}.json"
    assert reused.stat().st_ino == inode
    assert json.loads(reused.read_text()) == {"n": 3}  # shorter: nothing of the old is left
    assert stat.S_IMODE(reused.stat().st_mode) == 0o600
    with pytest.raises(FileExistsError):
        store.files.write(third, {"n": 3})
    os.unlink(folder / f"{second}.json")  # gone behind the store's back: a new file instead
    store.files.write(fourth := new_id(), {"n": 4})
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [f"{third}.json", f"{fourth}.json"])
    (folder / f"{new_id()}.json.part").write_text("{")  # a writer killed mid-write
    again = TraceStore(folder, keep=1)
    assert [p.name for p in folder.iterdir()] == [f"{fourth}.json"]  # no .part left
    inode = (folder / f"{fourth}.json").stat().st_ino
    again.files.write(fifth := new_id(), {"n": 5})
    assert [p.name for p in folder.iterdir()] == [f"{fifth}.json"]
    assert (folder / f"{fifth}.json").stat().st_ino == inode
    assert again.read(fifth) == {"n": 5} and again.read(fourth) is None


def test_trace_ids_carry_their_order_and_older_ids_keep_theirs(tmp_path):
    ids = [new_id() for _ in range(10_000)]  # many within one millisecond
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    folder = tmp_path / "t"
    store = TraceStore(folder, keep=10)
    legacy = [f"tr-{uuid.uuid4().hex}" for _ in range(2)]  # ids of an older podium: by mtime
    new = [new_id() for _ in range(2)]
    now = time.time()
    for tid, age in [(legacy[0], 300), (new[0], 0), (legacy[1], 100), (new[1], 0)]:
        store.files.write(tid, {})
        os.utime(folder / f"{tid}.json", (now - age, now - age))
    os.utime(folder / f"{new[0]}.json", (now - 1000, now - 1000))  # a v7 id's own time wins
    assert list(TraceFiles(folder, keep=10)._scan()) == [legacy[0], legacy[1], *new]
    TraceStore(folder, keep=2)  # keeps the two newest
    assert sorted(p.stem for p in folder.iterdir()) == sorted(new)


def test_trace_files_are_owner_only_and_a_removed_folder_comes_back(tmp_path):
    store = TraceStore(tmp_path / "t", keep=3)
    old = os.umask(0)  # the most permissive umask: the file must still be 0600
    try:
        first, second = new_id(), new_id()
        store.files.write(first, {"n": 1})
        assert stat.S_IMODE((tmp_path / "t" / f"{first}.json").stat().st_mode) == 0o600
        shutil.rmtree(tmp_path / "t")  # removed while the server runs
        store.files.write(second, {"n": 2})
    finally:
        os.umask(old)
    assert store.read(second) == {"n": 2}
    assert stat.S_IMODE((tmp_path / "t").stat().st_mode) == 0o700


def test_trace_store_writes_queued_traces_off_the_caller(tmp_path, caplog):
    store = TraceStore(tmp_path / "t", keep=5)
    tids = [new_id() for _ in range(3)]
    for i, tid in enumerate(tids):
        store.put(tid, {"n": i})
        assert store.read(tid) == {"n": i}  # readable at once, written yet or not
    bad = new_id()
    store.put(bad, {"n": object()})  # cannot be written: logged, and the others still are
    store.close()
    for i, tid in enumerate(tids):
        assert json.loads((tmp_path / "t" / f"{tid}.json").read_text()) == {"n": i}
    assert not (tmp_path / "t" / f"{bad}.json").exists() and store.read(bad) is None
    assert f"trace {bad} could not be written" in caplog.text
    with pytest.raises(ValueError):
        store.put("../x", {})


def test_traces_handed_over_on_an_event_loop_reach_the_writer_in_one_write(tmp_path,
                                                                         monkeypatch):
    """On a running event loop the traces handed over within `BATCH_S` go to the writer
    process together (one write into its pipe, one wake-up of it); `wait` sends at once."""
    store = TraceStore(tmp_path / "t", keep=50)
    store.start()
    pipe = store.writer._proc.stdin.fileno()
    writes: list[int] = []
    real_write = os.write

    def counting(fd, data):
        if fd == pipe:
            writes.append(len(data))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", counting)

    async def hand_over() -> list[bool]:
        done = [store.put(new_id(), {"n": i}) for i in range(5)]
        assert writes == []  # not yet: the batch waits for its timer
        return [await asyncio.wrap_future(f) for f in done]

    assert asyncio.run(hand_over()) == [True] * 5
    assert len(writes) == 1

    async def waited() -> bool:
        return await asyncio.wrap_future(store.put(new_id(), {"n": 5}, wait=True))

    writes.clear()
    assert asyncio.run(waited()) and len(writes) == 1
    store.close()
    assert len(list((tmp_path / "t").iterdir())) == 6


def test_a_batch_whose_event_loop_ended_is_still_written(tmp_path):
    """Traces handed over on a loop that closes before its timer fires are not lost: the
    next trace handed over sends them, and `close` writes whatever is left."""
    store = TraceStore(tmp_path / "t", keep=50)

    async def hand_over(tids):
        return [store.put(tid, {"n": 1}) for tid in tids]

    first, second = [new_id() for _ in range(3)], [new_id() for _ in range(2)]
    done = asyncio.run(hand_over(first))  # the loop is closed before BATCH_S has passed
    later = store.put(new_id(), {"n": 2})  # no loop: sends the whole batch now
    assert all(f.result(20) for f in [*done, later])
    asyncio.run(hand_over(second))
    store.close()  # sends what the closed loop's timer never did
    on_disk = {p.stem for p in (tmp_path / "t").iterdir()}
    assert set(first) | set(second) <= on_disk and len(on_disk) == 6


def test_a_killed_trace_writer_is_replaced_and_loses_nothing(tmp_path, caplog):
    """Fault injection: the writer process is killed with traces in flight, and is sent
    Ctrl-C's SIGINT (which it ignores); every trace still ends up on disk, once."""
    store = TraceStore(tmp_path / "t", keep=50)
    first = [new_id() for _ in range(5)]
    done = [store.put(tid, {"n": i}) for i, tid in enumerate(first)]
    assert all(f.result(20) for f in done)
    writer = store.writer._proc
    writer.send_signal(signal.SIGINT)  # ignored: it stops only when its input ends
    time.sleep(0.2)
    assert writer.poll() is None
    writer.send_signal(signal.SIGSTOP)  # traces sent now wait in its pipe...
    stuck = [new_id() for _ in range(3)]
    done = [store.put(tid, {"n": i}) for i, tid in enumerate(stuck)]
    time.sleep(0.2)
    writer.kill()  # ...and die with it: a new writer gets them, with no further put
    assert all(f.result(20) for f in done)
    later = [new_id() for _ in range(5)]
    done = [store.put(tid, {"n": i}) for i, tid in enumerate(later)]
    store.close()
    assert all(f.result(0) for f in done)
    on_disk = sorted(p.stem for p in (tmp_path / "t").iterdir())
    assert on_disk == sorted(first + stuck + later)
    assert "the trace writer process stopped" in caplog.text


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="Linux scheduling policies")
def test_the_trace_writer_runs_as_batch_work(tmp_path):
    """The writer process never preempts the server on wake-up (SCHED_BATCH), and keeps its
    fair share of the CPU (its nice value is the server's)."""
    store = TraceStore(tmp_path / "t", keep=50)
    assert store.put(new_id(), {"n": 1}).result(20)
    writer = store.writer._proc.pid
    assert os.sched_getscheduler(writer) == os.SCHED_BATCH
    assert os.getpriority(os.PRIO_PROCESS, writer) == os.getpriority(os.PRIO_PROCESS, 0)
    assert os.sched_getscheduler(0) != os.SCHED_BATCH  # the server's own policy is untouched
    store.close()


def test_the_trace_writer_starts_with_the_server(pool_file, tmp_path):
    """The writer process is up before the first request, and the first trace goes straight
    into its pipe (no sender thread started for it)."""
    with ThreadServer(pool_file, tmp_path / "traces", keys=(KEY,)) as srv:
        store = srv.app.state.server.traces
        writer = store.writer._proc
        assert writer is not None and writer.poll() is None
        assert store.put(new_id(), {"n": 1}).result(20)
        assert store.writer._sender is None and store.writer._proc is writer
    assert writer.wait(20) == 0  # and it stops with the server


def test_a_full_pipe_never_blocks_put(tmp_path):
    """With the writer process stopped, 4 MB of traces overflow the pipe to it: `put` still
    returns at once (the sender thread holds the rest), every trace is readable and listed
    meanwhile, and all are written once the writer runs again."""
    store = TraceStore(tmp_path / "t", keep=50)
    assert store.put(new_id(), {"n": -1}).result(20)
    writer = store.writer._proc
    writer.send_signal(signal.SIGSTOP)
    try:
        tids = [new_id() for _ in range(20)]
        t0 = time.monotonic()
        done = [store.put(tid, {"n": i, "pad": "x" * 200_000}) for i, tid in enumerate(tids)]
        assert time.monotonic() - t0 < 2
        assert store.writer._draining and store.read(tids[-1])["n"] == 19
        listed = [row["id"] for row in store.recent(100)]  # as soon as readable, newest first
        assert listed[:20] == tids[::-1] and len(listed) == 21
    finally:  # a failed assertion leaves no stopped process behind
        writer.send_signal(signal.SIGCONT)
    assert all(f.result(30) for f in done)
    store.close()
    assert all(json.loads((tmp_path / "t" / f"{tid}.json").read_text())["n"] == i
               for i, tid in enumerate(tids))


def test_the_writer_writes_all_it_was_sent_when_the_server_is_gone(tmp_path):
    """The server killed: nobody reads the acknowledgements and the input ends; the writer
    process still writes every trace it received, and exits cleanly."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path / "t"), "10", "alone"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    proc.stdout.close()
    tids = [new_id() for _ in range(5)]
    proc.stdin.write(b"".join(frame(t, {"n": i}) for i, t in enumerate(tids)))
    proc.stdin.close()
    assert proc.wait(20) == 0
    assert sorted(p.stem for p in (tmp_path / "t").iterdir()) == sorted(tids)


def test_a_trace_the_writer_cannot_write_is_logged_and_reported(tmp_path, caplog):
    store = TraceStore(tmp_path / "t", keep=5)
    shutil.rmtree(tmp_path / "t")
    (tmp_path / "t").write_text("not a folder")  # every write fails (not a directory)
    tid = new_id()
    assert store.put(tid, {"n": 1}).result(20) is False
    store.close()
    assert f"trace {tid} could not be written" in caplog.text


def test_a_trace_that_is_not_json_is_logged_and_reported(tmp_path, caplog):
    store = TraceStore(tmp_path / "t", keep=5)
    tid, fine = new_id(), new_id()
    assert store.put(tid, {"x": {1, 2}}).result(20) is False  # a set: the writer's JSON fails
    assert store.put(fine, {"x": [1, 2]}).result(20) is True
    store.close()
    assert f"trace {tid} could not be written" in caplog.text
    assert [p.name for p in (tmp_path / "t").iterdir()] == [f"{fine}.json"]
