"""The tokenization sanity check as a pure function (agentrl/rollout/token_check.py)."""

from __future__ import annotations

import copy

import pytest

from agentrl.models.chat import ChatRenderer
from agentrl.rollout.request import RequestState
from agentrl.rollout.token_check import (
    CheckInput,
    CheckResult,
    as_written,
    check_mode,
    run_check,
)
from agentrl.testing.rollout import token_check_cases

KINDS = ("match", "token_drift", "strippable_drift", "text_drift")


@pytest.fixture(scope="module")
def renderer(tiny_tokenizer):
    return ChatRenderer(tiny_tokenizer)


@pytest.fixture
def cases(renderer, tiny_tokenizer):
    return token_check_cases(renderer, tiny_tokenizer)


@pytest.mark.parametrize("kind", KINDS)
def test_each_result_and_nothing_changed(renderer, cases, kind):
    req = cases[kind]
    item = req.check_input("strict")
    before = copy.deepcopy(item)
    result = run_check(renderer, item)
    assert result == CheckResult((), kind)  # the canonical call stays structured
    assert item == before  # a pure function of its input
    assert req.unverified and "tool_calls" in req.messages[1]


def test_a_non_canonical_call_is_checked_as_written(renderer, cases):
    """The message keeps its tool call (what ran); the check renders the model's text."""
    req = cases["verbatim"]
    (index, text, _), = req.unverified
    result = run_check(renderer, req.check_input("strict"))
    assert result == CheckResult((index,), "match")
    assert "tool_calls" in req.messages[index]  # the input is untouched
    written = as_written(req.messages, {index: text})
    assert written[index] == {"role": "assistant", "content": text}
    assert written[:index] + written[index + 1:] == req.messages[:index] + req.messages[index + 1:]
    req.apply_check(result, "strict")
    assert (req.verbatim, req.unverified) == ({index: text}, [])
    assert req.messages[index]["tool_calls"][0]["function"]["name"] == "echo"


def test_a_turn_settled_earlier_is_still_checked_as_written(renderer, cases):
    """A second check (or one after settling) reads the turns settled before from
    `verbatim`, not from the unverified list: the same match."""
    req = cases["verbatim"]
    req.written_messages(renderer)  # settles now
    item = req.check_input("strict")
    assert item.unverified == [] and item.verbatim == req.verbatim != {}
    assert run_check(renderer, item) == CheckResult((), "match")


def test_settling_only(renderer, cases):
    req = cases["verbatim"]
    item = req.check_input("disable")
    assert item is not None and not item.check  # the unverified turn still settles
    assert run_check(renderer, item) == CheckResult((1,), None)
    req.finalize(renderer, 10_000, "response_length", "disable")
    assert req.check_input("disable") is None  # nothing left to do
    assert req.metrics.tokenization == "unchecked" and "tool_calls" in req.messages[1]
    assert list(req.verbatim) == [1]


@pytest.mark.parametrize("mode, failing", [("strict", {"strippable_drift", "text_drift"}),
                                           ("ignore_strippable", {"text_drift"})])  # fmt: skip
def test_finalize_applies_a_result_computed_elsewhere(renderer, cases, mode, failing):
    for kind in KINDS:
        inline, given = token_check_cases(renderer, renderer.tokenizer)[kind], cases[kind]
        inline.finalize(renderer, 10_000, "response_length", mode)
        result = run_check(renderer, given.check_input(mode))
        given.finalize(None, 10_000, "response_length", mode, result)  # no renderer needed
        assert given.metrics.tokenization == inline.metrics.tokenization == kind
        assert (given.state == RequestState.FAILED) == (kind in failing)
        assert (given.state, given.error, given.messages, given.loss_mask) == (
            inline.state, inline.error, inline.messages, inline.loss_mask)


def test_a_failed_request_is_not_checked(renderer, cases):
    req = cases["text_drift"]
    req.fail("backend error")
    item = req.check_input("strict")
    assert item is not None and not item.check  # its structured turn still settles


def test_check_mode_names_the_choices():
    assert check_mode("strict") == "strict"
    with pytest.raises(ValueError, match="'loose'; choose one of strict, ignore_strippable"):
        check_mode("loose")


def test_check_input_is_what_the_check_reads(cases):
    req = cases["match"]
    item = req.check_input("strict")
    assert isinstance(item, CheckInput)
    assert (item.request_id, item.input_ids, item.pending_suffix, item.check) == (
        "match", req.input_ids, req.pending_suffix, True)
