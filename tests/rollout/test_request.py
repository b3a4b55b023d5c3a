"""AsyncRolloutRequest: aligned token lists, template deltas, messages, finalize."""

from __future__ import annotations

import pytest

from agentrl.models.chat import ChatRenderer
from agentrl.rollout.request import AsyncRolloutRequest, FinishReason, RequestState

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
CALL = '<tool_call>\n{"name": "calc", "arguments": {"x": "2*3"}}\n</tool_call>'


@pytest.fixture(scope="module")
def renderer(tiny_tokenizer):
    return ChatRenderer(tiny_tokenizer)


def new_request(renderer, tools=TOOLS) -> AsyncRolloutRequest:
    return AsyncRolloutRequest.from_prompt(
        renderer,
        [{"role": "user", "content": "2*3?"}],
        tools,
        batch_data_id=3,
        rollout_offset=1,
        request_id="r-3-1",
        tools_kwargs={"calc": {}},
    )


def ids(tokenizer, text):
    return tokenizer.encode(text, add_special_tokens=False)


def test_prompt(renderer, tiny_tokenizer):
    req = new_request(renderer)
    prompt = tiny_tokenizer.apply_chat_template(
        req.messages, tools=TOOLS, tokenize=False, add_generation_prompt=True
    )
    assert req.input_ids == ids(tiny_tokenizer, prompt)
    assert req.prompt_length == len(req.input_ids) and req.response_length == 0
    assert req.loss_mask == [0] * req.prompt_length
    assert req.attention_mask == [1] * req.prompt_length
    assert req.rollout_log_probs == [0.0] * req.prompt_length
    assert req.state == RequestState.PENDING


def test_append_keeps_lists_aligned(renderer):
    req = new_request(renderer)
    n = req.prompt_length
    req.append([5, 6], 1, [-0.1, -0.2])
    req.append([7], 0)
    assert req.input_ids[n:] == [5, 6, 7]
    assert req.loss_mask[n:] == [1, 1, 0]
    assert req.rollout_log_probs[n:] == [-0.1, -0.2, 0.0]
    assert req.position_ids == list(range(n + 3))
    with pytest.raises(ValueError, match="r-3-1: 1 log-probs for 2 tokens"):
        req.append([1, 2], 1, [0.0])


def test_tool_turn_tokens_equal_the_whole_rendering(renderer, tiny_tokenizer):
    req = new_request(renderer)
    output = ids(tiny_tokenizer, CALL + "<|im_end|>")
    content = req.add_model_output(renderer, output, [-1.0] * len(output))
    assert (content, req.pending_suffix) == (CALL, "\n")
    call = {"id": "c0", "type": "function", "function": {"name": "calc", "arguments": {"x": "2*3"}}}
    req.add_assistant_message(renderer, content, "", [call])
    assert req.written_messages(renderer) == req.messages  # canonical: rendered as is
    assert req.messages[-1] == {"role": "assistant", "content": "", "tool_calls": [call]}
    assert (req.unverified, req.verbatim) == ([], {})
    req.add_messages(renderer, [{"role": "tool", "content": "6"}])
    assert req.pending_suffix == ""
    whole = tiny_tokenizer.apply_chat_template(
        req.messages, tools=TOOLS, tokenize=False, add_generation_prompt=True
    )
    assert req.input_ids == ids(tiny_tokenizer, whole)
    assert req.loss_mask[req.prompt_length :] == [1] * len(output) + [0] * (
        len(req.input_ids) - req.prompt_length - len(output)
    )


