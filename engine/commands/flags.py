"""The command-line declarations of the options several commands share: the reranking ones (`engine search`,
`engine rerank`) and where encoders run (`--device`: `engine build`, `search`, `bench`, `pipeline run`),
declared once here, below the commands' modules."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

Device = Annotated[str, typer.Option("--device", help="Where encoders run: auto (a CUDA GPU, else Apple MPS, else "
                                     "the CPU), cpu, cuda, cuda:N, mps. fp16 autocast on CUDA.")]
RerankTemplate = Annotated[Optional[str], typer.Option("--rerank-template", help="llm: prompt: qwen3-reranker "
                           "(Qwen3-Reranker's published format; the default for its names), chat (the model's chat "
                           "template; the default otherwise) or a FILE with {instruction}, {query}, {document}.",
                           show_default=False)]
RerankInstruction = Annotated[Optional[str], typer.Option("--rerank-instruction", help="The task told to an llm:, "
                              "llm-list: or vlm: reranker (default: \"Given a web search query, retrieve relevant "
                              "passages that answer the query\").", show_default=False)]
RerankBatchTokens = Annotated[Optional[int], typer.Option("--rerank-batch-tokens", help="llm: batches cut by "
                              "tokens (rows × padded width at most N) instead of 16 rows: long prompts in small "
                              "batches, short ones in large (a GPU's memory bound); llm-list: the same for a "
                              "generate call's rows × (prompt + answer) tokens.", show_default=False)]
RerankRounds = Annotated[Optional[int], typer.Option("--rerank-rounds", help="llm-list: grouped voting with R "
                         "shuffled rounds instead of the sliding window (1-100).", show_default=False)]
RerankDtype = Annotated[Optional[str], typer.Option("--rerank-dtype", help="cross: weights on a CPU (onnxruntime): "
                        "float32 (the default) or int8 (dynamic quantization, exported once into the model cache: "
                        "faster, the order close to float32's; docs/rerank.md).", show_default=False)]
