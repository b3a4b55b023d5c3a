"""ChatRenderer: deltas equal the whole rendering's suffix; the Qwen pitfalls are handled."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from agentrl.models.chat import ChatRenderer, TemplateError
from agentrl.models.chat_template import DEFAULT_SYSTEM_PROMPT, QWEN25_CHAT_TEMPLATE

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calc",
            "description": "d",
            "parameters": {
                "type": "object",
                "properties": {"x": {"type": "string"}},
                "required": ["x"],
            },
        },
    }
]


@pytest.fixture(scope="module")
def renderer(tiny_tokenizer):
    return ChatRenderer(tiny_tokenizer)


def test_template_pieces(renderer):
    assert renderer.generation_prompt == "<|im_start|>assistant\n"
    assert renderer.assistant_prefix == "<|im_start|>assistant\n"
    assert renderer.turn_end == "<|im_end|>\n"


def test_tool_delta_is_the_suffix_of_the_whole_rendering(renderer):
    conversation = [
        {"role": "user", "content": "What is 2*3?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"type": "function", "function": {"name": "calc", "arguments": {"x": "2*3"}}}
            ],
        },
    ]
    tool_messages = [{"role": "tool", "content": "6"}, {"role": "tool", "content": " \n7\t"}]
    before = renderer.render(conversation, tools=TOOLS)
    after = renderer.render(conversation + tool_messages, True, TOOLS)
    delta = renderer.delta_text(tool_messages)
    assert delta == (
        "<|im_start|>user\n<tool_response>\n6\n</tool_response>\n<tool_response>\n"
        " \n7\t\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    assert before + delta == after
    assert DEFAULT_SYSTEM_PROMPT not in delta  # rendering tool messages alone would inject it


def test_user_delta(renderer):
    assert renderer.delta_text([{"role": "user", "content": "Try again."}]) == (
        "<|im_start|>user\nTry again.<|im_end|>\n<|im_start|>assistant\n"
    )


@pytest.mark.parametrize(
    "text, content, missing",
    [
        ("answer<|im_end|>", "answer", "\n"),  # the usual stop: newline missing
        ("answer<|im_end|>\n", "answer", ""),  # the model wrote the newline too
        ("answer", "answer", "<|im_end|>\n"),  # stopped by length
        ("a <", "a <", "<|im_end|>\n"),  # never cut inside the EOS text
        ("x<|endoftext|>", "x<|endoftext|>", "<|im_end|>\n"),  # another stop token stays content
    ],
)
def test_split_turn_end(renderer, text, content, missing):
    assert renderer.split_turn_end(text) == (content, missing)


def test_assistant_text(renderer):
    message = {
        "role": "assistant",
        "content": "Hi",
        "tool_calls": [{"function": {"name": "calc", "arguments": {"x": "1"}}}],
    }
    assert renderer.assistant_text(message) == (
        '<|im_start|>assistant\nHi\n<tool_call>\n{"name": "calc", "arguments": {"x": "1"}}\n'
        "</tool_call><|im_end|>\n"
    )


def test_decode_keeps_special_tokens(renderer, tiny_tokenizer):
    ids = tiny_tokenizer.encode("a<tool_call>b<|im_end|>", add_special_tokens=False)
    assert renderer.decode(ids) == "a<tool_call>b<|im_end|>"


def test_not_prefix_stable_template_is_rejected(tiny_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    tokenizer.chat_template = "{{ messages | length }}" + QWEN25_CHAT_TEMPLATE
    with pytest.raises(
        TemplateError,
        match=r"not prefix-stable: appending an assistant message changes the text rendered "
        r"before it \(at character 0: '2<\|im_start\|>system",
    ):
        ChatRenderer(tokenizer)


def test_one_message_deltas_are_concatenated_exactly_as_rendered(tiny_tokenizer):
    renderer = ChatRenderer(tiny_tokenizer)
    contents = ["done", "", "  spaced \n\t", "{{ not jinja }} {% raw %}", "<tool_call>x</tool_call>",
                "line\n\nbreaks\n", "ünïcödé ✓"]
    for content in contents:
        for message in ({"role": "tool", "name": "calc", "content": content},
                        {"role": "user", "content": content}):
            for prompt in (True, False):
                assert renderer.delta_text([message], prompt) == renderer._render_delta(
                    [message], prompt)
    assert renderer._verbatim  # the fast path was taken
    # two messages, or content that is not a string, are always rendered
    two = [{"role": "tool", "content": "a"}, {"role": "tool", "content": "b"}]
    assert renderer.delta_text(two) == renderer._render_delta(two, True)


def test_prompts_are_joined_exactly_as_rendered(tiny_tokenizer):
    renderer = ChatRenderer(tiny_tokenizer)
    tools = [{"type": "function", "function": {"name": "calc", "description": "Add.",
                                               "parameters": {"type": "object", "properties": {}}}}]
    contents = ["Task 1.", "", "  spaced \n\t", "{{ not jinja }} {% raw %}", "<tool_call>x",
                "ünïcödé ✓\n\n"]  # fmt: skip
    for content in contents:
        for messages in ([{"role": "user", "content": content}],
                         [{"role": "system", "content": "Be brief."}, {"role": "user", "content": content}],
                         [{"role": "user", "content": content}, {"role": "assistant", "content": "a"},
                          {"role": "user", "content": content + "?"}]):  # fmt: skip
            for schemas in (None, tools):
                for prompt in (True, False):
                    assert renderer.render_prompt(messages, prompt, schemas) == renderer.render(
                        messages, prompt, schemas)
    assert all(v[1] is not None for v in renderer._prompt_shapes.values())  # joined, not rendered
    # other schemas with the same ids' shape are probed again, not joined from stale text
    other = [{**tools[0], "function": {**tools[0]["function"], "description": "Subtract."}}]
    messages = [{"role": "user", "content": "x"}]
    assert renderer.render_prompt(messages, True, other) == renderer.render(messages, True, other)
    # a message with more than role and content is rendered
    named = [{"role": "user", "content": "x", "name": "ann"}]
    assert renderer.render_prompt(named) == renderer.render(named, True)


def test_a_template_that_trims_content_renders_prompts(tiny_tokenizer):
    import copy

    trimming = copy.deepcopy(tiny_tokenizer)
    trimming.chat_template = tiny_tokenizer.chat_template.replace(
        "message.content", "(message.content | trim)")
    renderer = ChatRenderer(trimming)
    messages = [{"role": "user", "content": "  padded  "}]
    assert renderer.render_prompt(messages) == renderer.render(messages, True)
    assert all(v[1] is None for v in renderer._prompt_shapes.values())


@pytest.mark.parametrize("change", ["message.content.rstrip()",
                                    "(message.content or '(empty)')"])  # fmt: skip
def test_a_template_that_changes_trailing_space_or_empty_content_renders_prompts(
        tiny_tokenizer, change):
    # each probe goes into every message as it is: a content changed only at its end, or
    # only when empty, is seen in a prompt of several messages too
    import copy

    changing = copy.deepcopy(tiny_tokenizer)
    changing.chat_template = tiny_tokenizer.chat_template.replace("message.content", change)
    renderer = ChatRenderer(changing)
    for user in ("padded \n\t", ""):
        messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": user}]
        assert renderer.render_prompt(messages) == renderer.render(messages, True)
    assert all(v[1] is None for v in renderer._prompt_shapes.values())


def test_a_template_that_trims_content_gets_no_fast_path(tiny_tokenizer):
    import copy

    trimming = copy.deepcopy(tiny_tokenizer)
    trimming.chat_template = tiny_tokenizer.chat_template.replace(
        "message.content", "(message.content | trim)")
    renderer = ChatRenderer(trimming)
    message = {"role": "tool", "name": "calc", "content": "  padded  "}
    assert renderer.delta_text([message]) == renderer._render_delta([message], True)
    assert all(v is None for v in renderer._verbatim.values())


def test_tool_results_with_new_call_ids_share_one_cached_shape(tiny_tokenizer):
    renderer = ChatRenderer(tiny_tokenizer)
    for i in range(300):  # more call ids than the cache holds shapes
        message = {"role": "tool", "name": "bash", "tool_call_id": f"call_{i}", "content": f"r{i}"}
        assert renderer.delta_text([message]) == renderer._render_delta([message], True)
    # one id-free entry serves every call id (the template does not write the id)
    assert len(renderer._verbatim) == 1
    assert next(iter(renderer._verbatim.values())) is not None


def test_a_template_that_writes_the_call_id_keeps_it_in_the_text(tiny_tokenizer):
    import copy

    writing_ids = copy.deepcopy(tiny_tokenizer)
    writing_ids.chat_template = tiny_tokenizer.chat_template.replace(
        "message.content", "(message.tool_call_id or '') + message.content")
    renderer = ChatRenderer(writing_ids)
    for i in range(3):
        message = {"role": "tool", "tool_call_id": f"id{i}", "content": "out"}
        text = renderer.delta_text([message])
        assert text == renderer._render_delta([message], True)
        assert f"id{i}out" in text


def test_the_shape_cache_evicts_the_least_recently_used(tiny_tokenizer, monkeypatch):
    from agentrl.models import chat

    monkeypatch.setattr(chat, "_MAX_VERBATIM_SHAPES", 2)
    renderer = ChatRenderer(tiny_tokenizer)
    for name in ("a", "b", "a", "c"):
        renderer.delta_text([{"role": "tool", "name": name, "content": "x"}])
    names = [dict(key[0]).get("name") for key in renderer._verbatim]
    assert names == ["a", "c"]  # "b" was the least recently used


def test_encode_is_the_tokenizers_encode(tiny_model_dir):
    import random

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    renderer = ChatRenderer(tokenizer)
    assert renderer._backend_encode is not None  # the wrapper skipped
    rng = random.Random(0)
    pieces = ["a", " ", "\n", "é", "中", "🙂", "<|im_end|>", "<tool_call>", "<|im_", "42", "\t"]
    for _ in range(200):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 20)))
        assert renderer.encode(text) == tokenizer.encode(text, add_special_tokens=False)


def test_encode_keeps_the_wrapper_where_it_changes_the_ids(tiny_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    tokenizer.backend_tokenizer.enable_truncation(3)  # the wrapper turns it off per call
    assert ChatRenderer(tokenizer)._backend_encode is None
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir, split_special_tokens=True)
    renderer = ChatRenderer(tokenizer)
    assert renderer._backend_encode is None
    text = "a<|im_end|>"
    assert renderer.encode(text) == tokenizer.encode(text, add_special_tokens=False)
