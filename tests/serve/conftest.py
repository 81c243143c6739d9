"""What the serve tests share, built once per session: the demo photos (conse) and a few texts (MiniLM) under
one root, a client of the service over it, and the texts themselves (`docs_table`)."""
from __future__ import annotations

from dataclasses import dataclass

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


def write_docs(path, rows=DOCS):
    path.write_text("id,text,topic\n" + "".join(f'{i},"{t}",{g}\n' for i, t, g in rows))
    return path


@dataclass(frozen=True)
class DocsTable:
    """The texts of the `docs` collection: (id, text, topic) rows, and a CSV writer for any of them."""
    rows: list

    def write(self, path, rows=None):
        return write_docs(path, self.rows if rows is None else rows)


@pytest.fixture(scope="session")
def docs_table() -> DocsTable:
    return DocsTable(DOCS)


@pytest.fixture(scope="session")
def served_root(tmp_path_factory):
    """A root with `demo` (16 photos, image) and `docs` (7 texts)."""
    from engine.core.collection import Collection
    from engine.core.demo import build_demo
    root = tmp_path_factory.mktemp("serve-root")
    build_demo(root=root)
    Collection.build("docs", texts=write_docs(root.parent / "docs.csv"), root=root)
    return root


@pytest.fixture(scope="module")
def client(served_root):
    from fastapi.testclient import TestClient

    from engine.serve.app import create_app
    from engine.serve.options import ServeOptions
    with TestClient(create_app(ServeOptions(root=served_root)), raise_server_exceptions=False) as c:
        yield c
