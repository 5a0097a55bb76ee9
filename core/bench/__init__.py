"""`llmchat bench` scenarios."""
