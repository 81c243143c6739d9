"""The `>>` chain of a pipeline, step by step (what `engine experiment --stages` scores). The operators'
stages themselves (`a >> b`, `a % k`, `a ^ b`, `a | b`) are defined with `Stage`, which builds them
(`engine.core.ranking.pipeline.stage`)."""
from __future__ import annotations

from engine.core.ranking.pipeline.stage import Cutoff, Stage, Then


def prefixes(stage: Stage) -> list[Stage]:
    """The pipelines that stop after each step of the `>>` chain (and the cutoffs on it): what `--stages`
    scores, so a table shows what each step adds."""
    if isinstance(stage, Then):
        return prefixes(stage.first) + [stage]
    if isinstance(stage, Cutoff) and isinstance(stage.stage, Then):
        return prefixes(stage.stage)[:-1] + [stage]
    return [stage]
