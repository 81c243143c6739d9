"""`engine mllm --discovery` at the Million LLMs discovery set's size: a generated JSONL of `--questions` questions
each answered by every one of `--llms` LLMs (the real set: 14,950 × 1,131 = 16.9M answers), each answer with
`--tokens` token log-probabilities (a random length around it), read by `discovery.read_discovery` (pyarrow
batches). Reports rows/s and wall time of the read, checks the run is valid (every question lists every LLM)
and, run under /usr/bin/time -v, the peak RSS is the process's. `--fraction 0.1` reads a tenth of the questions
(every LLM still answers each one). Prints a table, writes benchmarks/results/discovery_scale.json.

`--embed-only` times the other half of the discovery step instead: the embedding of the discovery questions
(the generator's texts, `--question-words` more words each for longer questions) with the default text
encoder through `embed_cached`, as `engine mllm --discovery` embeds them (each distinct text once, remembered
by content, on the encoder `engine build` uses: onnxruntime on the CPU), then the same call again over its
cache; the table adds the read of the full-size run (`--read-json`, the committed
results/discovery_scale_full.json) to state the whole step's time. `--embed` (with the read) embeds the
questions read in the same process, as the command does next, so the time and the peak RSS are the whole
step's. `--torch` (ENGINE_ONNX=0) embeds on the sentence model's torch `encode` instead, for a paired run; run
the ONNX side once before timing it, so the model's export (once per model) is not in the time.

    /usr/bin/time -v nice python benchmarks/discovery_scale.py [--fraction 0.1] [--tokens 32] [--keep FILE] [--embed]
    python benchmarks/discovery_scale.py --embed-only [--fraction 1] [--question-words 0] [--torch] [--out FILE]
"""
from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.io.atomic import write_json  # noqa: E402
from engine.tasks.model_ranking.discovery import read_discovery  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "discovery_scale.json"
QUESTIONS, LLMS = 14_950, 1_131


def question_text(q: int) -> str:
    return f"discovery question {q}: how does topic {q % 97} relate to item {q % 13}?"


def embed_questions(questions: int, words: int, read_json: Path, out: Path) -> None:
    """Time `embed_cached` over the discovery questions (first call: the encoder loaded and every text
    embedded; second: the cache read), print the table with the whole step at this size, write `out`."""
    import json

    from engine.core.encoders.registry import DEFAULT_TEXT_SPEC
    from engine.tasks.model_ranking.mllm import embed_cached, question_encoder
    rng = np.random.default_rng(1)
    vocabulary = ["model", "answer", "reason", "number", "history", "chemistry", "law", "proof", "function",
                  "country", "language", "energy", "market", "protein", "theorem", "court", "river", "signal"]
    texts = [question_text(q) + "".join(" " + vocabulary[j] for j in rng.integers(0, len(vocabulary), words))
             for q in range(questions)]
    with tempfile.TemporaryDirectory() as tmp:
        start, cpu = time.perf_counter(), time.process_time()
        emb = embed_cached(texts, DEFAULT_TEXT_SPEC, Path(tmp))
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        start2 = time.perf_counter()
        again = embed_cached(texts, DEFAULT_TEXT_SPEC, Path(tmp))
        cached = time.perf_counter() - start2
    same = bool(np.array_equal(emb, again))
    runtime = question_encoder(DEFAULT_TEXT_SPEC).info.get("runtime", "torch")  # after: its load is in the time
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    read = json.loads(read_json.read_text()) if read_json.is_file() else None
    read = read if read and read["questions"] == questions else None  # the read of the same size only
    whole = read["read_s"] + wall if read else None
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; {DEFAULT_TEXT_SPEC} on {runtime}, "
          f"{np.mean([len(t.split()) for t in texts]):.0f} words a question")
    print("| questions | embed (wall) | CPU | questions/s | again, from the cache | peak RSS | read of the answers "
          "(wall) | whole discovery step |")
    print("|---|---|---|---|---|---|---|---|")
    print(f"| {questions:,} | {wall:.0f} s | {cpu:.0f} s | {questions / wall:,.0f} | {cached:.2f} s (same: {same}) | "
          f"{peak:,.0f} MiB | {f'{read_s:.0f} s' if (read_s := (read or {}).get('read_s')) else '—'} | "
          f"{f'{whole:.0f} s ({whole / 60:.1f} min)' if whole else '—'} |")
    write_json(out, {"questions": questions, "model": DEFAULT_TEXT_SPEC, "runtime": runtime, "question_words": words,
                     "mean_words": float(np.mean([len(t.split()) for t in texts])), "embed_s": wall,
                     "embed_cpu_s": cpu, "questions_per_s": questions / wall, "cached_s": cached,
                     "cached_equal": same, "peak_rss_mib": peak, "read_s": (read or {}).get("read_s"),
                     "whole_step_s": whole, "load_average": os.getloadavg()[0], "cpus": os.cpu_count(),
                     "machine": platform.platform()})
    print(f"wrote {out}")


