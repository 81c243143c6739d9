"""Writers in processes of their own: `kill -9` at random moments of build, `--add` and `--force` (a few here,
50 under `-m slow`), two writers at once, a reader during a rebuild, and a full disk during a write.

After every kill the collection opens (it is the previous generation or the new one, never a mix), the same
command run again finishes, and its result equals an uninterrupted build bit for bit."""
from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from engine.core.collection import MANIFEST, Collection
from engine.errors import EngineError

WRITER = Path(__file__).with_name("writer.py")
N, FIRST = 60, 30  # items; the first FIRST are in the collection before --add / --force
CHUNK = "5"


@pytest.fixture(scope="module", autouse=True)
def fake_in_process(install_fake):
    """Every build of this module's own process uses the fake encoder, as the writer children do."""
    with pytest.MonkeyPatch.context() as mp:
        install_fake(mp)
        yield


def _env(delay: float = 0.05) -> dict:
    env = dict(os.environ, FAKE_ENCODER_DELAY=str(delay), PYTHONPATH=str(WRITER.parents[2]))
    env.pop("ENGINE_MAX_LINE_BYTES", None)
    return env


def _csv(path: Path, ids) -> Path:
    path.write_text("id,text\n" + "".join(f"d{i},text number {i} about things\n" for i in ids))
    return path


def _args(scenario: str, tmp: Path) -> list[str]:
    src = _csv(tmp / "all.csv", range(N))
    extra = {"build": [], "add": ["--add"], "force": ["--force"]}[scenario]
    return ["build", "c", "--texts", str(src), "--root", str(tmp / "idx"), "--chunk-size", CHUNK,
            "--batch-size", CHUNK, "-q", *extra]


def _build_here(tmp: Path, ids, **settings) -> Collection:
    """A build in this process with the fake encoder (`fake_in_process`; the children use the same one)."""
    return Collection.build("c", texts=_csv(tmp / "here.csv", ids), root=tmp / "idx", **settings)


def _prepare(scenario: str, tmp: Path) -> None:
    shutil.rmtree(tmp / "idx", ignore_errors=True)
    if scenario in ("add", "force"):
        _build_here(tmp, range(FIRST))


def _state(tmp: Path) -> tuple[list[str], np.ndarray]:
    col = Collection.open("c", tmp / "idx")
    return col.ids, np.asarray(col.embeddings).copy()


_RUN_SECONDS: dict[str, float] = {}


def uninterrupted_seconds(scenario: str, tmp: Path) -> float:
    """How long the writer takes on this machine when nobody kills it (measured once per scenario): kill
    delays are drawn as fractions of it, so the campaign kills writers mid-work on a fast or a slow machine."""
    if scenario not in _RUN_SECONDS:
        _prepare(scenario, tmp)
        start = time.perf_counter()
        subprocess.run([sys.executable, str(WRITER), *_args(scenario, tmp)], env=_env(), check=True,
                       capture_output=True, timeout=300)
        _RUN_SECONDS[scenario] = time.perf_counter() - start
    return _RUN_SECONDS[scenario]


