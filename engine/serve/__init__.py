"""`engine serve`: a warm HTTP search service over collections (FastAPI + uvicorn, the `serve` extra) with a
web page; `engine search --server URL` is its client. Never imports a task."""
