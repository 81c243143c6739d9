"""What a writer may replace: only a regular file (or nothing). A device, a pipe or a link to a device is
refused in one line before any work, and is left as it was; a folder that takes no new files is named."""
from __future__ import annotations

import os
import stat

import pytest

from engine.errors import EngineError
from engine.io.atomic import atomic_open, check_writable

RUN = "q1 Q0 d1 1 2.0 a\nq1 Q0 d2 2 1.0 a\n"


def special_targets(tmp_path):
    """A named pipe, and (where the machine has it) a link to /dev/null: renaming over either replaces it."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    out = [fifo]
    if os.path.exists("/dev/null"):
        link = tmp_path / "null-link"
        link.symlink_to("/dev/null")
        out.append(link)
    return out


def still_special(path) -> bool:
    return not stat.S_ISREG(os.stat(path).st_mode) and not stat.S_ISDIR(os.stat(path).st_mode)


def test_atomic_writer_refuses_to_replace_a_device_or_pipe(tmp_path):
    for target in special_targets(tmp_path):
        with pytest.raises(EngineError, match="not a regular file") as exc:
            with atomic_open(target) as fh:
                fh.write("x")
        assert "\n" not in str(exc.value)
        assert still_special(target), f"{target} was replaced"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_fuse_out_on_a_device_is_refused_and_left_alone(run_cli, tmp_path, monkeypatch, capsys):
    a, b = tmp_path / "a.run", tmp_path / "b.run"
    a.write_text(RUN)
    b.write_text(RUN.replace(" a\n", " b\n"))
    for target in special_targets(tmp_path):
        code, out, err = run_cli("fuse", a, b, "--out", target)
        assert code != 0 and "not a regular file" in err and "Traceback" not in err, err
        assert still_special(target)


def test_search_out_on_a_device_is_refused_before_the_search(run_cli, tmp_path, monkeypatch, capsys, fake_encoder):
    texts = tmp_path / "t.csv"
    texts.write_text("id,text\nd1,one text\nd2,another text\n")
    from engine.core.collection import Collection
    Collection.build("c", texts=texts, model="fake", root=tmp_path / "idx")
    queries = tmp_path / "q.tsv"
    queries.write_text("q1\tone\n")
    for target in special_targets(tmp_path):
        code, out, err = run_cli("search", "c", "--root", tmp_path / "idx", "--queries",
                                 queries, "--out", target)
        assert code != 0 and "not a regular file" in err and "wrote" not in out, (out, err)
        assert still_special(target)


def test_a_folder_that_takes_no_new_files_is_named(tmp_path):
    if not os.path.isdir("/proc/self"):
        pytest.skip("no /proc on this machine")
    with pytest.raises(EngineError, match="cannot be written"):
        check_writable("/proc/self/engine-out.tsv")
    with pytest.raises(EngineError, match="cannot be written"):
        check_writable("/proc/engine-model", folder=True)


@pytest.mark.parametrize("where", ["file", "device", "proc"])
def test_build_and_delete_with_root_at_a_file_or_system_folder_are_one_line(run_cli, tmp_path, monkeypatch, capsys,
                                                                               fake_encoder, where):
    texts = tmp_path / "t.csv"
    texts.write_text("id,text\nd1,one text\nd2,another text\n")
    root = {"file": texts, "device": "/dev/full", "proc": "/proc/self"}[where]
    if not os.path.exists(root):
        pytest.skip(f"no {root} on this machine")
    ids = tmp_path / "ids.txt"
    ids.write_text("d1\n")
    for args in (("build", "c", "--texts", texts, "--model", "fake"), ("delete", "c", "--ids", ids)):
        code, out, err = run_cli(*args, "--root", root)
        assert code != 0 and "Traceback" not in err and len(err.strip().splitlines()) >= 1, err
        assert str(root) in err.strip().splitlines()[-1], err
    if where == "device":
        assert still_special(root)
