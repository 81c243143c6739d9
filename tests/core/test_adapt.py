"""Adapters fitted on labelled pairs: a gain on a planted split (never scored on the fitted pairs), the
`adapted:DIR` round trip through `engine adapt`, build and search, and bad input as one line."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import run_cli


def test_fit_recovers_a_planted_map_on_held_out_groups():
    """Documents are a fixed rotation of their queries plus noise: the base (identity) ranks poorly, the
    adapter fitted on some documents ranks held-out ones far better."""
    from engine.core.adapters.fit import FitOptions, fit_maps
    rng = np.random.default_rng(0)
    d, n = 16, 120
    rot, _ = np.linalg.qr(rng.normal(size=(d, d)))
    queries = rng.normal(size=(n, d)).astype(np.float32)
    docs = (queries @ rot + 0.2 * rng.normal(size=(n, d))).astype(np.float32)
    fit, test = np.arange(90), np.arange(90, n)
    wl, wr, report = fit_maps(queries[fit], docs[fit], [str(i) for i in fit], shared=False,
                              options=FitOptions(reg=0.01, lr=1e-2, epochs=400))

    def r1(q, g):
        q = q / np.linalg.norm(q, axis=1, keepdims=True)
        g = g / np.linalg.norm(g, axis=1, keepdims=True)
        return float((np.argmax(q @ g.T, axis=1) == np.arange(len(q))).mean())
    before = r1(queries[test], docs[test])
    after = r1(queries[test] @ wl, docs[test] @ wr)
    assert after > before + 0.15, (before, after)
    assert report["held_out_loss_after"] < report["held_out_loss_before"]


def test_adapted_dir_round_trip(tmp_path, monkeypatch, capsys):
    from engine.core.collection import Collection
    from engine.core.encoders.registry import load_encoder
    pairs = tmp_path / "pairs.csv"
    topics = ["bread", "rivers", "chess", "trains", "music", "stars", "cheese", "boats"]
    pairs.write_text("query,document\n" + "".join(f"about {t} {i},a long text on {t} number {i}\n"
                                                  for t in topics for i in range(3)))
    out = tmp_path / "ad"
    code, _, err = run_cli(monkeypatch, capsys, "adapt", "--base", "sbert:all-MiniLM-L6-v2", "--pairs", pairs,
                           "--out", out, "--epochs", "20", "-q")
    assert code == 0, err
    enc = load_encoder(f"adapted:{out}")
    base = load_encoder("sbert:all-MiniLM-L6-v2")
    w = np.load(out / "adapter.npz")["text"]
    want = base.encode_texts(["a text on bread"]) @ w
    np.testing.assert_allclose(enc.encode_texts(["a text on bread"]), want / np.linalg.norm(want), atol=1e-5)
    docs = tmp_path / "docs.csv"
    docs.write_text("id,text\n" + "".join(f"{t},a text about {t}\n" for t in topics))
    code, _, err = run_cli(monkeypatch, capsys, "build", "c", "--texts", docs, "--model", f"adapted:{out}",
                           "--root", tmp_path / "idx", "-q")
    assert code == 0, err
    col = Collection.open("c", tmp_path / "idx")
    assert col.manifest["encoder"] == f"adapted:{out.resolve()}"
    assert col.search(text="chess", k=1)[0].id == "chess"


@pytest.mark.parametrize("csv_text, message", [
    ("a,b\n1,2\n", "needs the columns text,image or query,document"),
    ("query,document\nq,\n", "p.csv:2: empty document"),
    ("text,image\ncat,missing.jpg\n", "image missing.jpg not found"),
    ("query,document\nq,d\n", "an adapter needs at least 5"),
])
def test_bad_pairs_are_one_line(csv_text, message, tmp_path, monkeypatch, capsys):
    pairs = tmp_path / "p.csv"
    pairs.write_text(csv_text)
    code, out, err = run_cli(monkeypatch, capsys, "adapt", "--base", "conse", "--pairs", pairs, "--out",
                             tmp_path / "o")
    text = (out + err).strip()
    assert code == 2 and message in text and len(text.splitlines()) <= 2, text
    assert not (tmp_path / "o").exists()


def test_adapted_needs_a_folder_with_an_adapter(tmp_path):
    from engine.core.encoders.registry import load_encoder
    from engine.errors import EngineError
    with pytest.raises(EngineError, match="no adapter here"):
        load_encoder(f"adapted:{tmp_path}")
