"""`agentrl make-tiny-model OUT_DIR`: write a tiny Qwen2 model + tokenizer, offline."""

from __future__ import annotations

import argparse

from agentrl.models.chat_template import CHAT_TEMPLATES
from agentrl.models.tiny import TINY_SIZES, make_tiny_model


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("out_dir", help="directory to write the Hugging Face model to")
    parser.add_argument("--size", default="tiny", choices=sorted(TINY_SIZES),
                        help="model size (parameters, attention head width): nano 0.20M (16), "
                             "tiny 0.85M (32), small 4.4M (64), medium 18.7M (64), large 30.4M "
                             "(72); vLLM's CPU build serves head widths 32 and 64, not 16 or 72")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    parser.add_argument("--vocab-size", type=int, default=4096,
                        help="upper bound of the BPE vocabulary (default 4096)")
    parser.add_argument("--chat-template", default="qwen25", choices=sorted(CHAT_TEMPLATES),
                        help="tool rendering: qwen25 (JSON schemas) or compact_tools (one line)")
    parser.add_argument("--untied", action="store_true",
                        help="give the output layer its own weights (tied to the embeddings by "
                             "default); vLLM's CPU build reloads only untied output layers")


def run(args: argparse.Namespace) -> int:
    make_tiny_model(args.out_dir, size=args.size, seed=args.seed, vocab_size=args.vocab_size,
                    chat_template=args.chat_template, tie_word_embeddings=not args.untied)
    return 0


if __name__ == "__main__":
    import sys

    from agentrl.utils.command import main_of

    sys.exit(main_of(sys.modules[__name__], "make-tiny-model"))
