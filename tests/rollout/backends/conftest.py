"""Fixtures of the backend tests: a tiny model whose greedy outputs vary from token to token.

The random tiny model repeats one token under greedy decoding; scaling its matrices by 6
sharpens its logits so that greedy continuations differ per position and per prompt, which
makes "the same tokens as model.generate" a test that can fail.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def prompts(tiny_tokenizer) -> list[list[int]]:
    """Prompts of different lengths (4, 9, 19 and 13 tokens)."""
    texts = [
        "1+2=",
        "hello there world, how are you",
        "the of and to in is it that for you was with on as have be at one this",
        '<tool_call>\n{"name": "calculator", "arguments"',
    ]
    return [tiny_tokenizer.encode(t) for t in texts]


@pytest.fixture(scope="module")
def served(varied_model_dir):
    """`agentrl serve`'s app over the varied model, on a loopback port in a thread:
    yields (base URL, the HFBackend behind it)."""
    from agentrl.rollout.backends.hf import HFBackend
    from agentrl.rollout.backends.serve import create_app
    from agentrl.utils.serving import serve_in_thread

    backend = HFBackend.from_pretrained(varied_model_dir)
    app = create_app(backend, model_path=str(varied_model_dir))
    with serve_in_thread(app, startup_timeout=30) as url:
        yield url, backend
