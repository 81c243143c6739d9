"""What the serve tests share, built once per session however many modules import it: the demo photos
(conse) and a few texts (MiniLM) under one root. (A module, not a conftest: tests/conftest.py owns that name.)"""
from __future__ import annotations

import pytest

DOCS = [
    ("d1", "How to bake sourdough bread at home", "cooking"),
    ("d2", "Training a neural network on images", "ml"),
    ("d3", "The history of the Roman empire", "history"),
    ("d4", "Best hiking trails in the Alps", "travel"),
    ("d5", "Grilling vegetables on a barbecue", "cooking"),
    ("d6", "Gradient descent and backpropagation explained", "ml"),
    ("d7", "Medieval castles of Europe", "history"),
]
_BUILT: dict = {}


def write_docs(path, rows=DOCS):
    path.write_text("id,text,topic\n" + "".join(f'{i},"{t}",{g}\n' for i, t, g in rows))
    return path


@pytest.fixture(scope="session")
def served_root(tmp_path_factory):
    """A root with `demo` (16 photos, image) and `docs` (7 texts)."""
    if "root" not in _BUILT:
        from engine.core.collection import Collection
        from engine.core.demo import build_demo
        root = tmp_path_factory.mktemp("serve-root")
        build_demo(root=root)
        Collection.build("docs", texts=write_docs(root.parent / "docs.csv"), root=root)
        _BUILT["root"] = root
    return _BUILT["root"]


@pytest.fixture(scope="module")
def client(served_root):
    from fastapi.testclient import TestClient

    from engine.serve.app import create_app
    from engine.serve.options import ServeOptions
    with TestClient(create_app(ServeOptions(root=served_root)), raise_server_exceptions=False) as c:
        yield c
