"""`engine rerank train`: fine-tune a cross-encoder on `query,document` pairs.

Each fitted query is trained against its document and `negatives` others of the pairs file (half the BM25
hardest over the fitted documents, half random, redrawn every epoch) with a listwise loss (softmax over the
group, the document first). A slice of the pairs, split by document, is held out and never fitted: after every
epoch its queries rank their document among 20 candidates (fixed BM25-hard + random), and the epoch with the
best held-out MRR is what is written. Starts from a local cross-encoder folder, any Hugging Face model, or the
installed MiniLM (`all-MiniLM-L6-v2`: a bare BERT encoder, so a fresh one-label head is added).
"""
from __future__ import annotations

import copy
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from engine.errors import EngineError, opt
from engine.io.options import SEED, Float, Int

EVAL_CANDIDATES = 20   # a held-out query's document among this many
PATIENCE = 2           # epochs without a better held-out MRR before stopping
REPORT_FILE = "rerank-train.json"


RANGES = {"holdout": Float(0.05, 0.5), "epochs": Int(1, 100_000), "seed": SEED, "batch_size": Int(1, 1024),
          "lr": Float(0, 0.01, open_lo=True), "head_lr": Float(0, 0.1, open_lo=True), "negatives": Int(1, 63),
          "max_length": Int(8, 8192)}
"""Each `TrainOptions` value's range: `engine rerank train`'s flags declare these too (queries per step: no
"auto", a fit, not an encode)."""


@dataclass(frozen=True)
class TrainOptions:
    holdout: float = 0.2      # share of the documents (with their pairs) held out for early stopping
    epochs: int = 8           # most passes; early stopping (PATIENCE) usually ends it sooner
    seed: int = 0
    batch_size: int = 8       # queries per step, each with its document and its negatives
    lr: float = 1e-4          # the encoder's (and a trained head's) AdamW learning rate
    head_lr: float = 1e-3     # a freshly initialised head's: from ~0 it must move far in few steps
    # lr, head_lr and epochs were chosen on a planted pairs file and coco-mini's joined-caption documents, never on
    # the reported benchmark (benchmarks/rerank_train_defaults.py): at lr 2e-5 a fresh head stayed near chance
    negatives: int = 3        # other documents per query per step
    max_length: int = 256     # tokens of query + document

    def check(self) -> "TrainOptions":
        """Each value within the range `engine rerank train` declares for it (one line naming the option)."""
        for name, value in asdict(self).items():
            RANGES[name].check(name, value)
        return self


@dataclass(frozen=True)
class PairSplit:
    """Queries → their documents, fitted and held out (no held-out document or query is ever fitted)."""
    docs: list[str]                      # every distinct document of the pairs file
    fit: dict[str, list[int]]            # query → positions in `docs`
    held: dict[str, list[int]]
    fit_docs: list[int]                  # documents the fitted queries may draw negatives from


def read_text_pairs(path: str | Path, holdout: float, seed: int) -> PairSplit:
    """The pairs of a `query,document` CSV, split by document; bad input is one line naming the file."""
    from engine.core.ranking.adapters.fit import split_groups
    from engine.core.ranking.adapters.pairs import read_pairs
    pairs = read_pairs(path)
    if pairs.kind != "text":
        raise EngineError(f"{pairs.path}: a cross-encoder trains on query,document pairs (two texts); this file "
                          "has text,image columns (use `engine adapt` for caption–image pairs)")
    docs = sorted(set(pairs.right))
    row = {d: n for n, d in enumerate(docs)}
    docs = cut_long(docs, pairs.path)
    fit_rows, held_rows = split_groups(pairs.right, holdout, seed)
    held: dict[str, list[int]] = {}
    for i in held_rows:
        held.setdefault(pairs.left[i], []).append(row[pairs.right[i]])
    fit: dict[str, list[int]] = {}
    for i in fit_rows:
        if pairs.left[i] not in held:
            fit.setdefault(pairs.left[i], []).append(row[pairs.right[i]])
    fit_docs = sorted({d for ds in fit.values() for d in ds})
    if len(fit) < 2 or len(fit_docs) < 2:
        raise EngineError(f"{pairs.path}: {len(fit)} queries left to fit after holding out {opt('holdout')} "
                          f"{holdout}; give more pairs (at least 2 queries on 2 documents besides the held-out)")
    return PairSplit(docs, fit, held, fit_docs)


