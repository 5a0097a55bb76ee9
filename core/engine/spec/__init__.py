"""Speculative decoding: the speculator, its draft proposer and verification."""