def test_non_canonical_calls_stay_the_messages_calls_and_are_checked_as_written(
    renderer, tiny_tokenizer
):
    """Two compact calls back to back (the template writes them spaced, a newline between):
    the message keeps both as tool_calls, what the engine runs; the model's text is kept
    for the check, which renders the turn as written and matches the tokens."""
    req = new_request(renderer)
    compact = ('<tool_call>{"name":"calc","arguments":{"x":"1"}}</tool_call>'
               '<tool_call>{"name":"calc","arguments":{"x":"2"}}</tool_call>')  # fmt: skip
    content = req.add_model_output(renderer, ids(tiny_tokenizer, compact + "<|im_end|>"), None)
    calls = [{"id": f"call_1_{k}", "type": "function",
              "function": {"name": "calc", "arguments": {"x": x}}} for k, x in enumerate("12")]  # fmt: skip
    req.add_assistant_message(renderer, content, "", calls)
    structured = {"role": "assistant", "content": "", "tool_calls": calls}
    with pytest.raises(ValueError, match="r-3-1: 1 model turn.* not checked yet"):
        req.written_messages()
    written = req.written_messages(renderer)  # settles the turn
    assert written[-1] == {"role": "assistant", "content": compact}
    assert req.messages[-1] == structured and (req.unverified, req.verbatim) == ([], {1: compact})
    answers = [{"role": "tool", "content": x, "tool_call_id": f"call_1_{k}"}
               for k, x in enumerate("12")]  # fmt: skip
    req.add_messages(renderer, answers)
    whole = renderer.render(req.written_messages(), True, TOOLS)
    assert req.input_ids == ids(tiny_tokenizer, whole)
    req.finish(FinishReason.STOP)
    req.finalize(renderer, 10_000, "response_length", "strict")
    assert req.metrics.tokenization == "match" and req.state == RequestState.COMPLETED
    assert req.messages[1:] == [structured, *answers]


def test_finalize_checks_then_truncates(renderer, tiny_tokenizer):
    req = new_request(renderer)
    output = ids(tiny_tokenizer, "six six six<|im_end|>")
    content = req.add_model_output(renderer, output, [-0.5] * len(output))
    req.add_assistant_message(renderer, content, content, [])
    req.step_rewards = [(1, 0.5), (len(output) - 1, 1.0)]
    req.finish(FinishReason.STOP)
    req.finalize(renderer, 2, "response_length", "strict")
    assert req.metrics.tokenization == "match"  # checked before the cut
    assert req.response_ids == output[:2]
    assert {
        len(req.input_ids),
        len(req.attention_mask),
        len(req.position_ids),
        len(req.loss_mask),
        len(req.rollout_log_probs),
    } == {req.prompt_length + 2}
    assert (req.finish_reason, req.truncation) == (FinishReason.LENGTH, "response_length")
    assert req.step_rewards == [(1, 0.5)]


def test_failed_request_has_zero_loss_mask(renderer, tiny_tokenizer):
    req = new_request(renderer)
    req.add_model_output(renderer, ids(tiny_tokenizer, "x<|im_end|>"), None)
    req.fail("backend error")
    req.finalize(renderer, 100, "response_length", "strict")
    assert (req.state, req.error, req.finish_reason) == (
        RequestState.FAILED,
        "backend error",
        FinishReason.ABORT,
    )
    assert req.metrics.tokenization == "unchecked" and sum(req.loss_mask) == 0
    with pytest.raises(ValueError, match="tokenization_sanity_check_mode 'loose'"):
        req.finalize(renderer, 100, "response_length", "loose")


def test_metrics_as_dict_and_num_turns(renderer):
    req = new_request(renderer)
    req.metrics.assistant_turns, req.metrics.user_turns = 3, 2
    req.metrics.tool_calls["calc"] += 2
    assert req.num_turns() == 6
    as_dict = req.metrics.as_dict()
    assert as_dict["tool_calls"] == {"calc": 2} and type(as_dict["tool_calls"]) is dict


# ---------------------------------------------------------------------- the sanity check


def reference_check(req: AsyncRolloutRequest, renderer: ChatRenderer) -> str:
    """The check as it was before it reused known pieces: the whole rendering encoded."""
    messages = req.written_messages(renderer)
    ends_with_model = messages[-1]["role"] == "assistant"
    expected = renderer.render(messages, not ends_with_model, req.tool_schemas)
    if ends_with_model and req.pending_suffix:
        if not expected.endswith(req.pending_suffix):
            return "text_drift"
        expected = expected[: len(expected) - len(req.pending_suffix)]
    actual = renderer.decode(req.input_ids)
    if actual != expected:
        return "strippable_drift" if "".join(actual.split()) == "".join(expected.split()) \
            else "text_drift"  # fmt: skip
    return "token_drift" if renderer.encode(expected) != req.input_ids else "match"


