"""Which candidate model is best for this query: NTCIR-19 ModelRetrieval A (task → BERT models) and TREC 2025
Million LLMs (question → LLMs), one transfer mechanism over training queries with known scores."""
