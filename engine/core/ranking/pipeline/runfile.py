"""`run(path, docs, fields, id_column)`: a first stage that reads a TREC run another system wrote (BM25,
another engine), each ranked document carrying its text from a table (`docs`), so that a later
`rerank(…)` reorders it: what `engine rerank RUN` runs."""
from __future__ import annotations

from typing import Any, Sequence

from engine.core.ranking.pipeline.query import Query
from engine.core.ranking.pipeline.stage import Context, Run, Stage, keep_args
from engine.errors import EngineError, opt
from engine.io.ranking import Ranking


class RunFile(Stage):
    """Each query's ranking as the TREC run `path` holds it (a query the run lacks gets an empty ranking),
    every document with its text from the table `docs` (CSV/JSONL/TSV: its `id_column`, its `fields` joined;
    `engine build --texts` reads the same way). The files are read once per stage (`load`)."""
    name = "run"

    def __init__(self, path: str, docs: str | None = None, fields: Sequence[str] | None = None,
                 id_column: str | None = None) -> None:
        super().__init__()
        if not isinstance(path, str) or not path.strip():
            raise EngineError("run(…) needs a TREC run file first, e.g. run(\"bm25.run\", docs=\"docs.csv\")")
        if fields is not None and (not isinstance(fields, (list, tuple))
                                   or not all(isinstance(f, str) for f in fields)):
            raise EngineError("run(…): fields must be a list of the docs table's text columns")
        self.path, self.docs, self.id_column = path, docs, id_column
        self.fields = list(fields) if fields is not None else None
        self._loaded: tuple[dict, dict[str, str]] | None = None
        keep_args(self, [path], {"docs": (docs, None), "fields": (self.fields, None),
                                 "id_column": (id_column, None)})

    def load(self) -> tuple[dict[str, Any], dict[str, str]]:
        """(qid → {doc: score}, doc → text), read once: an empty run, an unreadable file or table is one line."""
        if self._loaded is None:
            from engine.io.runs import read_run
            run = read_run(self.path)
            if not run:
                raise EngineError(f"{self.path}: the run holds no lines")
            docs: dict[str, str] = {}
            if self.docs is not None:
                from engine.core.sources import text_items
                items, _ = text_items(self.docs, id_column=self.id_column, fields=self.fields)
                docs = {it.id: it.source for it in items}
            self._loaded = (run, docs)
        return self._loaded

    def fingerprint(self, ctx: Context) -> str:
        """The files' sizes and modification times: a rewritten run or table is another input."""
        import os
        parts = []
        for p in (self.path, self.docs):
            if p is not None:
                st = os.stat(p)
                parts.append(f"{st.st_size}:{st.st_mtime_ns}")
        return ";".join(parts)

    def check(self, ctx: Context) -> None:
        super().check(ctx)
        self.load()

    def check_coverage(self, queries: dict[str, str], queries_path: str, depth: int) -> None:
        """Every query of the run has a text and every document it reranks one too: the first that lacks one
        is named, before any model loads."""
        from engine.io.fusion import ranked
        run, docs = self.load()
        for qid, ranking in run.items():
            if qid not in queries:
                raise EngineError(f"{self.path}: query {qid!r} has no text in {queries_path}")
            for doc, _ in ranked(ranking)[:depth]:
                if doc not in docs:
                    raise EngineError(f"{self.path}: query {qid!r} ranks document {doc!r}, which {self.docs} does "
                                      f"not hold (give {opt('docs')} the table the run was made from)")

    def transform(self, queries: Sequence[Query], run: Run | None, ctx: Context) -> Run:
        ranked, docs = self.load()
        out: Run = {}
        for q in queries:
            r = Ranking.of(ranked.get(q.qid, {}))
            out[q.qid] = Ranking(r.ids, r.scores, {d: {"text": docs[d]} for d in r.ids if d in docs})
        return out

    def queries(self, texts: dict[str, str]) -> list[Query]:
        """The run's queries in its order, each with its text."""
        return [Query(qid, texts.get(qid, "")) for qid in self.load()[0]]