WORDS = ["the", "answer", "is", "42", "  ", "\n", "é", "e\u0301", "calc", "<|im_", "end|>", "😀"]


def random_conversation(renderer, tokenizer, rng) -> AsyncRolloutRequest:
    """A request after 1-3 model turns: canonical or spelled-out ids, tool calls with unique
    responses, stops at <|im_end|> or mid-turn, and (sometimes) its messages edited
    afterwards by whitespace only or by a word."""
    req = new_request(renderer)
    for turn in range(rng.randint(1, 3)):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 6)))
        calls = rng.random() < 0.6 and turn < 2
        if calls:
            text += "\n" + CALL
        if rng.random() < 0.8:
            text += "<|im_end|>"
        output = ids(tokenizer, text)
        if rng.random() < 0.3:  # a word spelled letter by letter: token drift
            output = [t for piece in text.partition("the")[::2] for t in ids(tokenizer, piece)]
            if "the" in text:
                at = len(ids(tokenizer, text.partition("the")[0]))
                output[at:at] = tokenizer.convert_tokens_to_ids(list("the"))
        content = req.add_model_output(renderer, output, None)
        call = {"type": "function", "function": {"name": "calc", "arguments": {"x": "2*3"}}}
        if calls and content.endswith(CALL):
            req.add_assistant_message(renderer, content, content[: -len(CALL)], [call])
        else:
            req.add_assistant_message(renderer, content, content, [])
        if not calls:
            break
        req.add_messages(renderer, [{"role": "tool", "content": f"{rng.random()} <x>\n"}])
    edit = rng.random()
    last = next(m for m in reversed(req.messages) if m["role"] == "assistant")
    if edit < 0.15:
        last["content"] = last["content"] + "  "
    elif edit < 0.3:
        last["content"] = last["content"].replace("is", "was") + "!"
    return req


def test_the_check_reports_what_encoding_the_whole_rendering_reports(renderer, tiny_tokenizer):
    import random

    rng = random.Random(0)
    seen = []
    for _ in range(300):
        req = random_conversation(renderer, tiny_tokenizer, rng)
        expected = reference_check(req, renderer)
        req.finish(FinishReason.STOP)
        req.finalize(renderer, 10_000, "response_length", "ignore_strippable")
        assert req.metrics.tokenization == expected, req.messages
        assert req.known_pieces == {}  # dropped once checked
        seen.append(expected)
    counts = {result: seen.count(result) for result in set(seen)}
    assert set(counts) == {"match", "token_drift", "strippable_drift", "text_drift"}, counts
    assert min(counts.values()) >= 10, counts


def test_the_check_reuses_the_prompt_and_tool_pieces(tiny_tokenizer, monkeypatch):
    renderer = ChatRenderer(tiny_tokenizer)  # an empty cache of pieces
    req = new_request(renderer)
    prompt_pieces = dict(req.known_pieces)
    assert prompt_pieces  # recorded when the prompt was encoded
    output = ids(tiny_tokenizer, CALL + "<|im_end|>")
    content = req.add_model_output(renderer, output, None)
    call = {"type": "function", "function": {"name": "calc", "arguments": {"x": "2*3"}}}
    req.add_assistant_message(renderer, content, "", [call])
    req.add_messages(renderer, [{"role": "tool", "content": "a tool response seen once"}])
    assert "\na tool response seen once\n" in req.known_pieces
    encoded: list[str] = []
    real = renderer.encode
    monkeypatch.setattr(renderer.pieces, "encode_text", lambda t: encoded.append(t) or real(t))
    req.finish(FinishReason.STOP)
    req.finalize(renderer, 10_000, "response_length", "strict")
    assert req.metrics.tokenization == "match"
    # the prompt (system, tool schemas), the tool turn: known; the model's own text: encoded
    assert encoded == ['\n{"name": "calc", "arguments": {"x": "2*3"}}\n']
