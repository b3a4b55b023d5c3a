"""Tiny offline models: deterministic, loadable the standard way, and Qwen2.5-shaped."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2ForCausalLM

from agentrl.cli import main as cli_main
from agentrl.models.chat_template import DEFAULT_SYSTEM_PROMPT, QWEN25_CHAT_TEMPLATE
from agentrl.models.tiny import TINY_SIZES, build_tiny_config, make_tiny_model, train_tiny_tokenizer

CALC_SCHEMA = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
    },
}


def test_loads_with_auto_classes_and_is_qwen2(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert isinstance(model, Qwen2ForCausalLM)
    assert model.config.model_type == "qwen2"
    assert model.config.vocab_size % 64 == 0 and model.config.vocab_size >= len(tok)
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    assert tok.padding_side == "left"
    assert model.generation_config.eos_token_id == [tok.eos_token_id, tok.pad_token_id]


def test_same_seed_same_model_other_seed_differs(tmp_path, tiny_model_dir):
    again = make_tiny_model(tmp_path / "a", size="tiny", seed=0)
    other = make_tiny_model(tmp_path / "b", size="tiny", seed=1)
    sd0 = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()
    sd_again = AutoModelForCausalLM.from_pretrained(again).state_dict()
    sd_other = AutoModelForCausalLM.from_pretrained(other).state_dict()
    assert all(torch.equal(sd0[k], sd_again[k]) for k in sd0)
    assert not torch.equal(sd0["model.embed_tokens.weight"], sd_other["model.embed_tokens.weight"])
    assert (again / "tokenizer.json").read_text() == (tiny_model_dir / "tokenizer.json").read_text()


def test_make_does_not_disturb_global_rng(tmp_path):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    make_tiny_model(tmp_path, size="tiny", seed=7)
    assert torch.equal(torch.rand(3), expected)


def test_save_reload_gives_identical_logits(tmp_path, tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    model.save_pretrained(tmp_path)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    ids = torch.tensor([[5, 17, 300, 42, 9]])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, reloaded(ids).logits)  # (1, 5, V)


@pytest.mark.parametrize(
    "text",
    [
        "What is 123456 * 789? The answer is <answer>97406784</answer>.",
        '<tool_call>\n{"name": "calculator", "arguments": {"expression": "2**10"}}\n</tool_call>',
        "naïve café — 東京 🙂\n\n\tindented  spaces",
        "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n",
    ],
)
def test_trained_and_reloaded_tokenizer_agree(tiny_tokenizer, text):
    trained = train_tiny_tokenizer()
    ids = trained.encode(text, add_special_tokens=False)
    assert tiny_tokenizer.encode(text, add_special_tokens=False) == ids
    assert tiny_tokenizer.decode(ids) == text


def test_markup_tokens_are_single_ids_and_survive_skip_special(tiny_tokenizer):
    for token in ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_call>",
                  "<tool_response>", "</tool_response>"]:
        assert tiny_tokenizer.convert_ids_to_tokens(
            tiny_tokenizer.encode(token, add_special_tokens=False)) == [token]
    ids = tiny_tokenizer.encode("<tool_call>x</tool_call><|im_end|>", add_special_tokens=False)
    assert tiny_tokenizer.decode(ids, skip_special_tokens=True) == "<tool_call>x</tool_call>"
    # Digits are split one by one (Qwen2's pre-tokenizer), as in real Qwen models.
    assert tiny_tokenizer.tokenize("2024") == ["2", "0", "2", "4"]


def test_chat_template_renders_tools_calls_and_responses(tiny_tokenizer):
    messages = [
        {"role": "user", "content": "What is 12*7?"},
        {"role": "assistant", "content": "",
         "tool_calls": [{"type": "function",
                         "function": {"name": "calculator", "arguments": {"expression": "12*7"}}}]},
        {"role": "tool", "content": "84"},
        {"role": "tool", "content": "85"},
    ]
    text = tiny_tokenizer.apply_chat_template(
        messages, tools=[CALC_SCHEMA], tokenize=False, add_generation_prompt=True)
    expected = (
        "<|im_start|>system\nYou are a helpful assistant.\n\n# Tools\n\nYou may call one or more "
        "functions to assist with the user query.\n\nYou are provided with function signatures "
        "within <tools></tools> XML tags:\n<tools>\n" + json.dumps(CALC_SCHEMA) + "\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
        "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\nWhat is 12*7?<|im_end|>\n"
        "<|im_start|>assistant\n<tool_call>\n"
        '{"name": "calculator", "arguments": {"expression": "12*7"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\n84\n</tool_response>\n<tool_response>\n85\n"
        "</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    assert text == expected


def test_string_arguments_are_not_double_encoded(tiny_tokenizer):
    call = {"function": {"name": "calculator", "arguments": '{"expression": "1+1"}'}}
    text = tiny_tokenizer.apply_chat_template(
        [{"role": "assistant", "content": "ok", "tool_calls": [call]}], tokenize=False)
    assert '{"name": "calculator", "arguments": {"expression": "1+1"}}' in text
    assert text.startswith("<|im_start|>system\n" + DEFAULT_SYSTEM_PROMPT)
    assert "<|im_start|>assistant\nok\n<tool_call>" in text


def test_user_system_prompt_replaces_default(tiny_tokenizer):
    text = tiny_tokenizer.apply_chat_template(
        [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "hi"}],
        tokenize=False)
    assert text == "<|im_start|>system\nBe terse.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"


@pytest.mark.parametrize("size,low,high", [("nano", 0.25e6, 0.45e6), ("tiny", 0.5e6, 1.5e6), ("small", 3e6, 7e6),
                                           ("medium", 15e6, 25e6), ("large", 25e6, 35e6)])
def test_sizes_span_one_to_thirty_million_parameters(size, low, high):
    config = build_tiny_config(size, vocab_size=4096, pad_token_id=0, eos_token_id=2)
    with torch.device("meta"):
        n = sum(p.numel() for p in Qwen2ForCausalLM(config).parameters())
    assert low <= n <= high


def test_unknown_size_names_the_choices():
    with pytest.raises(ValueError, match="unknown tiny model size 'huge'.*large.*tiny"):
        build_tiny_config("huge", vocab_size=64, pad_token_id=0, eos_token_id=1)
    assert set(TINY_SIZES) == {"nano", "tiny", "small", "medium", "large"}


def test_cli_writes_a_loadable_directory(tmp_path):
    assert cli_main(["make-tiny-model", str(tmp_path / "m"), "--size", "tiny", "--seed", "3"]) == 0
    assert AutoTokenizer.from_pretrained(tmp_path / "m").eos_token == "<|im_end|>"
    assert AutoModelForCausalLM.from_pretrained(tmp_path / "m").config.num_hidden_layers == 3


def test_compact_tools_template_lists_tools_in_one_line_and_keeps_the_rest(tmp_path):
    """`compact_tools` differs from `qwen25` only in the system turn's tool block, and the
    rollout's token-delta renderer accepts it (prefix-stable)."""
    from agentrl.models.chat import ChatRenderer
    from agentrl.models.chat_template import COMPACT_TOOLS_CHAT_TEMPLATE
    from tools.calculator import DEFAULT_SCHEMA

    path = make_tiny_model(tmp_path / "m", size="nano", chat_template="compact_tools")
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert tokenizer.chat_template == COMPACT_TOOLS_CHAT_TEMPLATE
    messages = [
        {"role": "system", "content": "Use the calculator."},
        {"role": "user", "content": "What is 2 + 3?"},
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
            "name": "calculator", "arguments": {"expression": "2 + 3"}}}]},
        {"role": "tool", "content": "5"},
    ]  # fmt: skip
    text = tokenizer.apply_chat_template(messages, tools=[DEFAULT_SCHEMA], tokenize=False)
    assert text.startswith(
        "<|im_start|>system\nUse the calculator.\nTools: calculator(expression)<|im_end|>\n"
    )
    qwen = AutoTokenizer.from_pretrained(path)
    qwen.chat_template = QWEN25_CHAT_TEMPLATE
    full = qwen.apply_chat_template(messages, tools=[DEFAULT_SCHEMA], tokenize=False)
    assert text.split("<|im_end|>\n", 1)[1] == full.split("<|im_end|>\n", 1)[1]
    ChatRenderer(tokenizer)  # raises TemplateError if deltas cannot be rendered
    with pytest.raises(ValueError, match="unknown chat_template 'x'.*compact_tools"):
        make_tiny_model(tmp_path / "n", chat_template="x")
