"""The multi-vector index of a text collection, or of an image collection's page images (role `multivector`,
`engine build --multivector multivector:NAME_OR_DIR`): every row's token vectors for exact MaxSim, and one
fixed-dimensional encoding per row (MUVERA: Dhulipala et al., 2024) whose inner product with a query's
approximates MaxSim, so candidates come from one matrix product instead of a scan of every token.

Folder layout, plain numpy and JSON: `tokens.npy` (float16, or int8 with `scales.npy`: one float32 scale per
token vector, `--multivector-store int8`), `offsets.npy` (int64, where each row's tokens start, plus their end),
`fde.npy` (float32, rows × R·2^k·d_proj), `multivector.json` (the model spec, the FDE's settings and seed,
the rows covered and a hash of their ids: an index that no longer matches its collection is refused), and the
token-level inverted file (PLAID/ColBERTv2's candidate generation): `centroids.npy` (float32, C × dim: spherical
k-means of the token vectors), `codes.npy` (each token's centroid), `lists_offsets.npy` and `lists_rows.npy`
(for each centroid, the rows owning a token there). Indexes written before the inverted file existed have no
`ivf` entry in their JSON and keep opening; their stage takes candidates by token scan.

The encoding, per repetition r: each token vector falls in one of 2^k buckets by the signs of k random
Gaussian projections (SimHash) and is projected to d_proj dimensions by a random ±1 matrix; a document's
bucket holds the mean of its tokens there (an empty bucket takes the token nearest to it in Hamming distance),
a query's the sum. Concatenated over R repetitions.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from engine.core.storage.index.sparse import ids_hash
from engine.core.storage.store.generations import FileWriter
from engine.errors import EngineError
from engine.io.options import Int, Range
from engine.io.ranking import top_k

ROLE = "multivector"
META_FILE = "multivector.json"
STORES = ("float16", "int8")
CENTROIDS = Range(1, 1 << 20, integer=True, zero=True)
"""Centroids of the token-level inverted file (`--multivector-centroids`; 0 is "by size": `auto_centroids`)."""
NPROBE = Int(1, 4096)
"""Centroids each query token probes (`multivector(…, nprobe=)`)."""
DEFAULT_NPROBE = 8      # benchmarks/multivector.py: 8 probes and 1024 rows scored exactly reach 0.98 recall@10
DEFAULT_EXACT = 1024    # at 100,000 documents (docs/models.md)
SAMPLE_PER_CENTROID = 32


@dataclass(frozen=True)
class FdeSettings:
    reps: int = 10        # R: independent repetitions (benchmarks/multivector.py measured the choice)
    bits: int = 3         # k: SimHash bits (2^k buckets)
    proj: int = 8         # d_proj: projected dimensions per bucket
    seed: int = 0

    @property
    def dim(self) -> int:
        return self.reps * (1 << self.bits) * self.proj

    def matrices(self, dim: int) -> tuple[np.ndarray, np.ndarray]:
        """(SimHash planes R × dim × bits, projections R × dim × proj), drawn from the seed."""
        rng = np.random.default_rng(self.seed)
        planes = rng.standard_normal((self.reps, dim, self.bits)).astype(np.float32)
        signs = rng.choice(np.array([-1.0, 1.0], dtype=np.float32), size=(self.reps, dim, self.proj))
        return planes, (signs / np.sqrt(self.proj)).astype(np.float32)


def encode_fde(docs: Sequence[np.ndarray], settings: FdeSettings, query: bool) -> np.ndarray:
    """The fixed-dimensional encodings of token-vector sets (rows × settings.dim, float32), vectorized over a
    batch of sets per repetition."""
    n = len(docs)
    out = np.zeros((n, settings.dim), dtype=np.float32)
    if n == 0:
        return out
    dim = int(docs[0].shape[1])
    planes, projections = settings.matrices(dim)
    buckets = 1 << settings.bits
    lengths = np.array([len(d) for d in docs], dtype=np.int64)
    tokens = np.concatenate([np.asarray(d, dtype=np.float32) for d in docs])
    owner = np.repeat(np.arange(n), lengths)
    weights = 1 << np.arange(settings.bits)
    width = buckets * settings.proj
    for r in range(settings.reps):
        codes = ((tokens @ planes[r]) > 0).astype(np.int64) @ weights          # each token's bucket
        projected = tokens @ projections[r]                                   # tokens × proj
        cell = owner * buckets + codes
        sums = np.zeros((n * buckets, settings.proj), dtype=np.float32)
        np.add.at(sums, cell, projected)
        if not query:
            counts = np.bincount(cell, minlength=n * buckets).astype(np.float32)
            sums /= np.maximum(counts, 1.0)[:, None]
            empty = np.flatnonzero(counts == 0)
            if len(empty):
                sums[empty] = projected[_nearest_tokens(empty, codes, lengths, buckets)]
        out[:, r * width:(r + 1) * width] = sums.reshape(n, width)
    return out


def _nearest_tokens(empty: np.ndarray, codes: np.ndarray, lengths: np.ndarray, buckets: int) -> np.ndarray:
    """For each empty (set, bucket) cell, the set's token whose bucket is nearest in Hamming distance (first on
    ties): one segment minimum over (distance, position) keys, no loop over cells."""
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    owner = np.repeat(np.arange(len(lengths)), lengths)
    local = np.arange(len(codes), dtype=np.int64) - starts[owner]
    popcount = np.array([bin(i).count("1") for i in range(buckets)], dtype=np.int64)
    distance = popcount[codes[:, None] ^ np.arange(buckets)[None, :]]          # tokens × buckets
    span = int(lengths.max()) + 1
    keys = distance * span + local[:, None]
    nonempty = lengths > 0
    nearest = np.zeros((len(lengths), buckets), dtype=np.int64)
    nearest[nonempty] = np.minimum.reduceat(keys, starts[nonempty], axis=0) % span + starts[nonempty][:, None]
    doc, bucket = np.divmod(empty, buckets)
    return nearest[doc, bucket]


def auto_centroids(tokens: int) -> int:
    """ColBERTv2's rule scaled down to what spherical k-means trains on two cores: the power of two at or below
    4·√tokens (4,096 at 1.6 million token vectors), at most one centroid per token."""
    if tokens < 1:
        return 0
    return int(min(tokens, 1 << int(np.floor(np.log2(max(1.0, 4 * np.sqrt(tokens)))))))


def train_ivf(flat: np.ndarray, offsets: np.ndarray, centroids: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Spherical k-means of the token vectors (FAISS, on a sample of SAMPLE_PER_CENTROID tokens a centroid),
    every token assigned to its nearest centroid, and each centroid's list of the rows owning a token there."""
    import faiss
    n_rows, dim = len(offsets) - 1, flat.shape[1]
    c = min(int(centroids), len(flat))
    if c < 1:
        return {}
    km = faiss.Kmeans(dim, c, niter=10, seed=seed, spherical=True, max_points_per_centroid=SAMPLE_PER_CENTROID,
                      min_points_per_centroid=1, verbose=False)
    km.train(np.ascontiguousarray(flat, dtype=np.float32))
    codes = np.empty(len(flat), dtype=np.int32)
    for lo in range(0, len(flat), 1 << 18):
        codes[lo:lo + (1 << 18)] = km.index.search(np.ascontiguousarray(flat[lo:lo + (1 << 18)]), 1)[1][:, 0]
    owner = np.repeat(np.arange(n_rows, dtype=np.int64), np.diff(offsets))
    pairs = np.unique(codes.astype(np.int64) * max(1, n_rows) + owner)
    lists = pairs // max(1, n_rows)
    return {"centroids": np.asarray(km.centroids, dtype=np.float32), "codes": codes,
            "lists_offsets": np.searchsorted(lists, np.arange(c + 1)).astype(np.int64),
            "lists_rows": (pairs % max(1, n_rows)).astype(np.int32)}


