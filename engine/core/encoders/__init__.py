"""Encoders: `registry` (spec prefix → loader; `load_encoder`), `base` (the Encoder interface), one module per
model family, `device` (--device, fp16, --batch-size auto), `onnx_text` (text queries without torch).
Import from the modules themselves: this package file imports nothing, so no module's import runs in a loop."""
