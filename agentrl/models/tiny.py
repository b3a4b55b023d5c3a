"""Tiny Qwen2-architecture models and tokenizers, built offline in seconds.

Tests, examples and the CPU quickstart use these instead of a hub download. The output
is an ordinary Hugging Face model directory: `AutoModelForCausalLM.from_pretrained` and
`AutoTokenizer.from_pretrained` load it through the same code path as a real Qwen2.5.

    from agentrl.models.tiny import make_tiny_model
    path = make_tiny_model("/tmp/tiny", size="tiny", seed=0)

    agentrl make-tiny-model /tmp/tiny --size small --seed 0

The tokenizer is a byte-level BPE trained with `tokenizers` on a synthetic corpus that
this module generates from a fixed seed (chat markup, tool calls, arithmetic, plain
English), so it is the same on every machine. It pre-tokenizes with Qwen2's regex (digits
split one by one), because transformers loads a `model_type: qwen2` directory with
Qwen2's tokenizer class, which installs that regex: training with anything else changes
the ids after a save and reload. The model weights are random, seeded by `seed`.
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from agentrl.models.chat_template import CHAT_TEMPLATES, QWEN25_CHAT_TEMPLATE

logger = logging.getLogger(__name__)

# Qwen2's pre-tokenizer regex (the one transformers installs for model_type qwen2).
QWEN2_PRETOKENIZE_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
# Special (control) tokens are dropped by skip_special_tokens; the tool-markup tokens are
# added tokens but not special, as in Qwen2.5, so they survive decoding and can be parsed.
SPECIAL_TOKENS = (PAD_TOKEN, IM_START, IM_END)
TOOL_MARKUP_TOKENS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")


@dataclass(frozen=True)
class TinySize:
    """Shape of one model size."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int


# name -> shape. Parameters as built (the tiny tokenizer's ~2K-token embedding, tied): nano
# 0.20M, tiny 0.85M, small 4.4M, medium 18.7M, large 30.4M.
TINY_SIZES: dict[str, TinySize] = {
    "nano": TinySize(64, 128, 2, 4, 2),  # the CPU quickstart's model
    "tiny": TinySize(128, 384, 3, 4, 2),
    "small": TinySize(256, 768, 5, 4, 2),
    "medium": TinySize(512, 1408, 6, 8, 4),
    "large": TinySize(576, 1536, 8, 8, 4),
}

_WORDS = (
    "the of and to in is it that for you was with on as have be at one this from by hot word "
    "but what some we can out other were all there when up use your how said an each she which "
    "do their time if will way about many then them write would like so these her long make "
    "thing see him two has look more day could go come did number sound no most people my over "
    "know water than call first who may down side been now find any new work part take get "
    "place made live where after back little only round man year came show every good me give "
    "our under name very through just form sentence great think say help low line differ turn "
    "cause much mean before move right boy old too same tell does set three want air well also "
    "play small end put home read hand port large spell add even land here must big high such "
    "follow act why ask men change went light kind off need house picture try us again animal "
    "point mother world near build self earth father head stand own page should country found "
    "answer school grow study still learn plant cover food sun four between state keep eye "
    "never last let thought city tree cross farm hard start might story saw far sea draw left "
    "late run while press close night real life few north open seem together next white "
    "children begin got walk example ease paper group always music those both mark often "
    "letter until mile river car feet care second book carry took science eat room friend "
    "began idea fish mountain stop once base hear horse cut sure watch color face wood main "
    "question search calculator result total price apples books train hours minutes cost each "
    "sum product divide multiply equals compute expression tool function arguments query"
).split()
_TOOL_NAMES = ("calculator", "search", "code_interpreter", "get_weather")


