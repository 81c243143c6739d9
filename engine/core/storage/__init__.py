"""Storage: a collection's files (`store`), its FAISS index (`index`) and the writer of both (`builder`)."""
