"""Rich tables for people; the same data goes out as JSON for scripts."""
from __future__ import annotations

from typing import Sequence

from rich.table import Table


def shorten(value: object, width: int = 80) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def hits_table(hits: Sequence, title: str | None = None) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("rank", justify="right")
    table.add_column("id", overflow="fold")
    table.add_column("score", justify="right")
    table.add_column("metadata")
    for h in hits:
        meta = "; ".join(f"{k}={shorten(v, 60)}" for k, v in h.meta.items())
        table.add_row(str(h.rank), h.id, f"{h.score:.4f}", shorten(meta, 100))
    return table


def mapping_table(data: dict, title: str | None = None) -> Table:
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("key", style="bold")
    table.add_column("value", overflow="fold")
    for key, value in data.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}: {v}" for k, v in value.items()) or "—"
        table.add_row(str(key), "—" if value is None else str(value))
    return table


def bench_table(result: dict) -> Table:
    table = Table(title=f"{result['collection']}: {result['count']} × {result['dim']}, {result['index_factory']}, "
                        f"k={result['k']}, batch={result['batch']}", title_justify="left")
    for col in ("stage", "p50 ms", "p95 ms", "p99 ms", "QPS"):
        table.add_column(col, justify="right" if col != "stage" else "left")
    for key, label in (("encode_single", "encode query (single)"), ("encode_batch", "encode queries (batch)"),
                       ("search_single", "search (single)"), ("search_batch", "search (batch)")):
        if key in result:
            s = result[key]
            table.add_row(label, f"{s['p50_ms']:.3f}", f"{s['p95_ms']:.3f}", f"{s['p99_ms']:.3f}", f"{s['qps']:.1f}")
    for label, s in family_rows(result.get("families") or {}):
        table.add_row(label, f"{s['p50_ms']:.3f}", f"{s['p95_ms']:.3f}", f"{s['p99_ms']:.3f}", f"{s['qps']:.1f}")
    extra = "".join(f", {name} index {fam['index_bytes'] / 2**20:.1f} MiB"
                    for name, fam in (result.get("families") or {}).items() if "index_bytes" in fam)
    table.caption = (f"index {result['index_bytes'] / 2**20:.1f} MiB, embeddings "
                     f"{result['embeddings_bytes'] / 2**20:.1f} MiB{extra}; batch rows are per batch call, QPS per "
                     "query (per image or document in the encode rows)")
    return table


FAMILY_ROWS = (("image_text", "encode_image_single", "image–text: encode image (single)"),
               ("image_text", "encode_images_batch", "image–text: encode images (batch)"),
               ("sparse", "encode_documents_batch", "sparse: encode documents (batch)"),
               ("sparse", "search_single", "sparse: search (single)"),
               ("multivector", "encode_documents_batch", "multivector: encode {documents} (batch)"),
               ("multivector", "search_single", "multivector: search (single)"),
               ("rerank", "rerank_single", "rerank {spec} top {depth} (single)"))
"""`engine bench`'s rows of the model families (engine.core.bench_families): family, measurement, label."""


def family_rows(families: dict) -> list[tuple[str, dict]]:
    """(label, latency stats) of each family measurement a bench result holds, in FAMILY_ROWS order."""
    return [(label.format(**{"documents": "documents",
                             **{k: v for k, v in families[family].items() if k in ("spec", "depth", "documents")}}),
             families[family][key])
            for family, key, label in FAMILY_ROWS if key in families.get(family, {})]


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]], markdown: bool = False,
                 left: int = 1) -> str:
    """Every text table the engine prints: the first `left` columns left-aligned (labels), the rest
    right-aligned (numbers). Plain text pads columns two spaces apart; `markdown` gives a pipe table
    with the same alignment, for docs and notes."""
    rows = [[str(c) for c in r] for r in rows]
    if markdown:
        align = ["---" if i < left else "---:" for i in range(len(headers))]
        return "\n".join("| " + " | ".join(r) + " |" for r in [list(headers), align, *rows])
    table = [list(headers), *rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) if i < left else c.rjust(w)
                               for i, (c, w) in enumerate(zip(r, widths))).rstrip() for r in table)


def doc_table(headers: Sequence[str], rows: Sequence[Sequence[str]], markdown: bool = False, left: int = 1) -> str:
    """A table written for the docs (cells with `code` marks): Markdown as is, plain text without the marks."""
    if not markdown:
        rows = [[str(c).replace("`", "") for c in r] for r in rows]
    return format_table(headers, rows, markdown=markdown, left=left)
