"""One writer at a time per collection: a second writer fails naming the holder (or waits), a lock left by a
killed writer is taken over, readers never block."""
from __future__ import annotations

import json
import os
import threading
import time

import pytest

from engine.core.collection import Collection
from engine.core.storage.store.lock import holder, lock_path, writer_lock
from engine.errors import EngineError


def _csv(path, ids):
    path.write_text("id,text\n" + "".join(f"{i},text of {i}\n" for i in ids))
    return path


class Holder:
    """Holds a collection's writer lock in another thread (another writer, as far as the lock is concerned)."""

    def __init__(self, folder):
        self.taken, self.release = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._run, args=(folder,))

    def _run(self, folder):
        with writer_lock(folder):
            self.taken.set()
            self.release.wait(10)

    def __enter__(self):
        self.thread.start()
        self.taken.wait(5)
        return self

    def __exit__(self, *exc):
        self.release.set()
        self.thread.join()


def test_second_writer_fails_naming_the_holder_and_readers_do_not_block(tmp_path, fake_encoder):
    Collection.build("c", texts=_csv(tmp_path / "a.csv", ["a", "b"]), root=tmp_path)
    with Holder(tmp_path / "c"):
        info = holder(lock_path(tmp_path / "c"))
        assert info["pid"] == os.getpid() and info["host"]
        with pytest.raises(EngineError, match=rf"'c' in .* is being written by pid {os.getpid()} on ") as exc:
            Collection.build("c", texts=_csv(tmp_path / "b.csv", ["x"]), root=tmp_path, add=True)
        assert "\n" not in str(exc.value)
        assert Collection.open("c", tmp_path).ids == ["a", "b"]  # a reader does not wait
    assert holder(lock_path(tmp_path / "c")) == {}  # released
    assert Collection.build("c", texts=_csv(tmp_path / "b.csv", ["x"]), root=tmp_path, add=True).ids == ["a", "b", "x"]


def test_second_writer_waits_when_asked(tmp_path, fake_encoder):
    with Holder(tmp_path / "c") as held:
        threading.Timer(0.5, held.release.set).start()
        start = time.perf_counter()
        col = Collection.build("c", texts=_csv(tmp_path / "a.csv", ["a"]), root=tmp_path, wait=10)
    assert col.ids == ["a"] and time.perf_counter() - start >= 0.4


def test_a_lock_left_by_a_dead_writer_is_taken_over(tmp_path, fake_encoder, capsys):
    path = lock_path(tmp_path / "c")
    path.parent.mkdir()
    path.write_text(json.dumps({"pid": 999999, "host": "elsewhere", "since": "yesterday"}))
    col = Collection.build("c", texts=_csv(tmp_path / "a.csv", ["a"]), root=tmp_path)
    assert col.ids == ["a"]
    assert "took over a lock left by pid 999999 on elsewhere" in " ".join(capsys.readouterr().err.split())


def test_nested_writes_in_one_process_do_not_deadlock(tmp_path):
    import numpy as np
    with writer_lock(tmp_path / "c"):
        col = Collection.from_vectors("c", ["a"], np.ones((1, 4), np.float32), None, "text", root=tmp_path)
        col.attach(arrays={"extra": np.zeros(3)})
    assert Collection.open("c", tmp_path).stored == ["extra"]
