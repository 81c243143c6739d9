"""Ranking: stages composed into pipelines (`pipeline`), rerankers, hybrid search, filters, BM25, query pooling
and adapters, over the collections that `engine.core.storage` writes."""