IVF_ARRAYS = ("centroids", "codes", "lists_offsets", "lists_rows")


@dataclass
class MultiVectorIndex:
    tokens: np.ndarray
    offsets: np.ndarray
    fde: np.ndarray
    meta: dict
    scales: np.ndarray | None = None
    ivf: dict | None = None

    @classmethod
    def build(cls, vectors: Sequence[np.ndarray], ids: Sequence[str], spec: str, store: str = "float16",
              settings: FdeSettings = FdeSettings(), centroids: int = 0) -> "MultiVectorIndex":
        """`centroids`: of the token-level inverted file (0: `auto_centroids`)."""
        if store not in STORES:
            raise EngineError(f"--multivector-store must be one of {', '.join(STORES)}, not {store!r}")
        if len(vectors) != len(ids):
            raise EngineError(f"multi-vector index: {len(vectors)} token sets for {len(ids)} ids")
        lengths = np.array([len(v) for v in vectors], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        dim = int(vectors[0].shape[1]) if len(vectors) else 0
        flat = np.concatenate(vectors).astype(np.float32) if len(vectors) else np.zeros((0, dim), np.float32)
        scales = None
        if store == "int8":
            scales = (np.abs(flat).max(axis=1) / 127.0).astype(np.float32)
            tokens = np.round(flat / np.where(scales > 0, scales, 1.0)[:, None]).clip(-127, 127).astype(np.int8)
        else:
            tokens = flat.astype(np.float16)
        fde = np.concatenate([encode_fde(vectors[lo:lo + 4096], settings, query=False)
                              for lo in range(0, len(vectors), 4096)]) if len(vectors) else \
            np.zeros((0, settings.dim), np.float32)
        meta = {"spec": spec, "count": len(ids), "ids_hash": ids_hash(ids), "store": store, "dim": dim,
                "tokens": int(len(flat)), "fde": {"reps": settings.reps, "bits": settings.bits,
                                                  "proj": settings.proj, "seed": settings.seed}}
        ivf = train_ivf(flat, offsets, int(centroids) or auto_centroids(len(flat))) if len(flat) else {}
        if ivf:
            meta["ivf"] = {"centroids": int(len(ivf["centroids"])), "seed": 0}
        return cls(tokens, offsets, fde, meta, scales, ivf or None)

    def writer(self) -> FileWriter:
        return FileWriter("", self.write_into)

    def write_into(self, folder: Path) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        for name in ("tokens", "offsets", "fde", "scales"):
            value = getattr(self, name)
            if value is not None:
                np.save(folder / f"{name}.npy", np.ascontiguousarray(value))
        for name, value in (self.ivf or {}).items():
            np.save(folder / f"{name}.npy", np.ascontiguousarray(value))
        (folder / META_FILE).write_text(json.dumps(self.meta, indent=1) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, folder: str | Path) -> "MultiVectorIndex":
        folder = Path(folder)
        try:
            meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
            arrays = {name: np.load(folder / f"{name}.npy", mmap_mode="r") for name in ("tokens", "offsets", "fde")}
            scales = np.load(folder / "scales.npy", mmap_mode="r") if meta.get("store") == "int8" else None
            ivf = {name: np.load(folder / f"{name}.npy", mmap_mode="r") for name in IVF_ARRAYS} \
                if meta.get("ivf") else None
        except (OSError, ValueError) as exc:
            raise EngineError(f"{folder}: unreadable multi-vector index ({type(exc).__name__}: {exc}); rebuild the "
                              "collection with --multivector") from None
        if len(arrays["offsets"]) != int(meta["count"]) + 1 or len(arrays["fde"]) != int(meta["count"]):
            raise EngineError(f"{folder}: damaged multi-vector index (its arrays' lengths disagree); rebuild the "
                              "collection with --multivector")
        if ivf is not None and (len(ivf["codes"]) != len(arrays["tokens"])
                                or len(ivf["lists_offsets"]) != len(ivf["centroids"]) + 1):
            raise EngineError(f"{folder}: damaged multi-vector index (its inverted file's lengths disagree); "
                              "rebuild the collection with --multivector")
        return cls(meta=meta, scales=scales, ivf=ivf, **arrays)

    @property
    def settings(self) -> FdeSettings:
        return FdeSettings(**self.meta["fde"])

    def check_rows(self, ids: Sequence[str], where: str) -> None:
        if int(self.meta.get("count", -1)) != len(ids) or self.meta.get("ids_hash") != ids_hash(ids):
            raise EngineError(f"{where}: its multi-vector index covers other rows than the collection holds now "
                              f"({self.meta.get('count')} rows indexed, {len(ids)} there); rebuild it with "
                              "`engine build NAME --texts FILE --force --multivector SPEC`")

    def row_tokens(self, row: int) -> np.ndarray:
        lo, hi = int(self.offsets[row]), int(self.offsets[row + 1])
        part = np.asarray(self.tokens[lo:hi], dtype=np.float32)
        if self.scales is not None:
            part = part * np.asarray(self.scales[lo:hi], dtype=np.float32)[:, None]
        return part

    def candidates(self, query: np.ndarray, n: int, live: np.ndarray | None = None) -> np.ndarray:
        """The n rows whose encodings score highest against the query's (one matrix–vector product)."""
        q = encode_fde([query], self.settings, query=True)[0]
        scores = np.asarray(self.fde @ q, dtype=np.float64)
        if live is not None:
            scores = np.where(live, scores, -np.inf)
        return top_k(scores, n)

    def token_candidates(self, query: np.ndarray, probe: int, live: np.ndarray | None = None,
                         block: int = 1 << 18) -> np.ndarray:
        """The rows owning the `probe` stored tokens nearest each query token (exact inner products over every
        stored token, a block at a time): the candidates of ColBERT's own first stage, without its
        clustering."""
        q = np.asarray(query, dtype=np.float32)
        best_scores = np.full((len(q), 0), -np.inf, dtype=np.float32)
        best_tokens = np.zeros((len(q), 0), dtype=np.int64)
        for lo in range(0, len(self.tokens), block):
            part = np.asarray(self.tokens[lo:lo + block], dtype=np.float32)
            if self.scales is not None:
                part *= np.asarray(self.scales[lo:lo + block], dtype=np.float32)[:, None]
            scores = q @ part.T
            if scores.shape[1] > probe:  # this block's best first, then merged with the best so far
                keep = np.argpartition(-scores, probe - 1, axis=1)[:, :probe]
                scores, tokens = np.take_along_axis(scores, keep, 1), keep + lo
            else:
                tokens = np.broadcast_to(np.arange(lo, lo + scores.shape[1]), scores.shape)
            scores = np.concatenate([best_scores, scores], axis=1)
            tokens = np.concatenate([best_tokens, tokens], axis=1)
            if scores.shape[1] > probe:
                keep = np.argpartition(-scores, probe - 1, axis=1)[:, :probe]
                scores, tokens = np.take_along_axis(scores, keep, 1), np.take_along_axis(tokens, keep, 1)
            best_scores, best_tokens = scores, tokens
        rows = np.unique(np.searchsorted(np.asarray(self.offsets), np.unique(best_tokens), side="right") - 1)
        return rows[live[rows]] if live is not None else rows

    def centroid_candidates(self, query: np.ndarray, nprobe: int, n: int,
                            live: np.ndarray | None = None) -> np.ndarray:
        """PLAID's candidate generation: the rows owning a token in any of the `nprobe` centroids nearest each
        query token, ranked by their centroid MaxSim (each of a row's tokens stands for its centroid), the best
        n kept for exact MaxSim."""
        if self.ivf is None:
            raise EngineError("this multi-vector index has no inverted file (built before it existed); rebuild the "
                              "collection with --multivector, or take candidates with via=\"tokens\" or \"fde\"")
        centroids, codes = self.ivf["centroids"], self.ivf["codes"]
        lists_offsets, lists_rows = np.asarray(self.ivf["lists_offsets"]), self.ivf["lists_rows"]
        sims = np.asarray(query, dtype=np.float32) @ np.asarray(centroids).T              # query tokens × C
        nprobe = min(int(nprobe), sims.shape[1])
        probed = np.unique(np.argpartition(-sims, nprobe - 1, axis=1)[:, :nprobe])
        rows = np.unique(np.concatenate([np.asarray(lists_rows[lists_offsets[c]:lists_offsets[c + 1]])
                                         for c in probed]))
        if live is not None:
            rows = rows[live[rows]]
        if len(rows) <= n:
            return rows.astype(np.int64)
        offsets = np.asarray(self.offsets)
        lo, lengths = offsets[rows], offsets[rows + 1] - offsets[rows]
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        take = np.repeat(lo - starts, lengths) + np.arange(lengths.sum())
        approx = np.maximum.reduceat(sims[:, np.asarray(codes[take])], starts, axis=1).sum(axis=0)
        return rows[top_k(approx, n)].astype(np.int64)

    def maxsim(self, query: np.ndarray, rows: Sequence[int]) -> np.ndarray:
        """Exact MaxSim of the query against the stored token vectors of `rows`: their tokens gathered, one
        product, a maximum per row segment."""
        rows = np.asarray(rows, dtype=np.int64)
        out = np.zeros(len(rows), dtype=np.float64)
        if len(rows) == 0 or len(query) == 0:
            return out
        lo, hi = np.asarray(self.offsets)[rows], np.asarray(self.offsets)[rows + 1]
        lengths = hi - lo
        take = np.repeat(lo - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths) + np.arange(lengths.sum())
        tokens = np.asarray(self.tokens[take], dtype=np.float32)
        if self.scales is not None:
            tokens *= np.asarray(self.scales[take], dtype=np.float32)[:, None]
        sims = np.asarray(query, dtype=np.float32) @ tokens.T                     # query tokens × gathered
        has = lengths > 0
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        out[has] = np.maximum.reduceat(sims, starts[has], axis=1).sum(axis=0)
        return out

    def search(self, query: np.ndarray, k: int, candidates: int, live: np.ndarray | None = None,
               via: str = "fde", nprobe: int = DEFAULT_NPROBE) -> tuple[np.ndarray, np.ndarray]:
        """(rows, MaxSim) of the k best candidates, best first: the `candidates` rows the encodings propose
        (`via` "fde"), the rows owning the `candidates` tokens nearest each query token ("tokens"), or the
        `candidates` rows of best centroid MaxSim among those the `nprobe` centroids nearest each query token
        hold ("centroids")."""
        if via == "centroids":
            rows = self.centroid_candidates(query, nprobe, max(k, candidates), live)
        elif via == "tokens":
            rows = self.token_candidates(query, candidates, live)
        else:
            rows = self.candidates(query, max(k, candidates), live)
        exact = self.maxsim(query, rows)
        order = top_k(exact, k)
        return rows[order], exact[order]
