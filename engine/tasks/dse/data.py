"""DSEBench's own files, read in their formats unchanged: datasets.json, queries.tsv, cases.tsv, the judgments
(gain query_rel × target_sim), the 5-fold splits and case splits, baseline runs `{case_id: {dataset_id: score}}`;
and the converters `engine convert dsebench-qrels|dsebench-run`."""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from engine.errors import EngineError, opt, preview, where
from engine.eval.metrics import trec_order
from engine.io.runs import Qrels, Run, load_run, parse_grade, write_qrels, write_run
from engine.io.ids import read_id_list, trec_safe_ids
from engine.io.tables import id_text, read_json, read_queries, read_text_lines
from engine.progress import warn

FIELDS = ("title", "description", "tags", "author", "summary")


@dataclass
class Case:
    """One line group of cases.tsv: a query plus the example datasets it comes with."""
    case_id: str
    query_id: str
    examples: list[str]
    line: int


def _field_text(value: object, origin: str = "") -> str:
    """A record field as one text: lists joined with "; ", None and blanks as "". An object or a boolean is an
    error naming `origin` (the record and field), not its Python spelling embedded as text."""
    if value is None:
        return ""
    if isinstance(value, list):
        return "; ".join(t for t in (_field_text(v, origin) for v in value) if t)
    if isinstance(value, (dict, bool)):
        raise EngineError(f"{origin}: {type(value).__name__} value {str(value)[:40]!r} is not text")
    return str(value).strip()


def read_datasets(path: str | os.PathLike) -> list[dict[str, str]]:
    """Records `{id, title, description, tags, author, summary}` with every field as text.

    Faults are warned about (grouped, naming record numbers and ids) and the load goes on: records
    without an id and repeated ids (the first is kept) are skipped; missing or empty fields become
    empty text; tags given as one string are split on commas, semicolons or bars.
    """
    path = Path(path)
    data = read_json(path, "file; give DSEBench's datasets.json")
    if isinstance(data, dict) and all(isinstance(v, dict) for v in data.values()):
        data = [{"id": k, **v} for k, v in data.items()]
    if not isinstance(data, list):
        raise EngineError(f"{path}: expected a JSON list of dataset records {{id, title, description, tags, "
                          "author, summary}}")
    records: list[dict[str, str]] = []
    seen: dict[str, int] = {}
    no_id, not_obj, dups, tag_strings = [], [], [], []
    empty: dict[str, list[str]] = {f: [] for f in FIELDS}
    for n, obj in enumerate(data, 1):
        if not isinstance(obj, dict):
            not_obj.append(f"#{n}")
            continue
        rid = _field_text(obj.get("id", obj.get("dataset_id")), f"{path}: record {n}: id")
        if not rid:
            no_id.append(f"#{n}")
            continue
        if rid in seen:
            dups.append(f"{rid} (#{n}, first #{seen[rid]})")
            continue
        seen[rid] = n
        rec = {"id": rid}
        for f in FIELDS:
            value = obj.get(f)
            if f == "tags" and isinstance(value, str) and value.strip():
                tag_strings.append(rid)
                value = [t for t in re.split(r"[,;|]", value) if t.strip()]
            rec[f] = _field_text(value, f"{path}: record {n} ({rid}): {f}")
            if not rec[f]:
                empty[f].append(rid)
        records.append(rec)
    if not_obj:
        warn(f"{path}: {len(not_obj)} entr{'y is' if len(not_obj) == 1 else 'ies are'} not a JSON object, "
             f"skipped: record {preview(not_obj)}")
    if no_id:
        warn(f"{path}: {len(no_id)} record(s) without an id, skipped: record {preview(no_id)}")
    if dups:
        warn(f"{path}: {len(dups)} duplicate id(s), the first record of each is kept: {preview(dups)}")
    if tag_strings:
        warn(f"{path}: {len(tag_strings)} record(s) give tags as a string instead of a list (split on , ; |): "
             f"{preview(tag_strings)}")
    for f, ids in empty.items():
        if ids:
            warn(f"{path}: {len(ids)} record(s) have a missing or empty {f!r} (scored as empty): {preview(ids)}")
    if not records:
        raise EngineError(f"{path}: no usable dataset records (each needs an `id`)")
    return records


