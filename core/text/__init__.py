"""Tokenizer, chat template sandbox, prompt building, stop strings, output sanitizing."""
