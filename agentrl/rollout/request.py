"""AsyncRolloutRequest: one sample's state, messages and token-level trajectory.

States (docs/rollout.md, "The state machine"):

    PENDING -> RUNNING -> TOOL_CALLING -> RUNNING ... -> COMPLETED
                       -> INTERACTING  -> RUNNING ...    (or FAILED from any state)

The token trajectory is six aligned lists, `input_ids`, `attention_mask`, `position_ids`,
`loss_mask`, `rollout_log_probs` and `weight_versions` (the policy version that produced each
model token, as the backend reported it; -1 on every other token), and `append` is the only
method that grows them:

    [prompt: loss 0][model turn: loss 1, log-probs][tool turn delta: loss 0][model turn: 1]..

Model tokens are appended exactly as the backend returned them (never decoded and
re-encoded); every other turn is a template delta (`agentrl.models.chat`). `finalize`
re-renders the whole conversation and compares it with the trajectory (the tokenization
sanity check, agentrl/rollout/token_check.py: the text, then the ids of its encoding, where
only the pieces between added tokens that the trajectory did not encode itself are encoded
again), then cuts every aligned list at the response budget. The check is a pure function
of `check_input`, so the engine may run it in another process and hand `finalize` its
result (agentrl/rollout/check_offload.py). Its states, finish reasons and counters are
agentrl/rollout/request_status.py's.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentrl.models.chat import ChatRenderer
from agentrl.rollout.request_status import FinishReason, RequestMetrics, RequestState
from agentrl.rollout.token_check import (
    FAILING,
    CheckInput,
    CheckResult,
    as_written,
    check_mode,
    run_check,
    settle,
)
from agentrl.rollout.trajectory import TokenTrajectory

logger = logging.getLogger(__name__)


@dataclass
class AsyncRolloutRequest(TokenTrajectory):
    """One trajectory (its token lists: `TokenTrajectory`): built by `from_prompt`, advanced
    by the engine's state handlers."""

    batch_data_id: int
    rollout_offset: int
    request_id: str
    messages: list[dict]
    tool_schemas: list[dict]
    tools_kwargs: dict[str, dict]
    interaction_kwargs: dict[str, Any]
    prompt_length: int = 0
    state: RequestState = RequestState.PENDING
    finish_reason: FinishReason | None = None
    truncation: str | None = None  # why the trajectory was cut, None when it was not
    error: str | None = None  # why it FAILED
    aborted: bool = False  # FAILED because the engine stopped it (rollout.over_sample_rate)
    # the first infrastructure failure (agentrl/utils/infra.py) of the trajectory, as
    # {"kind": tool name | "interaction" | "generation", "error": reason}; None when none
    infra_error: dict[str, str] | None = None
    reward_scores: dict[str, Any] = field(default_factory=dict)
    step_rewards: list[tuple[int, float]] = field(default_factory=list)  # (response pos, r)
    pending_calls: list = field(default_factory=list)  # ParsedCalls of the last model turn
    tool_instances: dict[str, str] = field(default_factory=dict)  # tool name -> instance id
    interaction: str | None = None  # name of the sample's interaction, once started
    metrics: RequestMetrics = field(default_factory=RequestMetrics)
    # The tools the sample may call (instances are created for these); None -> those of
    # tool_schemas. They differ when the prompt shows fewer schemas than the sample may use
    # (multi_turn.tool_schemas_in_prompt: none).
    tool_names: list[str] | None = None
    # structured assistant turns whose rendering is not checked yet: (index in messages,
    # the model's text, the text the turn must render to); see add_assistant_message
    unverified: list[tuple[int, str, str]] = field(default_factory=list)
    # structured turns the template writes otherwise than the model did: index in messages
    # -> the model's text (what the tokens hold); the message keeps the calls that ran
    verbatim: dict[int, str] = field(default_factory=dict)

    @property
    def callable_tools(self) -> list[str]:
        if self.tool_names is not None:
            return list(self.tool_names)
        return [schema["function"]["name"] for schema in self.tool_schemas]

    @classmethod
    def from_prompt(
        cls,
        renderer: ChatRenderer,
        messages: list[dict],
        tool_schemas: list[dict],
        *,
        batch_data_id: int,
        rollout_offset: int,
        request_id: str,
        tools_kwargs: dict | None = None,
        interaction_kwargs: dict | None = None,
        prompt_ids: list[int] | None = None,
        tool_names: list[str] | None = None,
        known_pieces: dict[str, tuple[int, ...]] | None = None,
    ) -> AsyncRolloutRequest:
        """A PENDING request whose trajectory is the rendered prompt (loss mask 0).

        `prompt_ids` skips the rendering when the caller already has it (n samples of one
        prompt); they must be `renderer.prompt_ids(messages, tool_schemas)`, and
        `known_pieces` then the prompt's pieces (`renderer.pieces.remember`), which the
        request extends with its own (the n samples may share the dict: its entries are
        facts about the tokenizer).
        """
        request = cls(
            batch_data_id=batch_data_id,
            rollout_offset=rollout_offset,
            request_id=request_id,
            messages=[dict(m) for m in messages],
            tool_schemas=list(tool_schemas),
            tools_kwargs=dict(tools_kwargs or {}),
            interaction_kwargs=dict(interaction_kwargs or {}),
            tool_names=None if tool_names is None else list(tool_names),
        )
        if known_pieces is not None:
            request.known_pieces = known_pieces
        if prompt_ids is None:
            text = renderer.render(request.messages, True, request.tool_schemas)
            prompt_ids = renderer.encode(text)
            renderer.pieces.remember(text, prompt_ids, request.known_pieces)
        request.append(list(prompt_ids), 0)
        request.prompt_length = len(request.input_ids)
        return request

    # ------------------------------------------------------------------ the trajectory

    def append(self, ids: list[int], loss_mask: int, log_probs: list[float] | None = None,
               weight_version: int | Sequence[int] = -1) -> None:  # fmt: skip
        """`TokenTrajectory.append`; an error names the request."""
        try:
            super().append(ids, loss_mask, log_probs, weight_version)
        except ValueError as err:
            raise ValueError(f"request {self.request_id}: {err}") from None

    @property
    def response_length(self) -> int:
        return len(self.input_ids) - self.prompt_length

    @property
    def response_ids(self) -> list[int]:
        return self.input_ids[self.prompt_length :]

    def add_assistant_message(
        self, renderer: ChatRenderer, content: str, normal_text: str, tool_calls: list[dict]
    ) -> None:
        """Record the model turn as a message: what runs is what the message says.

        A turn with calls is `{"content": the text before the calls, "tool_calls": the
        calls}`, and those are exactly the calls the engine runs, however the model spaced
        them (back to back, compact JSON, text between them). The tokens stay the model's:
        a turn the template writes otherwise gets its text in `verbatim`, and the
        tokenization check renders it as written (`written_messages`). Which turns those are
        is a template render, so it waits for `finalize` (or `written_messages`) instead of
        running in the turn itself. A turn without readable calls is its text verbatim.
        """
        if tool_calls:
            text = normal_text[:-1] if normal_text.endswith("\n") else normal_text
            self.messages.append({"role": "assistant", "content": text, "tool_calls": tool_calls})
            written = renderer.generation_prompt + content + renderer.turn_end
            self.unverified.append((len(self.messages) - 1, content, written))
            return
        self.messages.append({"role": "assistant", "content": content})

    def written_messages(self, renderer: ChatRenderer | None = None) -> list[dict]:
        """The conversation as the tokens hold it: the messages with each structured turn the
        template writes otherwise as the model's text (a new list). `renderer` settles the
        turns not checked yet (a template render each; `finalize` has settled them all)."""
        if self.unverified:
            if renderer is None:
                raise ValueError(f"request {self.request_id}: {len(self.unverified)} model "
                                 "turn(s) not checked yet; pass the renderer")
            self._settle(settle(renderer, self.messages, self.unverified))
        return as_written(self.messages, self.verbatim)

    def _settle(self, verbatim: Sequence[int]) -> None:
        """Keep the model's text of the unverified turns the template writes otherwise."""
        texts = {index: text for index, text, _ in self.unverified}
        self.verbatim.update((index, texts[index]) for index in verbatim)
        self.unverified.clear()

    def add_messages(self, renderer: ChatRenderer, new_messages: list[dict]) -> None:
        """Append tool/user messages and the next generation prompt as a delta (loss 0)."""
        self.append_delta(renderer, new_messages)
        self.messages.extend(new_messages)

    # ------------------------------------------------------------------ the end

    def finish(self, reason: FinishReason, truncation: str | None = None) -> None:
        self.state = RequestState.COMPLETED
        self.finish_reason = reason
        self.truncation = self.truncation or truncation

    def abort(self, error: str) -> None:
        """End a request the engine stopped on purpose (`rollout.over_sample_rate`): FAILED,
        so it never trains, but logged quietly and counted apart (`aborted`)."""
        logger.debug("request %s aborted: %s", self.request_id, error)
        self.aborted = True
        self.state = RequestState.FAILED
        self.error = error
        self.finish_reason = self.finish_reason or FinishReason.ABORT

    def note_infra_error(self, kind: str, error: str) -> None:
        """Record an infrastructure failure of `kind` (the first one is kept); whether the
        request goes on is the engine's call (`rollout.on_infra_error`)."""
        logger.info("request %s: infrastructure failure (%s): %s", self.request_id, kind, error)
        if self.infra_error is None:
            self.infra_error = {"kind": kind, "error": error}

    def fail_infra(self) -> None:
        """End the request FAILED for its recorded infrastructure failure (a no-op when it
        has none or already FAILED)."""
        if self.infra_error is not None and self.state != RequestState.FAILED:
            self.fail(f"infrastructure failure ({self.infra_error['kind']}): "
                      f"{self.infra_error['error']}")

    def fail(self, error: str) -> None:
        logger.warning("request %s failed: %s", self.request_id, error)
        self.state = RequestState.FAILED
        self.error = error
        self.finish_reason = self.finish_reason or FinishReason.ABORT

    def check_input(self, sanity_check_mode: str) -> CheckInput | None:
        """What `finalize`'s check reads (agentrl/rollout/token_check.py), or None when it
        has nothing to do (no unverified turn, and no tokenization check: `disable`, or
        FAILED already). The lists are the request's own: copy (pickle) them before the
        request changes."""
        check = check_mode(sanity_check_mode) != "disable" and self.state != RequestState.FAILED
        if not (check or self.unverified):
            return None
        return CheckInput(self.request_id, self.messages, self.unverified, self.tool_schemas,
                          self.input_ids, self.pending_suffix, self.known_pieces, check,
                          self.verbatim)  # fmt: skip

    def apply_check(self, result: CheckResult, sanity_check_mode: str) -> None:
        """Take the check's answer: settle the unverified turns, record the tokenization, and
        FAIL the request on a drift the mode does not allow."""
        self._settle(result.verbatim)
        if result.tokenization is None:
            return
        self.metrics.tokenization = result.tokenization
        if result.tokenization in FAILING[sanity_check_mode]:
            self.fail(
                f"tokenization drift ({result.tokenization}): the trajectory's "
                f"tokens do not decode to the chat template's rendering of its "
                f"messages (multi_turn.tokenization_sanity_check_mode={sanity_check_mode})"
            )

    def finalize(
        self,
        renderer: ChatRenderer,
        response_budget: int,
        budget_name: str,
        sanity_check_mode: str,
        checked: CheckResult | None = None,
    ) -> None:
        """Check the tokenization, cut the trajectory to `response_budget` response tokens
        and zero the loss mask of a FAILED request. `checked`: the check's result already
        computed (elsewhere, from `check_input`); None runs it here."""
        item = self.check_input(sanity_check_mode)
        if item is not None:
            self.apply_check(checked or run_check(renderer, item), sanity_check_mode)
        if self.cut(self.prompt_length + max(response_budget, 0)):
            self.truncation = self.truncation or budget_name
            if self.state == RequestState.COMPLETED:
                self.finish_reason = FinishReason.LENGTH
        self.step_rewards = [(p, r) for p, r in self.step_rewards if p < self.response_length]
        if self.state == RequestState.FAILED:
            self.loss_mask = [0] * len(self.loss_mask)
        self.known_pieces = {}  # read by the check only

    def num_turns(self) -> int:
        """verl's count: assistant turns + user turns + 1 (the prompt)."""
        return self.metrics.assistant_turns + self.metrics.user_turns + 1
