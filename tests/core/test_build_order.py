"""Text builds encode longest-first across chunks (less padding) and store rows in the input's order."""
from __future__ import annotations

import numpy as np

from engine.core.build.chunks import in_input_order, length_order
from engine.core.collection import Collection
from engine.core.sources import Item


def test_length_order_round_trips_rows_positions_and_failures():
    items = [Item(f"d{i}", "x" * n) for i, n in enumerate([3, 9, 1, 9, 5])]
    order = length_order(items)
    assert [len(items[i].source) for i in order] == [9, 9, 5, 3, 1] and list(order[:2]) == [1, 3]
    emb = np.arange(5, dtype=np.float32)[order][:, None]  # row j of the sorted run = item order[j]
    kept = [0, 1, 2, 4]  # the sorted run's item at position 3 (input 0) failed
    back, kept_in, failed = in_input_order(order, emb[kept], kept, [(3, "bad")])
    assert kept_in == [1, 2, 3, 4] and back[:, 0].tolist() == [1, 2, 3, 4] and failed == [(0, "bad")]


def test_a_text_build_stores_encode_texts_rows_in_input_order(tmp_path, text_encoder):
    texts = ["a dog", "a very long sentence about the history of the roman empire and its emperors", "cat",
             "the weather today is sunny with a light breeze from the west", "x y z"]
    csv = tmp_path / "t.csv"
    csv.write_text("id,text\n" + "".join(f"d{i},{t}\n" for i, t in enumerate(texts)))
    col = Collection.build("t", texts=csv, root=tmp_path, model=text_encoder.spec, chunk_size=2)
    assert col.ids == [f"d{i}" for i in range(len(texts))]
    assert np.abs(np.asarray(col.embeddings) - text_encoder.encode_texts(texts)).max() < 1e-5
