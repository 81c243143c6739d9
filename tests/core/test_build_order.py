"""A text build stores `encode_texts` rows in the input's order, whatever the chunking."""
from __future__ import annotations

import numpy as np

from engine.core.collection import Collection


def test_a_text_build_stores_encode_texts_rows_in_input_order(tmp_path, text_encoder):
    texts = ["a dog", "a very long sentence about the history of the roman empire and its emperors", "cat",
             "the weather today is sunny with a light breeze from the west", "x y z"]
    csv = tmp_path / "t.csv"
    csv.write_text("id,text\n" + "".join(f"d{i},{t}\n" for i, t in enumerate(texts)))
    col = Collection.build("t", texts=csv, root=tmp_path, model=text_encoder.spec, chunk_size=2)
    assert col.ids == [f"d{i}" for i in range(len(texts))]
    assert np.abs(np.asarray(col.embeddings) - text_encoder.encode_texts(texts)).max() < 1e-5
