"""Backends the UI talks to: the in-process engine service, the remote (OpenAI-compatible) backend, `ask`."""
