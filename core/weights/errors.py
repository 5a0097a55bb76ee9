"""The one error type for model files: found, fetched, converted or loaded, it says what went wrong in one line."""
from __future__ import annotations


class ModelLoadError(Exception):
    """A model could not be found, fetched, converted or loaded; str() is a one-line message for the user."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))
