"""A pipeline file read against one index: a task's printed default names the collections of the task's
default index (`eventa/images`, `dsebench`); run with another index (`--name N`), those names are read as
N's (`N/images`, `N`), so "print a default, edit it, pass it back" works for every name. A collection of any
other index is refused in one line: a task's ranking reads the index it was told to read."""
from __future__ import annotations

import ast
import os

from engine.core.ranking.pipeline.parse import Origin, parse_pipeline, read_pipeline_source
from engine.core.ranking.pipeline.stage import collections_read as read_collections
from engine.core.ranking.pipeline.stage import Stage
from engine.errors import EngineError


def under(collection: str, index: str) -> bool:
    """Whether `collection` is the index `index` itself or one of its collections (`index/…`)."""
    return collection == index or collection.startswith(index.rstrip("/") + "/")


def rebind(text: str, default: str, index: str, origin: "str | Origin" = "") -> Stage:
    """The pipeline `text` with every collection it reads under the index `default` read under `index` instead
    (`default/images` → `index/images`, `default` → `index`, `default/articles:DOC` → `index/articles:DOC`).
    Only the strings that name those collections change; the rest of the text is kept. `origin` prefixes
    positions in messages (a file's name)."""
    stage = parse_pipeline(text, origin)
    moved = {c: index.rstrip("/") + c[len(default.rstrip("/")):] for c in read_collections(stage)
             if under(c, default)}
    if default == index or not moved:
        return stage
    tree = ast.parse(f"(\n{text.strip()}\n)", mode="eval")  # as parse_pipeline reads it
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            name, colon, doc = node.value.rpartition(":")  # expand(via="COLLECTION:DOCUMENT")
            if node.value in moved:
                node.value = moved[node.value]
            elif colon and name in moved:
                node.value = f"{moved[name]}:{doc}"
    return parse_pipeline(ast.unparse(tree), origin)


def read_index_pipeline(path: str | os.PathLike, index: str, default: str, command: str) -> Stage:
    """The pipeline file `path` as `command` (`engine eventa submit`) runs it on the index `index`: the
    collections of the index `default` read as `index`'s; any other index's collection refused."""
    text, origin = read_pipeline_source(path)
    stage = rebind(text, default, index, origin)
    foreign = [c for c in read_collections(stage) if not under(c, index)]
    if foreign:
        raise EngineError(f"{path}: the pipeline reads the collection {foreign[0]!r}, which is not in the index "
                          f"{index!r}; {command} runs a pipeline on the index --name names (its file's "
                          f"{default!r} collections are read as that index's)")
    return stage
