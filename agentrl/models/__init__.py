"""Models, tokenizers and chat rendering: the offline tiny models (tests, examples, the CPU
quickstart) and `agentrl.models.chat`, the renderer every trajectory is tokenized with.

`make_tiny_model` and friends import torch and transformers; they load on first use, so
importing `agentrl.models.chat` stays light.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TINY_SIZES", "make_tiny_model", "train_tiny_tokenizer"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from agentrl.models import tiny

        return getattr(tiny, name)
    raise AttributeError(f"module 'agentrl.models' has no attribute {name!r}")
