"""The FAISS layer, above the store: `faiss_index` (factory strings, training, query-time knobs, Flat files
streamed), `shards` and `ondisk` (folder indexes), `loading` (a file or a folder, by its layout), `auto`
(`--index auto`). Imports the store, never the build or the collection."""
