"""The tokenization sanity check of a finished trajectory, as a pure function of its inputs.

    item = request.check_input(mode)                # a snapshot: messages, ids, ...
    result = run_check(renderer, item)              # here, or in another process
    request.apply_check(result, mode)               # the request's own effects

`run_check` first settles the structured assistant turns not checked yet (which ones the
template renders otherwise than the model wrote them: those are rendered as the model's text,
while the messages keep their tool calls), then, unless told not to, compares the trajectory
with the template's rendering of the whole conversation as written: the text (`text_drift`, or `strippable_drift` when only
whitespace differs), then the ids of its encoding (`token_drift`), else `match`. It reads
nothing but its `CheckInput` and the renderer, and changes neither, so the engine may run it
off its event loop (agentrl/rollout/check_offload.py) with the same answer.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agentrl.models.chat import ChatRenderer

logger = logging.getLogger(__name__)

SANITY_CHECK_MODES = ("strict", "ignore_strippable", "disable")
# the check's results that FAIL a request, per multi_turn.tokenization_sanity_check_mode
FAILING = {
    "strict": ("text_drift", "strippable_drift"),
    "ignore_strippable": ("text_drift",),
    "disable": (),
}


def check_mode(mode: str) -> str:
    """`mode` if it is a sanity check mode; a ValueError naming the choices otherwise."""
    if mode not in SANITY_CHECK_MODES:
        raise ValueError(
            f"tokenization_sanity_check_mode {mode!r}; choose one of {', '.join(SANITY_CHECK_MODES)}"
        )
    return mode


@dataclass(frozen=True)
class CheckInput:
    """What the check reads of one trajectory (small: it is pickled to the check's process)."""

    request_id: str
    messages: list[dict]
    # structured assistant turns not settled yet: (index in messages, the model's text,
    # the text the turn must render to)
    unverified: list[tuple[int, str, str]]
    tool_schemas: list[dict]
    input_ids: list[int]
    pending_suffix: str = ""
    known_pieces: dict[str, tuple[int, ...]] = field(default_factory=dict)
    check: bool = True  # False: settle the unverified turns only
    # turns settled earlier that are rendered as written: index in messages -> model's text
    verbatim: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckResult:
    """The check's answer: the unverified turns rendered as written (the template writes them
    otherwise), and the tokenization (`match`, `token_drift`, `strippable_drift`,
    `text_drift`; None when not checked)."""

    verbatim: tuple[int, ...] = ()
    tokenization: str | None = None


def settle(renderer: ChatRenderer, messages: Sequence[dict],
           unverified: Sequence[tuple[int, str, str]]) -> tuple[int, ...]:  # fmt: skip
    """The indices of the unverified structured turns the template does not render to what
    the model wrote (the check must render them as the model's text)."""
    return tuple(index for index, _, written in unverified
                 if renderer.assistant_text(messages[index]) != written)  # fmt: skip


def as_written(messages: Sequence[dict], verbatim: Mapping[int, str]) -> list[dict]:
    """`messages` with each turn of `verbatim` replaced by the model's text (a new list): the
    conversation the tokens hold."""
    out = list(messages)
    for index, text in verbatim.items():
        out[index] = {"role": "assistant", "content": text}
    return out


def check_tokenization(
    renderer: ChatRenderer,
    messages: Sequence[dict],
    tool_schemas: Sequence[dict],
    input_ids: Sequence[int],
    pending_suffix: str = "",
    known_pieces: dict[str, tuple[int, ...]] | None = None,
    request_id: str = "?",
) -> str:
    """Compare a trajectory's ids with the rendering of its (settled) conversation."""
    ends_with_model = messages[-1]["role"] == "assistant"
    expected = renderer.render(messages, not ends_with_model, tool_schemas)
    if ends_with_model and pending_suffix:
        if not expected.endswith(pending_suffix):
            return "text_drift"
        expected = expected[: len(expected) - len(pending_suffix)]
    actual = renderer.decode(input_ids)
    if actual != expected:
        if "".join(actual.split()) == "".join(expected.split()):
            return "strippable_drift"
        logger.debug("request %s: tokenization drift\n  expected %r\n  actual   %r",
                     request_id, expected, actual)  # fmt: skip
        return "text_drift"
    # encode(expected), re-encoding only the pieces whose ids are not known yet (the
    # model's text, mostly): agentrl/models/token_pieces.py
    if renderer.pieces.encode(expected, known_pieces) != list(input_ids):
        return "token_drift"  # same text, other token split: the trainer sees our ids
    return "match"


def run_check(renderer: ChatRenderer, item: CheckInput) -> CheckResult:
    """Settle `item`'s messages and, if asked, check its tokenization (module docstring)."""
    settled = settle(renderer, item.messages, item.unverified)
    if not item.check:
        return CheckResult(settled, None)
    texts = {index: text for index, text, _ in item.unverified}
    messages = as_written(item.messages, {**item.verbatim, **{i: texts[i] for i in settled}})
    return CheckResult(settled, check_tokenization(
        renderer, messages, item.tool_schemas, item.input_ids, item.pending_suffix,
        item.known_pieces, item.request_id))  # fmt: skip
