"""The contract between the UI and any backend: protocol, events, metrics records, sampling parameters,
cache explanations. Imports neither torch nor Textual (tests/test_layers.py checks it)."""
