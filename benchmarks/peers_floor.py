"""The floors `benchmarks/peers.py` measures the engine against: nothing of the engine is imported here
(except the patch that makes this machine's CUDA-only torchvision importable, as every torch user here needs).

    python benchmarks/peers_floor.py app EMB.npy IDS.txt MODEL PORT   a minimal FastAPI + faiss +
                                                                      sentence-transformers search service
    python benchmarks/peers_floor.py bare ONNX_DIR INDEX.faiss IDS.txt K "text"
                                                                      one text query: tokenizers + onnxruntime +
                                                                      faiss, the least a cold query can load
"""

import json
import sys


def app(emb_file: str, ids_file: str, model: str, port: str) -> None:
    import faiss
    import numpy as np
    import uvicorn
    from fastapi import FastAPI
    from pydantic import BaseModel
    import engine.core.encoders.torchvision_patch  # noqa: F401  (this machine's CUDA-only torchvision; no engine code)
    from sentence_transformers import SentenceTransformer

    emb = np.load(emb_file)
    index = faiss.IndexFlatIP(emb.shape[1])
    index.add(emb)
    ids = open(ids_file, encoding="utf-8").read().split("\n")
    st = SentenceTransformer(model, device="cpu")
    api = FastAPI()

    class Query(BaseModel):
        collection: str = ""
        text: str
        k: int = 10

    @api.get("/health")
    def health() -> dict:
        return {"ok": True}

    @api.post("/search")
    def search(q: Query) -> dict:
        vec = st.encode([q.text], normalize_embeddings=True, convert_to_numpy=True)
        scores, rows = index.search(vec.astype("float32"), q.k)
        return {"hits": [{"id": ids[r], "score": float(s)} for s, r in zip(scores[0], rows[0]) if r >= 0]}

    uvicorn.run(api, host="127.0.0.1", port=int(port), log_level="warning")


def bare(onnx_dir: str, index_file: str, ids_file: str, k: str, text: str) -> None:
    from pathlib import Path

    import faiss
    import numpy as np
    import onnxruntime as ort
    from tokenizers import Tokenizer

    folder = Path(onnx_dir)
    config = json.loads((folder / "config.json").read_text())
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.enable_truncation(max_length=int(config["max_seq_length"]))
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(folder / "model.onnx"), opts, providers=["CPUExecutionProvider"])
    enc = tok.encode(text)
    feed = {"input_ids": np.asarray([enc.ids], np.int64), "attention_mask": np.asarray([enc.attention_mask], np.int64),
            "token_type_ids": np.asarray([enc.type_ids], np.int64)}
    hidden = session.run(None, {n: feed[n] for n in config["inputs"]})[0]
    vec = hidden.mean(axis=1)
    vec /= np.linalg.norm(vec, axis=1, keepdims=True)
    index = faiss.read_index(index_file)
    scores, rows = index.search(vec.astype("float32"), int(k))
    ids = open(ids_file, encoding="utf-8").read().split("\n")
    print(json.dumps([{"id": ids[r], "score": float(s)} for s, r in zip(scores[0], rows[0])]))


if __name__ == "__main__":
    {"app": app, "bare": bare}[sys.argv[1]](*sys.argv[2:])
