"""Load the tokenizer every part of a run uses, with the config's chat template applied.

    tokenizer = load_tokenizer(path, trust_remote_code=False,
                               chat_template=cfg.actor_rollout_ref.model.custom_chat_template)

``actor_rollout_ref.model.custom_chat_template`` (verl's key) replaces the tokenizer's chat
template everywhere prompts are rendered: the dataset (driver), the rollout engine (each
worker) and ``agentrl generate``. It is the Jinja text itself, or the path of a file that
holds it. The trainer's HF exports carry the tokenizer with that template.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def resolve_chat_template(value: str | None) -> str | None:
    """The template text: ``value`` itself, or the file it names (a path that exists)."""
    if value is None:
        return None
    text = str(value)
    if "{" not in text and "\n" not in text:  # not Jinja: it must be a file
        path = Path(text).expanduser()
        if not path.is_file():
            raise FileNotFoundError(
                f"actor_rollout_ref.model.custom_chat_template: {text!r} is neither a Jinja "
                "template nor an existing file"
            )
        return path.read_text()
    return text


def load_tokenizer(
    path: str | Path, trust_remote_code: bool = False, chat_template: str | None = None
) -> Any:
    """``AutoTokenizer.from_pretrained(path)`` with ``chat_template`` (text or file) set."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path), trust_remote_code=trust_remote_code)
    template = resolve_chat_template(chat_template)
    if template is not None:
        tokenizer.chat_template = template
    return tokenizer


def check_same_tokenizer(tokenizer: Any, other_path: str | Path, key: str,
                         trust_remote_code: bool = False) -> None:
    """Raise ValueError (naming ``key``) unless the tokenizer at ``other_path`` maps every
    token to the same id as ``tokenizer`` (one model's log-probs of the other's ids)."""
    other = load_tokenizer(other_path, trust_remote_code=trust_remote_code)
    if other.get_vocab() != tokenizer.get_vocab():
        mine, theirs = tokenizer.get_vocab(), other.get_vocab()
        differ = sorted(set(mine.items()) ^ set(theirs.items()))[:3]
        raise ValueError(
            f"{key} ({other_path}) tokenizes differently from the student "
            f"({len(theirs)} vs {len(mine)} tokens; e.g. {differ}): distillation scores the "
            "student's token ids with the teacher, so both must share a tokenizer "
            "(re-tokenisation is not supported)")
