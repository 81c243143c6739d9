"""What a ranking's items are to a reader of their content (a reranker, a pipeline stage): each item's stored
text (or the text fields named, joined), or its image file. The one reader of item content, used by the
pipeline's first stages and by the rerank stage."""
from __future__ import annotations

from typing import Any, Sequence

from engine.core.ranking.rerankers.base import IMAGE, TEXT


def item_fields(col: Any, items: Sequence[dict], text_fields: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """{"text": …} or {"image": file} for each item (a dict with its "id" and metadata); {} where it has none."""
    if col.kind == IMAGE:
        from engine.core.storage.store.stored import IMAGE_FILES
        files = col.document(IMAGE_FILES) if IMAGE_FILES in col.stored else {}
        return [{IMAGE: str(files[it["id"]])} if it["id"] in files else {} for it in items]
    from engine.core.sources import stored_text
    fields = text_fields or col.manifest.get("text_fields")
    return [{TEXT: t} if (t := stored_text(it, fields)) else {} for it in items]

