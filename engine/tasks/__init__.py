"""One package per benchmark, each the same small shape: `data` (the benchmark's files), `pipeline` (build,
rank, evaluate), `submission` (where the task has a format of its own), `cli` (its commands). A task
imports the core, eval and io, never another task."""