def kill_once(scenario: str, tmp: Path, rng: random.Random, reference: tuple) -> dict:
    """One campaign step: start the writer, SIGKILL it after a random fraction of an uninterrupted run,
    check, resume, compare."""
    run = uninterrupted_seconds(scenario, tmp)
    _prepare(scenario, tmp)
    before = _state(tmp) if scenario != "build" else None
    proc = subprocess.Popen([sys.executable, str(WRITER), *_args(scenario, tmp)], env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(rng.uniform(0.1, 0.9) * run)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    killed = proc.returncode == -signal.SIGKILL
    out = {"killed": killed, "opened": None}
    if (tmp / "idx" / "c" / MANIFEST).exists():
        ids, emb = _state(tmp)  # opens, checksums and structure verified
        out["opened"] = "new" if ids == reference[0] else "old"
        if out["opened"] == "old":
            assert before is not None and ids == before[0] and np.array_equal(emb, before[1])
    again = "add" if scenario == "build" and out["opened"] else scenario  # a build killed after its commit
    resumed = subprocess.run([sys.executable, str(WRITER), *_args(again, tmp)],
                             env=_env(0), capture_output=True, text=True, timeout=120, check=False)
    assert resumed.returncode == 0, resumed.stderr
    ids, emb = _state(tmp)
    assert ids == reference[0] and np.array_equal(emb, reference[1])  # nothing lost, bit-identical
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple:
    tmp = tmp_path_factory.mktemp("reference")
    col = _build_here(tmp, range(N))
    return col.ids, np.asarray(col.embeddings).copy()


@pytest.mark.parametrize("scenario", ["build", "add", "force"])
def test_kill_9_then_resume(tmp_path, scenario, reference):
    kill_once(scenario, tmp_path, random.Random(scenario), reference)


@pytest.mark.slow
def test_kill_campaign_50(tmp_path, reference):
    rng = random.Random(16)
    tally: dict[str, int] = {}
    for n in range(50):
        scenario = ("build", "add", "force")[n % 3]
        out = kill_once(scenario, tmp_path, rng, reference)
        key = f"{scenario}:{'killed' if out['killed'] else 'finished'}:{out['opened']}"
        tally[key] = tally.get(key, 0) + 1
    print("kill campaign:", dict(sorted(tally.items())))
    assert sum(v for k, v in tally.items() if ":killed:" in k) >= 25


def test_two_concurrent_adds_lose_nothing(tmp_path, fake_encoder):
    from engine.core.storage.store.lock import holder, lock_path
    Collection.build("c", texts=_csv(tmp_path / "first.csv", range(FIRST)), root=tmp_path / "idx")
    a = _csv(tmp_path / "a.csv", range(FIRST, 45))
    b = _csv(tmp_path / "b.csv", range(45, N))
    first = subprocess.Popen([sys.executable, str(WRITER), "build", "c", "--texts", str(a), "--root",
                              str(tmp_path / "idx"), "--add", "--chunk-size", CHUNK, "--batch-size", CHUNK, "-q"],
                             env=_env(0.5), stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while holder(lock_path(tmp_path / "idx" / "c")).get("pid") != first.pid and time.time() < deadline:
        time.sleep(0.05)  # until the first holds the lock (it then encodes for 1.5 s)
    with pytest.raises(EngineError, match=f"is being written by pid {first.pid} on "):
        Collection.build("c", texts=b, root=tmp_path / "idx", add=True)
    second = Collection.build("c", texts=b, root=tmp_path / "idx", add=True, wait=60)
    assert first.wait(60) == 0, first.stderr.read()
    assert second.ids == [f"d{i}" for i in range(N)]
    assert Collection.open("c", tmp_path / "idx").ids == [f"d{i}" for i in range(N)]


def test_reader_during_a_rebuild_never_sees_damage(tmp_path):
    _build_here(tmp_path, range(N))
    base = ["build", "c", "--texts", str(tmp_path / "here.csv"), "--root", str(tmp_path / "idx"), "-q"]
    rebuild = subprocess.Popen([sys.executable, str(WRITER), *base, "--force", "--chunk-size", CHUNK,
                                "--batch-size", CHUNK], env=_env(0.02))
    reads, retried = 0, 0
    query = np.ones(16, np.float32)
    while rebuild.poll() is None or reads < 5:
        try:
            col = Collection.open("c", tmp_path / "idx")
            hits = col.hits(*col.search_vectors(query, k=3))[0]
            assert len(hits) == 3
            reads += 1
        except EngineError as exc:  # the one error a reader may meet: a commit between its reads
            assert "rebuilt while it was open" in str(exc), str(exc)
            retried += 1
    assert rebuild.returncode == 0 and reads >= 5


def _can_mount_tmpfs() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
                            "mount -t tmpfs -o size=64k tmpfs /mnt"], capture_output=True, timeout=30, check=False)
    return probe.returncode == 0


def test_full_disk_during_a_write_is_one_line_and_keeps_the_collection(tmp_path):
    if not _can_mount_tmpfs():
        pytest.skip("cannot mount a small tmpfs without root here (no user namespaces)")
    idx = tmp_path / "idx"
    idx.mkdir()
    big = _csv(tmp_path / "big.csv", range(3000))
    small = _csv(tmp_path / "small.csv", range(5))
    check = f"from engine.core.collection import Collection; print('ids', len(Collection.open('c', '{idx}').ids))"
    script = (f"mount -t tmpfs -o size=400k tmpfs {idx} && "
              f"{sys.executable} {WRITER} build c --texts {small} --root {idx} -q && "
              f"{sys.executable} {WRITER} build c --texts {big} --root {idx} -q --force; echo rc=$?; "
              f"{sys.executable} -c \"{check}\"")
    done = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script], env=_env(0),
                          capture_output=True, text=True, timeout=300, check=False)
    assert "rc=2" in done.stdout, done.stdout + done.stderr
    assert "no space left on the device" in " ".join(done.stderr.split()) and "Traceback" not in done.stderr
    assert "ids 5" in done.stdout  # the previous generation opens whole
