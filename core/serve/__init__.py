"""`llmchat serve`: the OpenAI-compatible server over the embedded engine, and its metrics."""
