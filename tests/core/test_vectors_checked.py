"""`--vectors` (and `Collection.from_vectors`) checked as they stream: every value finite, rows normalisable
whatever their scale (1e30, 1e-30: float64 norms), an all-zero row warned about, a header that does not
describe the data refused, the width matched against `--encoder`."""
from __future__ import annotations

import numpy as np
import pytest

from engine.core.collection import Collection
from engine.core.encoders.base import l2_normalize


def build(run_cli, tmp_path, x, *extra):
    path = tmp_path / "v.npy"
    if isinstance(x, bytes):
        path.write_bytes(x)
    else:
        np.save(path, x)
    return run_cli("build", "v", "--vectors", path, "--root", tmp_path / "idx", *extra)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_non_finite_value_is_refused_naming_the_row(run_cli, tmp_path, monkeypatch, capsys, bad):
    x = np.ones((10, 8), np.float32)
    x[6, 3] = bad
    code, out, err = build(run_cli, tmp_path, x)
    assert code == 2 and "v.npy: row 7: holds NaN or an infinity" in err and "Traceback" not in err, err
    assert not (tmp_path / "idx" / "v" / "manifest.json").exists()


@pytest.mark.parametrize("scale", [1e30, 1e-30, 1e-44, 1e38])
def test_rows_at_any_scale_are_stored_unit_length(run_cli, tmp_path, monkeypatch, capsys, scale):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((20, 8)) * scale).astype(np.float32)
    assert np.isfinite(x).all() and (np.abs(x).sum(axis=1) > 0).all()
    code, out, err = build(run_cli, tmp_path, x)
    assert code == 0, err
    col = Collection.open("v", tmp_path / "idx")
    np.testing.assert_allclose(np.linalg.norm(np.asarray(col.embeddings), axis=1), 1.0, rtol=1e-5)
    ref = x.astype(np.float64) / np.linalg.norm(x.astype(np.float64), axis=1, keepdims=True)
    np.testing.assert_allclose(np.asarray(col.embeddings), ref, atol=1e-6)
    col.verify()


def test_l2_normalize_keeps_ordinary_rows_bit_for_bit_and_zero_rows_zero():
    x = np.random.default_rng(1).standard_normal((50, 16)).astype(np.float32)
    x[3] = 0
    out = l2_normalize(x)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    np.testing.assert_array_equal(out[np.arange(50) != 3], (x / np.maximum(norms, 1e-12))[np.arange(50) != 3])
    assert not out[3].any()


def test_an_all_zero_row_is_warned_about(run_cli, tmp_path, monkeypatch, capsys):
    x = np.ones((10, 8), np.float32)
    x[2] = 0
    code, out, err = build(run_cli, tmp_path, x)
    assert code == 0 and "1 of 10 vectors are all zeros" in err, err


def header(shape, dtype="<f4") -> bytes:
    import io
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": dtype, "fortran_order": False, "shape": shape})
    return buf.getvalue()


@pytest.mark.parametrize("shape", [(5, 8), (10, 4), (-10, 8), (10, -8)])
def test_a_header_that_does_not_describe_the_data_is_refused(run_cli, tmp_path, monkeypatch, capsys, shape):
    data = np.ones((10, 8), np.float32).tobytes()
    code, out, err = build(run_cli, tmp_path, header(shape) + data)
    assert code == 2 and "v.npy" in err and "Traceback" not in err, err
    assert ("header" in err) or ("shape" in err), err
