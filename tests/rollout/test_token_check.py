"""The tokenization sanity check as a pure function (agentrl/rollout/token_check.py)."""

from __future__ import annotations

import copy

import pytest

from agentrl.models.chat import ChatRenderer
from agentrl.rollout.request import RequestState
from agentrl.rollout.token_check import (
    CheckInput,
    CheckResult,
    check_mode,
    run_check,
    settled_messages,
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


def test_a_non_canonical_call_is_settled_to_the_models_text(renderer, cases):
    req = cases["demoted"]
    (index, text, _), = req.unverified
    result = run_check(renderer, req.check_input("strict"))
    assert result == CheckResult((index,), "match")
    assert "tool_calls" in req.messages[index]  # the input is untouched
    settled = settled_messages(req.messages, req.unverified, result.demoted)
    assert settled[index] == {"role": "assistant", "content": text}


def test_settling_only(renderer, cases):
    req = cases["demoted"]
    item = req.check_input("disable")
    assert item is not None and not item.check  # the unverified turn still settles
    assert run_check(renderer, item) == CheckResult((1,), None)
    req.finalize(renderer, 10_000, "response_length", "disable")
    assert req.check_input("disable") is None  # nothing left to do
    assert req.metrics.tokenization == "unchecked" and "tool_calls" not in req.messages[1]


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
