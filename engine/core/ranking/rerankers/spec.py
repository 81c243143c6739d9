"""A reranker spec as one checked value: the text a user wrote (`cross:/models/ce`), parsed once at the edge —
the command line, a pipeline file, a service's allowed list — into its registry entry, the argument after the
prefix and the options its kind takes, each in range. Everything below the edge takes this value; nothing
parses the text again. Loading goes through `load`, one loaded reranker per spec and options per process.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.core.ranking.rerankers.registry import RerankerEntry

PARSES = [0]
"""How many specs were parsed in this process (what a test counts: one per spec a command is given)."""


@dataclass(frozen=True)
class RerankerSpec:
    """kind (the registry prefix), arg (a model name, folder, served URL#MODEL or encoder spec) and the
    options given to its loader, checked; `text` is the spec as written back (what a pipeline prints)."""
    kind: str
    arg: str
    options: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def parse(cls, text: "str | RerankerSpec", *, keywords: bool = False, check_arg: bool = True,
              **options: Any) -> "RerankerSpec":
        """The spec `text` checked (an unknown prefix, a missing model, a local path that does not exist, a URL
        without its model, an option the kind does not take or out of range: one line each), no model loaded.
        `keywords`: options are named as a pipeline's `rerank(…)` keywords rather than as flags. A spec already
        parsed is returned as it is (with options given, they are checked and added)."""
        from engine.core.ranking.rerankers.registry import check_arg as check_argument, checked_options, entry_for
        if isinstance(text, RerankerSpec):
            if not any(v is not None for v in options.values()):
                return text
            clean = checked_options(text.entry, keywords=keywords, **options)  # the kind is known: no parse
            return cls(text.kind, text.arg, tuple(sorted({**dict(text.options), **clean}.items())))
        PARSES[0] += 1
        entry, arg = entry_for(text)
        if check_arg:
            check_argument(entry, arg, text)
        clean = checked_options(entry, keywords=keywords, **options)
        return cls(entry.prefix, arg, tuple(sorted(clean.items())))

    def check_arg(self) -> None:
        """What `parse(…, check_arg=False)` left out: a local path exists, a URL names its model (a pipeline
        file is parsed before its stages are checked, and may name a model of another machine)."""
        from engine.core.ranking.rerankers.registry import check_arg
        check_arg(self.entry, self.arg, self.text)

    @property
    def text(self) -> str:
        return f"{self.kind}:{self.arg}"

    def __str__(self) -> str:
        return self.text

    @property
    def entry(self) -> "RerankerEntry":
        from engine.core.ranking.rerankers.registry import RERANKERS
        return next(e for e in RERANKERS if e.prefix == self.kind)

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.options)

    def load(self) -> Any:
        """The loaded reranker, a `Reranker`: one per spec, options and model files per process (a model
        replaced on disk is loaded again, so scores are never kept under another model's fingerprint)."""
        from engine.core.ranking.rerankers.fingerprint import model_key
        from engine.core.ranking.rerankers.registry import cached_loaded
        return cached_loaded(self, model_key(self))


def load_reranker(spec: "str | RerankerSpec", **options: Any) -> Any:
    """A fresh `Reranker` (not shared: its counters start at zero) that a spec names, with the options given
    (template=, instruction=, rounds=, …; None means the default); bad or unavailable specs raise EngineError
    with the fix. `RerankerSpec.load` is the shared one."""
    from engine.core.ranking.rerankers.registry import build
    return build(RerankerSpec.parse(spec, **options))