def embed_read(texts: list[str], folder: Path) -> dict:
    """`--embed`: the questions just read embedded in the same process, as `engine mllm --discovery` does next
    (`embed_cached`), so the peak RSS is the whole step's; their time, CPU time and runtime."""
    from engine.core.encoders.registry import DEFAULT_TEXT_SPEC
    from engine.tasks.model_ranking.mllm import embed_cached, question_encoder
    start, cpu = time.perf_counter(), time.process_time()
    emb = embed_cached(texts, DEFAULT_TEXT_SPEC, folder)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return {"embed_s": wall, "embed_cpu_s": cpu, "embedded": int(len(emb)),
            "runtime": question_encoder(DEFAULT_TEXT_SPEC).info.get("runtime", "torch")}


def generate(path: Path, questions: int, llms: int, tokens: int, seed: int = 0) -> int:
    """Write the JSONL (one row per question and LLM, LLMs in a shuffled order per question); returns its bytes."""
    import orjson

    rng = np.random.default_rng(seed)
    ids = [f"llm_{i:04d}" for i in range(llms)]
    with open(path, "wb") as fh:
        for q in range(questions):
            text = question_text(q)
            lengths = rng.integers(max(1, tokens // 2), tokens * 3 // 2 + 1, llms)
            values = np.minimum(rng.normal(-1.5, 0.8, int(lengths.sum())), 0.0).round(4)
            start = 0
            lines = []
            for j in rng.permutation(llms):
                n = int(lengths[j])
                lines.append(orjson.dumps({"query_id": f"d{q:05d}", "query_text": text, "llm_id": ids[j],
                                           "answer": "an answer", "logprobs": values[start:start + n].tolist()}))
                start += n
            fh.write(b"\n".join(lines) + b"\n")
    return path.stat().st_size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fraction", type=float, default=0.1, help="share of the 14,950 questions (0 < f ≤ 1)")
    ap.add_argument("--tokens", type=int, default=32, help="mean tokens per answer (1..4096)")
    ap.add_argument("--keep", type=Path, help="write (or reuse) the generated file here instead of a temporary one")
    ap.add_argument("--embed-only", action="store_true", help="time the questions' embedding instead of the read")
    ap.add_argument("--embed", action="store_true", help="after the read, embed its questions in the same process")
    ap.add_argument("--torch", action="store_true", help="--embed-only on torch (ENGINE_ONNX=0), not onnxruntime")
    ap.add_argument("--question-words", type=int, default=0, help="words added to each question (0..200)")
    ap.add_argument("--read-json", type=Path, default=RESULTS.with_name("discovery_scale_full.json"),
                    help="the full-size read's JSON, added to the embedding for the whole step")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if not 0 < args.fraction <= 1 or not 1 <= args.tokens <= 4096 or not 0 <= args.question_words <= 200:
        ap.error("--fraction must be in (0, 1], --tokens in 1..4096 and --question-words in 0..200")
    questions = max(1, round(QUESTIONS * args.fraction))
    if args.embed_only:
        if args.torch:
            os.environ["ENGINE_ONNX"] = "0"
        embed_questions(questions, args.question_words, args.read_json,
                        args.out or RESULTS.with_name("discovery_embed.json"))
        return
    args.out = args.out or RESULTS
    with tempfile.TemporaryDirectory() as tmp:
        path = args.keep or Path(tmp) / "discovery.jsonl"
        start = time.perf_counter()
        size = path.stat().st_size if path.exists() else generate(path, questions, LLMS, args.tokens)
        made = time.perf_counter() - start
        ids = [f"llm_{i:04d}" for i in range(LLMS)]
        start, cpu = time.perf_counter(), time.process_time()
        found = read_discovery(path, ids)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        embedded = embed_read(found.texts, Path(tmp) / "embeddings") if args.embed else {}
    valid = len(found.query_ids) == questions and bool(np.isfinite(found.soft).all())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rate = found.rows / wall
    full = QUESTIONS * LLMS / rate
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print("| questions × LLMs | rows | file | read (wall) | CPU | rows/s (wall) | peak RSS | valid | "
          "full size at this rate |")
    print("|---|---|---|---|---|---|---|---|---|")
    print(f"| {questions:,} × {LLMS:,} | {found.rows:,} | {size / 2**20:,.0f} MiB | {wall:.0f} s | {cpu:.0f} s | "
          f"{rate:,.0f} | {peak:,.0f} MiB | {valid} | {full / 60:.1f} min |")
    if embedded:
        whole, whole_cpu = wall + embedded["embed_s"], cpu + embedded["embed_cpu_s"]
        embedded.update(whole_step_s=whole, whole_step_cpu_s=whole_cpu)
        print(f"then the questions embedded in the same process ({embedded['runtime']}): "
              f"{embedded['embed_s']:.0f} s wall, {embedded['embed_cpu_s']:.0f} s CPU; the whole step (read + embed) "
              f"{whole:.0f} s wall ({whole / 60:.1f} min), {whole_cpu:.0f} s CPU, peak RSS {peak:,.0f} MiB")
    write_json(args.out, {"questions": questions, "llms": LLMS, "rows": found.rows, "tokens": args.tokens,
                          "file_bytes": size, "generate_s": made, "read_s": wall, "read_cpu_s": cpu, "rows_per_s": rate,
                          "peak_rss_mib": peak, "valid": valid, "full_size_extrapolated_s": full,
                          "load_average": os.getloadavg()[0], "cpus": os.cpu_count(),
                          "machine": platform.platform(), **embedded})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
