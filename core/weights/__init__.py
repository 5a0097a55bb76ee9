"""Finding, fetching and reading model files (GGUF, safetensors), the model catalog."""