def cut_long(texts: list[str], origin: object) -> list[str]:
    """Documents cut at `max_query_chars` (a word boundary), with one warning: the model reads its first
    `--max-length` tokens anyway, and a tokenizer given a 10 MB text spends minutes on words it then drops."""
    from engine.io.limits import truncate_query
    out = [truncate_query(t) for t in texts]
    cut = sum(a is not b for a, b in zip(texts, out))
    if cut:
        from engine.progress import warn
        warn(f"{origin}: {cut} document(s) longer than the max_query_chars limit were cut there (the model reads "
             "only their first tokens)")
    return out


def resolve_base(base: str) -> str:
    """The folder or hub id to load: `all-MiniLM-L6-v2` is the installed MiniLM; a path must be a model folder."""
    from engine.core.encoders.sbert import resolve_model_path
    path = resolve_model_path(base.strip())
    p = Path(path).expanduser()
    looks_local = p.exists() or path.startswith((".", "/", "~")) or path.count("/") > 1
    if looks_local:
        if not (p / "config.json").is_file():
            raise EngineError(f"{opt('base')} {base}: not a model folder (no config.json there); give a "
                              "cross-encoder folder, a Hugging Face id, or all-MiniLM-L6-v2 (installed)")
        return str(p.resolve())
    return path


def check_out(out: Path, force: bool) -> None:
    """Refuse to replace a non-empty folder without --force (checked before any model loads)."""
    if out.is_dir() and any(out.iterdir()) and not force:
        raise EngineError(f"{out} is not empty; give {opt('force')} to replace it with the trained model")


