"""Evaluation beside the core: metrics (a registry), run and qrels files, run-level evaluation, validation
and each benchmark's scoring profile. Never imports `engine.tasks`."""
