"""ONNX exports in a shared cache ($ENGINE_CACHE) are readable by every user, like every file engine writes
(0666 less the umask): onnx writes a model's external weights 0600, which another user could not read."""
from __future__ import annotations

import os
import stat

import pytest


@pytest.fixture()
def shared_umask():
    old = os.umask(0o022)
    yield
    os.umask(old)


def modes(folder) -> dict[str, int]:
    return {p.name: stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir() if p.is_file()}


def test_a_text_export_is_readable_by_all(tmp_path, monkeypatch, shared_umask, text_encoder):
    pytest.importorskip("onnxruntime")
    from engine.core.encoders import onnx_text
    monkeypatch.setenv("ENGINE_CACHE", str(tmp_path))
    assert onnx_text.text_encoder("all-MiniLM-L6-v2") is not None
    got = modes(onnx_text.export_dir("all-MiniLM-L6-v2"))
    assert {"model.onnx", "model.onnx.data"} <= set(got)
    assert all(mode == 0o644 for mode in got.values()), {k: oct(v) for k, v in got.items()}

