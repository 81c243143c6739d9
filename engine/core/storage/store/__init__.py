"""The lowest layer of the core: a collection's files on disk. `generations` (manifest, checksums, atomic commit
of roles), `structure` (checks on open that read no data), `lock` (one writer), `stored` (an opened folder:
its arrays, documents and item rows). Imports nothing of the index, the build or the encoders."""
