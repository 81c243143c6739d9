"""A text build stores `encode_texts` rows in the input's order, whatever the chunking."""
from __future__ import annotations

import numpy as np
import pytest

from engine.core.collection import Collection


def test_a_text_build_stores_encode_texts_rows_in_input_order(tmp_path, text_encoder):
    texts = ["a dog", "a very long sentence about the history of the roman empire and its emperors", "cat",
             "the weather today is sunny with a light breeze from the west", "x y z"]
    csv = tmp_path / "t.csv"
    csv.write_text("id,text\n" + "".join(f"d{i},{t}\n" for i, t in enumerate(texts)))
    col = Collection.build("t", texts=csv, root=tmp_path, model=text_encoder.spec, chunk_size=2)
    assert col.ids == [f"d{i}" for i in range(len(texts))]
    assert np.abs(np.asarray(col.embeddings) - text_encoder.encode_texts(texts)).max() < 1e-5


class _LengthEncoder:
    """Each text's vector is (its length, its input number): rows are checkable, calls are recorded."""
    spec, dim = "fake:length", 2

    def __init__(self):
        self.calls: list[list[str]] = []

    def encode_texts(self, texts, batch_size=None):
        self.calls.append(list(texts))
        return np.asarray([[len(t), int(t.split("#")[1])] for t in texts], np.float32)


def test_each_chunk_reaches_the_encoder_longest_first_and_rows_land_in_input_order(tmp_path):
    from engine.core.storage.builder.chunks import encode_chunked
    from engine.core.storage.builder.options import BuildOptions, BuildReport
    from engine.core.sources import Item
    rng = np.random.default_rng(0)
    texts = [f"{'w ' * int(rng.integers(1, 60))}#{i}" for i in range(600)]
    enc = _LengthEncoder()
    rows, kept, failed = encode_chunked(tmp_path, enc, "text", [Item(str(i), t) for i, t in enumerate(texts)],
                                        BuildOptions(chunk_size=512), BuildReport())
    assert list(kept) == list(range(600)) and failed == []
    assert np.array_equal(np.asarray(rows), [[len(t), i] for i, t in enumerate(texts)])
    assert [len(c) for c in enc.calls] == [256, 256, 88]  # slices of the progress step
    first_chunk = [len(t) for call in enc.calls[:2] for t in call]
    assert first_chunk == sorted((len(t) for t in texts[:512]), reverse=True)  # across slices, within the chunk


@pytest.mark.parametrize("n, sizes, threads", [(600, [256, 256, 88], 2), (300, [150, 150], 2), (40, [20, 20], 2),
                                              (20, [20], 1)])
def test_a_parallel_encoder_takes_slices_at_once_and_rows_land_in_input_order(tmp_path, n, sizes, threads):
    """The CPU build's ONNX encoder (`parallel` 2): slices encoded two at a time, each longest first; a chunk too
    small for a full slice each is dealt to both slices in turn (one slice under 2 × MIN_SLICE texts); rows in
    input order all the same."""
    import threading
    import time

    from engine.core.storage.builder.chunks import encode_chunked
    from engine.core.storage.builder.options import BuildOptions, BuildReport
    from engine.core.sources import Item
    rng = np.random.default_rng(1)
    texts = [f"{'w ' * int(rng.integers(1, 60))}#{i}" for i in range(n)]
    enc = _LengthEncoder()
    enc.info = {"parallel": 2}
    seen = set()
    plain = enc.encode_texts

    def encode_texts(texts, batch_size=None):
        seen.add(threading.get_ident())
        time.sleep(0.05)  # long enough that the second slice starts while the first is running
        return plain(texts, batch_size)
    enc.encode_texts = encode_texts
    rows, kept, _ = encode_chunked(tmp_path, enc, "text", [Item(str(i), t) for i, t in enumerate(texts)],
                                   BuildOptions(chunk_size=1024), BuildReport())
    assert np.array_equal(np.asarray(rows), [[len(t), i] for i, t in enumerate(texts)]) and len(kept) == n
    assert sorted(len(c) for c in enc.calls) == sorted(sizes) and len(seen) == threads
    assert all([len(t) for t in c] == sorted((len(t) for t in c), reverse=True) for c in enc.calls)
