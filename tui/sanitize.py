"""The UI's name for the one sanitiser, which lives in `llmchat.core.sanitize` (shared with `llmchat ask`)."""
from llmchat.core.sanitize import is_safe, safe_text

__all__ = ["is_safe", "safe_text"]