def record_text(rec: Mapping[str, str]) -> str:
    """The whole record as one text (embedded as `all`, and BM25's document)."""
    return "\n".join(rec[f] for f in FIELDS if rec.get(f))


def read_dse_queries(path: str | os.PathLike) -> dict[str, str]:
    """DSEBench `queries.tsv` (`query_id<TAB>text`, no header) → {query_id: text}."""
    return dict(read_queries(path))


def read_cases(path: str | os.PathLike) -> dict[str, Case]:
    """DSEBench `cases.tsv` (`case_id<TAB>query_id<TAB>example_dataset_id`, no header).

    A case with several example datasets repeats its case_id on several lines (or lists more ids in
    further columns); a case naming two different queries is an error.
    """
    path = Path(path)
    cases: dict[str, Case] = {}
    for n, text in enumerate(read_text_lines(path), 1):
        if not text.strip():
            continue
        parts = [p.strip() for p in text.split("\t")]
        if len(parts) < 3 or not all(parts[:3]):
            raise EngineError(f"{where(path, n)}: expected `case_id<TAB>query_id<TAB>example_dataset_id`, "
                              f"found {len(parts)} field(s)")
        if n == 1 and parts[0].lower() in ("case_id", "case") and parts[1].lower() in ("query_id", "query"):
            continue  # a header some tools add
        case_id, query_id, examples = parts[0], parts[1], [p for p in parts[2:] if p]
        case = cases.get(case_id)
        if case is None:
            cases[case_id] = Case(case_id, query_id, examples, n)
        elif case.query_id != query_id:
            raise EngineError(f"{where(path, n)}: case {case_id!r} has query {query_id!r} here but "
                              f"{case.query_id!r} on line {case.line}")
        else:
            case.examples += [e for e in examples if e not in case.examples]
    if not cases:
        raise EngineError(f"{path}: no cases")
    return cases


# ---------------------------------------------------------------- judgments, folds, splits

DSEBENCH_KEYS = ("case_id", "candidate_dataset_id", "query_rel", "target_sim")


MAX_DSE_GRADE = 2
"""DSEBench grades query_rel and target_sim 0, 1 or 2 (docs/dse.md)."""


def _judged_id(value: object, path: str | os.PathLike, record: int, key: str) -> str:
    """A judgment's case or candidate id: a non-empty string or integer a TREC file can hold."""
    text = id_text(value, f"{path}: record {record}", None, key)
    if not text:
        raise EngineError(f"{path}: record {record}: {key} is {'null' if value is None else 'empty'}")
    trec_safe_ids([text], "strict", f"{path}: record {record} ({key})", fixable=False)
    return text


def read_dsebench_judgments(path: str | os.PathLike) -> Qrels:
    """case_id → {candidate_dataset_id: query_rel × target_sim} from `human_annotated_judgments.json`."""
    data = read_json(path)
    if not isinstance(data, list):
        raise EngineError(f"{path}: expected a JSON list of judgment records")
    qrels: Qrels = {}
    for i, rec in enumerate(data, 1):
        if not isinstance(rec, dict):
            raise EngineError(f"{path}: record {i} is not a JSON object")
        missing = [k for k in DSEBENCH_KEYS if k not in rec]
        if missing:
            raise EngineError(f"{path}: record {i} lacks {', '.join(missing)}")
        case, cand = (_judged_id(rec[k], path, i, k) for k in ("case_id", "candidate_dataset_id"))
        q_rel, t_sim = parse_grade(rec["query_rel"]), parse_grade(rec["target_sim"])
        if q_rel is None or t_sim is None or not 0 <= q_rel <= MAX_DSE_GRADE or not 0 <= t_sim <= MAX_DSE_GRADE:
            raise EngineError(f"{path}: record {i} (case {case}): query_rel {rec['query_rel']!r} and target_sim "
                              f"{rec['target_sim']!r} must be whole numbers from 0 to {MAX_DSE_GRADE}")
        judged = qrels.setdefault(case, {})
        if cand in judged:
            raise EngineError(f"{path}: record {i}: case {case} judges candidate {cand} twice")
        judged[cand] = q_rel * t_sim
    if not qrels:
        raise EngineError(f"{path}: no judgments")
    return qrels


@dataclass
class Fold:
    """One folder of the 5-fold split: judged cases to tune on (train, valid) and to score on (test)."""
    name: str
    train: Qrels
    valid: Qrels
    test: Qrels


