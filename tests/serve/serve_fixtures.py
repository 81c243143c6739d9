"""What the serve tests share, built once per session however many modules import it: the demo photos
(conse) and a few texts (MiniLM) under one root. (A module, not a conftest: tests/conftest.py owns that name.)"""
from __future__ import annotations

import pytest

ROWS = """\
d1,A recipe for sourdough bread with a crisp crust,cooking
d2,Convolutional neural networks for image classification,ml
d3,The fall of the Roman republic,history
d4,Walking routes through the Scottish highlands,travel
d5,Grilled vegetables and barbecue sauces,cooking
d6,Backpropagation and gradient descent for deep learning,ml
d7,Castles and fortresses of medieval Europe,history
"""
DOCS = [tuple(line.split(",")) for line in ROWS.splitlines()]
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
