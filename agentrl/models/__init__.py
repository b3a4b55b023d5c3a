"""Offline tiny models and tokenizers (tests, examples, the CPU quickstart)."""

from agentrl.models.tiny import TINY_SIZES, make_tiny_model, train_tiny_tokenizer

__all__ = ["TINY_SIZES", "make_tiny_model", "train_tiny_tokenizer"]
