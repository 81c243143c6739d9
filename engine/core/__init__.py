"""The core every task builds on: encoders → collection store → FAISS index → search, plus the shared
retrieval pieces (sources, BM25, fusion, text pooling, rankings). Never imports `engine.tasks`."""
