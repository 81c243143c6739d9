"""BM25 text analysis before and after: dense, BM25 and hybrid (weighted, rrf) runs of collections whose BM25 role
is built with the analysis it had before (English stop words, no stemming), with `none` (words as written) and
with `english` (stop words + Snowball stemming, the default), scored side by side by `engine compare`.

Sets: the project's planted rare-token / paraphrase set (tests/fixtures/planted.py); an inflection set built here
(each query names its document's topic in another inflection, "floods" for "flooding", beside words that many
other documents share, as a user types); COCO-mini captions when ../shared/data is there (one caption of each
image indexed, another as the query: real paraphrases).

    nice python benchmarks/bm25_analysis.py [--work /tmp/engine-bm25a]   # table + benchmarks/results/bm25_analysis.json
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests"))
from hybrid_filters import ENV, coco_set  # noqa: E402

# (the document's form, the query's form): one Snowball stem, different words as written
INFLECTIONS = [("flooding", "floods"), ("bridge", "bridges"), ("elections", "election"), ("vaccinated", "vaccines"),
               ("harvested", "harvest"), ("strikes", "striking"), ("wildfires", "wildfire"), ("protesters", "protest"),
               ("earthquakes", "earthquake"), ("recycling", "recycled"), ("tunnels", "tunnel"), ("droughts", "drought"),
               ("banking", "banks"), ("refugees", "refugee"), ("landslide", "landslides"), ("pensions", "pension"),
               ("mining", "mines"), ("vaccines", "vaccination"), ("railways", "railway"), ("hospitals", "hospital"),
               ("fishing", "fishermen"), ("heatwaves", "heatwave"), ("cyclists", "cycling"), ("libraries", "library")]
PLACES = ["northern", "southern", "eastern", "western", "central", "harbour", "airport", "river"]
FILLER = ["The {p} district office published its weekly schedule and the usual notices.",
          "Residents of the {p} district asked the office about parking and opening hours.",
          "The {p} district council met on Tuesday to review the weekly agenda."]
BEFORE = "stopwords-en"  # the analysis every BM25 role had before analyzers had names


def inflection_set(folder: Path, n_filler: int = 150, seed: int = 0) -> tuple[Path, Path, Path]:
    rng = random.Random(seed)
    docs, queries, qrels = ["id\ttext"], [], []
    for n, (doc_form, query_form) in enumerate(INFLECTIONS):
        docs.append(f"t{n}\tA short note on {doc_form}, filed by the {rng.choice(PLACES)} desk.")
        queries.append(f"i{n}\t{query_form} in the {rng.choice(PLACES)} district")
        qrels.append(f"i{n} 0 t{n} 1")
    for n in range(n_filler):
        docs.append(f"f{n}\t" + rng.choice(FILLER).format(p=rng.choice(PLACES)))
    folder.mkdir(parents=True, exist_ok=True)
    for name, lines in (("docs.tsv", docs), ("queries.tsv", queries), ("qrels.txt", qrels)):
        (folder / name).write_text("\n".join(lines) + "\n")
    return folder / "docs.tsv", folder / "queries.tsv", folder / "qrels.txt"


def planted_set(folder: Path) -> tuple[Path, Path, Path]:
    from fixtures.planted import write_planted
    return write_planted(folder)


def runs_for(name: str, docs: Path, queries: Path, work: Path) -> dict[str, Path]:
    """One collection per analysis (the legacy one registered for this process only), a run per mode."""
    import engine.core.storage.index.bm25 as bm25
    from engine.core.collection import Collection
    from engine.io.runs import write_run
    from engine.io.tables import read_queries
    bm25.ANALYZERS.setdefault(BEFORE, bm25.Analyzer(BEFORE, "en", None))
    qs = list(read_queries(queries))
    runs: dict[str, Path] = {}
    for analysis in (BEFORE, "none", "english"):
        col = Collection.build(f"{name}-{analysis}", texts=docs, root=work / "idx", model="minilm", bm25=True,
                               bm25_analyzer=analysis, force=True)
        modes = [("dense", {"mode": "dense"})] if analysis == BEFORE else []
        modes += [("bm25", {"mode": "bm25"}), ("hybrid", {"mode": "hybrid"}),
                  ("hybrid_rrf", {"mode": "hybrid", "fusion": "rrf"})]
        for label, kw in modes:
            hits = col.search_many(texts=[t for _, t in qs], k=100, **kw)
            tag = label if label == "dense" else f"{label}.{'before' if analysis == BEFORE else analysis}"
            runs[tag] = work / f"{name}.{tag}.run"
            write_run(runs[tag], {q: [(h.id, h.score) for h in hs] for (q, _), hs in zip(qs, hits)}, tag)
    return runs


def compare(qrels: Path, runs: dict[str, Path]) -> tuple[str, dict]:
    cmd = [sys.executable, "-m", "engine.cli", "compare", str(qrels), *map(str, runs.values()), "-m", "ndcg@10,mrr"]
    table = subprocess.run(cmd, env=ENV, capture_output=True, text=True, check=True).stdout
    data = json.loads(subprocess.run(cmd + ["--format", "json"], env=ENV, capture_output=True, text=True,
                                     check=True).stdout)
    return table, data


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/engine-bm25a"))
    args = ap.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    from engine.progress import set_quiet
    set_quiet(True)
    sets = [("inflection", inflection_set(args.work / "inflection")), ("planted", planted_set(args.work / "planted"))]
    coco = coco_set(args.work / "coco")
    if coco is not None:
        sets.append(("coco", coco))
    out = {}
    for name, (docs, queries, qrels) in sets:
        table, data = compare(qrels, runs_for(name, docs, queries, args.work))
        print(f"\n== {name} ==\n{table}")
        out[name] = data
    dest = REPO / "benchmarks" / "results" / "bm25_analysis.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(out, indent=1))
    print(f"wrote {dest}")


if __name__ == "__main__":
    main()