def _corpus_lines(rng: random.Random, n_lines: int) -> list[str]:
    """Synthetic training text: prose, numbers, arithmetic, JSON tool calls, chat markup."""
    lines = []
    for _ in range(n_lines):
        kind = rng.randrange(6)
        words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(4, 16)))
        if kind == 0:
            lines.append(words.capitalize() + rng.choice([".", "?", "!", ","]))
        elif kind == 1:
            a, b = rng.randint(0, 99999), rng.randint(1, 9999)
            op = rng.choice(["+", "-", "*", "/", "**", "//", "%"])
            lines.append(f"What is {a} {op} {b}? The answer is <answer>{a}</answer>.")
        elif kind == 2:
            name = rng.choice(_TOOL_NAMES)
            args = {"expression": f"{rng.randint(1, 999)} * {rng.randint(1, 999)}"}
            call = json.dumps({"name": name, "arguments": args})
            lines.append(f"{IM_START}assistant\n<tool_call>\n{call}\n</tool_call>{IM_END}")
        elif kind == 3:
            value = round(rng.uniform(-1e4, 1e4), rng.randint(0, 4))
            lines.append(
                f"{IM_START}user\n<tool_response>\n{value}\n</tool_response>{IM_END}\n"
                f"{IM_START}assistant\n<think>{words}</think>"
            )
        elif kind == 4:
            lines.append(
                f"{IM_START}system\nYou are a helpful assistant.{IM_END}\n"
                f"{IM_START}user\n{words}?{IM_END}\n{IM_START}assistant\n{words}.{IM_END}"
            )
        else:
            props = {"type": "object", "properties": {"query_list": {"type": "array"}}}
            lines.append(json.dumps({"type": "function", "function": {"name": "search",
                                                                     "parameters": props}}))
    return lines


def train_tiny_tokenizer(vocab_size: int = 4096, corpus_lines: int = 20000) -> (
        PreTrainedTokenizerFast):
    """Train the byte-level BPE tokenizer (deterministic: the corpus has a fixed seed)."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus_lines(random.Random(0), corpus_lines), trainer=trainer)
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False)
                          for t in TOOL_MARKUP_TOKENS])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        additional_special_tokens=[IM_START, IM_END],
        clean_up_tokenization_spaces=False,
        model_max_length=32768,
        padding_side="left",
    )
    fast.chat_template = QWEN25_CHAT_TEMPLATE
    return fast


def build_tiny_config(size: str, vocab_size: int, pad_token_id: int, eos_token_id: int,
                      max_position_embeddings: int = 4096,
                      tie_word_embeddings: bool = True) -> Qwen2Config:  # fmt: skip
    """A Qwen2 config of the named size (see TINY_SIZES)."""
    if size not in TINY_SIZES:
        raise ValueError(f"unknown tiny model size {size!r}; choose one of {sorted(TINY_SIZES)}")
    shape = TINY_SIZES[size]
    return Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_hidden_layers,
        num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_key_value_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=tie_word_embeddings,
        rope_theta=10000.0,
        rms_norm_eps=1e-6,
        bos_token_id=pad_token_id,
        pad_token_id=pad_token_id,
        eos_token_id=eos_token_id,
        use_cache=True,
    )


def make_tiny_model(out_dir: str | Path, size: str = "tiny", seed: int = 0,
                    vocab_size: int = 4096, chat_template: str = "qwen25",
                    tie_word_embeddings: bool = True) -> Path:  # fmt: skip
    """Write a tiny Qwen2 model + tokenizer directory to `out_dir` and return its path.

    `chat_template`: `qwen25` (Qwen2.5's tool rendering) or `compact_tools` (the tools as
    one short line; agentrl/models/chat_template.py). `tie_word_embeddings` false gives the
    output layer its own weights (what vLLM's CPU build needs to reload them: docs/backends.md). Deterministic: the same arguments
    give byte-identical weights and the same tokenizer on every machine.
    """
    if chat_template not in CHAT_TEMPLATES:
        raise ValueError(
            f"unknown chat_template {chat_template!r}; choose one of {sorted(CHAT_TEMPLATES)}"
        )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tiny_tokenizer(vocab_size=vocab_size)
    tokenizer.chat_template = CHAT_TEMPLATES[chat_template]
    # Round the embedding up to a multiple of 64, as real checkpoints do (ids past the
    # tokenizer are never produced by it, but the model may sample them).
    padded_vocab = -(-len(tokenizer) // 64) * 64
    im_end_id = tokenizer.convert_tokens_to_ids(IM_END)
    pad_id = tokenizer.convert_tokens_to_ids(PAD_TOKEN)
    config = build_tiny_config(size, padded_vocab, pad_token_id=pad_id, eos_token_id=im_end_id,
                               tie_word_embeddings=tie_word_embeddings)
    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    finally:
        torch.random.set_rng_state(generator_state)
    model.generation_config.eos_token_id = [im_end_id, pad_id]
    model.generation_config.pad_token_id = pad_id
    model.generation_config.do_sample = True
    model.generation_config.temperature = 1.0
    model.generation_config.top_p = 1.0
    model.generation_config.top_k = 0
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    n_params = sum(p.numel() for p in model.parameters())
    logger.info("wrote tiny %s model (%.2fM parameters, vocab %d) to %s",
                size, n_params / 1e6, padded_vocab, out)
    return out