def read_folds(folder: str | os.PathLike) -> list[Fold]:
    """DSEBench `Data/Splits/5-Fold_split`: `fold_k/{train,valid,test}.json`, each a judgments list."""
    folder = Path(folder)
    if not folder.is_dir():
        raise EngineError(f"{folder}: no such folder; give DSEBench's Data/Splits/5-Fold_split")
    dirs = sorted((d for d in folder.iterdir() if d.is_dir() and (d / "test.json").exists()),
                  key=lambda d: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", d.name)])
    if not dirs:
        raise EngineError(f"{folder}: no fold_*/test.json inside; give DSEBench's Data/Splits/5-Fold_split")
    folds = []
    for d in dirs:
        parts = {}
        for part in ("train", "valid", "test"):
            p = d / f"{part}.json"
            parts[part] = read_dsebench_judgments(p) if p.exists() else {}
        overlap = set(parts["train"]) & set(parts["test"])
        if overlap:
            raise EngineError(f"{d}: case(s) {preview(sorted(overlap))} are in both train.json and test.json")
        folds.append(Fold(d.name, parts["train"], parts["valid"], parts["test"]))
    return folds


def select_cases(cases: Mapping[str, Case], split: str) -> list[str]:
    """`test`: DSEBench's numbered test cases (ids all digits); `train`: the others (gen_*, l1_*);
    `all`; or a file: a DSEBench split JSON (judgments list) or one case id per line."""
    if split == "all":
        return list(cases)
    if split == "test":
        return [c for c in cases if c.isdigit()]
    if split == "train":
        return [c for c in cases if not c.isdigit()]
    path = Path(split)
    if not path.exists():
        raise EngineError(f"{opt('split')} {split!r}: use test, train, all, or a split file (JSON judgments or ids)")
    wanted = list(read_dsebench_judgments(path) if path.suffix.lower() == ".json" else read_id_list(path))
    missing = [c for c in wanted if c not in cases]
    if missing:
        warn(f"{split}: {len(missing)} case id(s) are not in the cases file and are skipped: {preview(missing)}")
    return [c for c in wanted if c in cases]


# ---------------------------------------------------------------- runs and converters

def load_dse_run(path: str | os.PathLike) -> Run:
    """A TREC run, or a DSEBench baseline results file (`Baselines/*/*.json`: {case_id: {dataset_id: score}})."""
    if Path(path).suffix.lower() == ".json":
        return read_json_run(path)
    return load_run(path)


def read_json_run(path: str | os.PathLike) -> Run:
    """A `{qid: {docid: score}}` JSON run (DSEBench's baseline format), scores checked to be finite."""
    data = read_json(path)
    if not isinstance(data, dict) or not data:
        raise EngineError(f"{path}: expected a non-empty JSON object {{case_id: {{dataset_id: score}}}}")
    run: Run = {}
    for qid, docs in data.items():
        if not isinstance(docs, dict):
            raise EngineError(f"{path}: query {qid!r}: expected an object {{dataset_id: score}}")
        scores: dict[str, float] = {}
        for doc, score in docs.items():
            if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
                raise EngineError(f"{path}: query {qid!r}, doc {doc!r}: score {score!r} is not a finite number")
            scores[str(doc)] = float(score)
        run[str(qid)] = scores
    return run


def _run_id_from(path: str | os.PathLike) -> str:
    """The run id a converted file gets by default: its file name without extension, no white space."""
    return re.sub(r"\s+", "_", Path(path).stem) or "run"


def dsebench_run(run_json: str | os.PathLike, out: str | os.PathLike, run_id: str | None = None) -> int:
    """`engine convert dsebench-run`: a JSON run to a TREC run. Docs go in trec_eval's order of the
    original scores (ties by docid descending), so the TREC file scores exactly as the JSON would."""
    run = read_json_run(run_json)
    rankings = {q: [(d, scores[d]) for d in trec_order(scores)] for q, scores in run.items()}
    return write_run(out, rankings, run_id or _run_id_from(run_json))


def dsebench_qrels(judgments: str | os.PathLike, out: str | os.PathLike) -> int:
    """`engine convert dsebench-qrels`: write the judgments as TREC qrels; returns the line count."""
    return write_qrels(out, read_dsebench_judgments(judgments))