class Negatives:
    """Per fitted query: BM25-hard documents among the fitted ones (fixed) plus random ones (redrawn)."""

    def __init__(self, split: PairSplit, n: int, rng: np.random.Generator) -> None:
        from engine.core.storage.index.bm25 import BM25Index
        self.split, self.n, self.rng = split, n, rng
        pool = split.fit_docs
        index = BM25Index.build([str(d) for d in pool], [split.docs[d] for d in pool])
        self.hard: dict[str, list[int]] = {}
        for q, pos in split.fit.items():
            scores = index.scores(q)
            order = [int(i) for i in np.argsort(-scores, kind="stable") if scores[i] > 0]  # a shared word
            self.hard[q] = [pool[i] for i in order if pool[i] not in pos][: (n + 1) // 2]

    def draw(self, query: str) -> list[int]:
        """The hard ones plus random others (rejection sampling: no pass over every document per query)."""
        pool = self.split.fit_docs
        out = list(self.hard[query])
        taken = set(out) | set(self.split.fit[query])
        need = min(self.n - len(out), len(pool) - len(taken))
        while need > 0:
            d = pool[int(self.rng.integers(len(pool)))]
            if d not in taken:
                taken.add(d)
                out.append(d)
                need -= 1
        return out


def held_out_candidates(split: PairSplit, seed: int) -> list[tuple[str, list[int], set[int], np.ndarray]]:
    """(query, candidate documents, its documents, the candidates' BM25 scores) per held-out query: its
    documents plus BM25-hard and random others from the whole file, up to EVAL_CANDIDATES, fixed for every
    epoch. The BM25 scores are the first stage the trained model must beat on the same candidates."""
    from engine.core.storage.index.bm25 import BM25Index
    rng = np.random.default_rng(seed + 1)
    index = BM25Index.build([str(d) for d in range(len(split.docs))], split.docs)
    out = []
    for q, pos in split.held.items():
        scores = index.scores(q)
        order = [int(i) for i in np.argsort(-scores, kind="stable") if int(i) not in pos]
        hard = [d for d in order if scores[d] > 0][: EVAL_CANDIDATES // 2]
        rest = [d for d in order if d not in hard]
        extra = max(0, min(EVAL_CANDIDATES - len(pos) - len(hard), len(rest)))
        rand = [rest[int(i)] for i in rng.choice(len(rest), extra, replace=False)] if extra else []
        cand = sorted(set(pos)) + hard + rand
        out.append((q, cand, set(pos), np.asarray([scores[d] for d in cand], dtype=np.float64)))
    return out


def reciprocal_rank(scores: np.ndarray, relevant: np.ndarray) -> float:
    """1 / rank of the first relevant candidate, its expectation over a random order of tied scores (so a
    model, or BM25, that ties its document with others gains nothing from the candidates' listing order)."""
    top = scores[relevant].max()
    above = int((scores > top).sum())
    tied_rel, tied = int((scores[relevant] == top).sum()), int((scores == top).sum())
    # the first of `tied_rel` relevant among `tied` shuffled places: P(first at j) = C(tied-j, tied_rel-1)/C(tied, tied_rel)
    from math import comb
    total = comb(tied, tied_rel)
    return sum(comb(tied - j, tied_rel - 1) / total / (above + j) for j in range(1, tied - tied_rel + 2))


def first_stage_mrr(candidates) -> float:
    """The held-out MRR of the BM25 order of the same candidates: the baseline a reranker must beat."""
    rr = [reciprocal_rank(bm25, np.asarray([d in pos for d in cand])) for _q, cand, pos, bm25 in candidates]
    return float(np.mean(rr)) if rr else 0.0


def held_out_mrr(model, candidates, docs: list[str], batch_size: int) -> float:
    """Mean reciprocal rank of each held-out query's first document among its candidates (CrossEncoder.predict)."""
    from engine.core.ranking.rerankers.cross import relevance
    rr = []
    for q, cand, pos, _bm25 in candidates:
        scores = relevance(model, [(q, docs[d]) for d in cand], batch_size * 4)
        rr.append(reciprocal_rank(scores, np.asarray([d in pos for d in cand])))
    return float(np.mean(rr)) if rr else 0.0


def load_base(base: str, device: str, max_length: int):
    """A CrossEncoder with one output; a bare encoder (the MiniLM) gets a fresh classification head."""
    from engine.core.encoders import torchvision_patch  # noqa: F401  (before sentence-transformers)
    from sentence_transformers import CrossEncoder
    from engine.core.encoders.hub import cache_only, out_of_reach, unreachable_hint
    if why := out_of_reach(base):
        raise EngineError(f"{opt('base')} {base} could not be loaded as a cross-encoder ({why})")
    try:
        model = CrossEncoder(base, num_labels=1, device=device, max_length=max_length,
                             local_files_only=cache_only(base) or None)
    except Exception as exc:
        why = unreachable_hint(base) or f"{type(exc).__name__}: {str(exc)[:200]}"
        raise EngineError(f"{opt('base')} {base} could not be loaded as a cross-encoder ({why})") from None
    from engine.core.ranking.rerankers.cross import cap_positions
    cap_positions(model)
    if getattr(model.model.config, "num_labels", 1) != 1:
        raise EngineError(f"{opt('base')} {base} has {model.model.config.num_labels} outputs; give a "
                          "one-output cross-encoder or a bare encoder")
    return model


def head_is_fresh(net) -> bool:
    """True when the base was a bare encoder (its saved architecture has no classification head), so the head
    the CrossEncoder added is random."""
    return not any(a.endswith("ForSequenceClassification") for a in (net.config.architectures or []))


def param_groups(net, options: TrainOptions) -> tuple[list[dict], bool]:
    """AdamW groups: the encoder at `lr`; a fresh head (the parameters outside the base model) at `head_lr`,
    a trained head at `lr` like the rest. Also whether the head was fresh."""
    fresh = head_is_fresh(net)
    prefix = f"{net.base_model_prefix}."
    head = [p for n, p in net.named_parameters() if not n.startswith(prefix)]
    body = [p for n, p in net.named_parameters() if n.startswith(prefix)]
    if not fresh or not head:
        return [{"params": body + head, "lr": options.lr}], fresh
    return [{"params": body, "lr": options.lr}, {"params": head, "lr": options.head_lr}], fresh


def train_epoch(model, split: PairSplit, negatives: Negatives, options: TrainOptions, optimizer, scheduler,
                rng: np.random.Generator) -> float:
    """One pass over the fitted queries in a random order; the mean listwise loss."""
    import torch
    queries = list(split.fit)
    order = rng.permutation(len(queries))
    net, tok = model.model, model.tokenizer
    net.train()
    losses = []
    for start in range(0, len(order), options.batch_size):
        batch = [queries[int(i)] for i in order[start:start + options.batch_size]]
        firsts, seconds, sizes = [], [], []
        for q in batch:
            pos = split.fit[q][int(rng.integers(len(split.fit[q])))]
            cand = [pos] + negatives.draw(q)
            firsts += [q] * len(cand)
            seconds += [split.docs[d] for d in cand]
            sizes.append(len(cand))
        feats = tok(firsts, seconds, padding=True, truncation="longest_first",
                    max_length=min(options.max_length, model.max_length or options.max_length),
                    return_tensors="pt").to(net.device)
        logits = net(**feats).logits[:, 0]
        width = max(sizes)
        table = torch.full((len(batch), width), float("-inf"), device=logits.device)
        at = 0
        for r, n in enumerate(sizes):
            table[r, :n] = logits[at:at + n]
            at += n
        loss = torch.nn.functional.cross_entropy(table, torch.zeros(len(batch), dtype=torch.long,
                                                                     device=logits.device))
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        losses.append(float(loss.item()))
    net.eval()
    return float(np.mean(losses)) if losses else 0.0


def train_cross_encoder(pairs: str | Path, base: str, out: str | Path, options: TrainOptions = TrainOptions(),
                        force: bool = False, say=None) -> dict:
    """Fit, early-stop on the held-out pairs, write the best epoch's model to `out` (atomically) with a report."""
    import torch

    from engine.core.encoders.device import resolve_device
    from engine.io.atomic import atomic_dir, write_json
    options.check()
    out = Path(out)
    check_out(out, force)
    base_path = resolve_base(base)
    split = read_text_pairs(pairs, options.holdout, options.seed)  # all input checked before the model loads
    say = say or (lambda _msg: None)
    torch.manual_seed(options.seed)
    rng = np.random.default_rng(options.seed)
    negatives = Negatives(split, options.negatives, rng)
    candidates = held_out_candidates(split, options.seed)
    first = first_stage_mrr(candidates)
    model = load_base(base_path, resolve_device(), options.max_length)
    steps = options.epochs * -(-len(split.fit) // options.batch_size)
    groups, fresh = param_groups(model.model, options)
    optimizer = torch.optim.AdamW(groups, weight_decay=0.01)
    warm = max(1, steps // 10)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / warm) * max(0.0, (steps - s) / max(1, steps - warm)))
    best = before = held_out_mrr(model, candidates, split.docs, options.batch_size)
    best_state, best_epoch, history = copy.deepcopy(model.model.state_dict()), 0, []
    say(f"held-out MRR before training {before:.3f}, BM25's {first:.3f} ({len(candidates)} queries, "
        f"{EVAL_CANDIDATES} candidates each{'; a fresh head' if fresh else ''})")
    for epoch in range(1, options.epochs + 1):
        loss = train_epoch(model, split, negatives, options, optimizer, scheduler, rng)
        mrr = held_out_mrr(model, candidates, split.docs, options.batch_size)
        history.append({"epoch": epoch, "loss": loss, "held_out_mrr": mrr})
        say(f"epoch {epoch}: loss {loss:.4f}, held-out MRR {mrr:.3f}")
        if mrr > best + 1e-9:
            best, best_epoch = mrr, epoch
            best_state = copy.deepcopy(model.model.state_dict())
        elif epoch - best_epoch >= PATIENCE:
            break
    model.model.load_state_dict(best_state)
    report = {"base": base, "pairs": str(pairs), "queries_fitted": len(split.fit), "queries_held_out":
              len(split.held), "documents": len(split.docs), "held_out_mrr_before": before,
              "held_out_mrr_after": best, "held_out_mrr_first_stage": first, "beats_first_stage": best > first,
              "fresh_head": fresh, "best_epoch": best_epoch, "history": history, **asdict(options)}
    with atomic_dir(out) as tmp:
        model.save(str(tmp))
        write_json(tmp / REPORT_FILE, report)
    return report


def first_stage_verdict(report: dict, out: str | Path, say, warn) -> None:
    """A warning when the written model does not rank the held-out candidates above BM25 does, then the last
    line: held-out MRR before → after and BM25's on the same candidates."""
    after, first = report["held_out_mrr_after"], report["held_out_mrr_first_stage"]
    if not report["beats_first_stage"]:
        warn(f"the trained model's held-out MRR {after:.3f} is not above BM25's {first:.3f} on the same "
             f"candidates: reranking a BM25 run with cross:{out} would likely make it worse (more pairs, more "
             f"{opt('epochs')}, or a trained cross-encoder as {opt('base')})")
    say(f"trained on {report['queries_fitted']} queries ({report['queries_held_out']} held out): held-out MRR "
        f"{report['held_out_mrr_before']:.3f} → {after:.3f} (epoch {report['best_epoch']}), BM25 {first:.3f}; "
        f"use --rerank cross:{out}")
