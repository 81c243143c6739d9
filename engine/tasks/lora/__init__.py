"""NTCIR-19 ModelRetrieval B: style image → the LoRA that made it."""
