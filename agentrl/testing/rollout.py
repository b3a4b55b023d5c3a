"""Test helpers for the rollout engine: a scripted backend, a recording tool, batches.

    from agentrl.testing.rollout import (ConversationScriptBackend, RecordingTool,
                                         prompts_batch, run_batch)
    backend = ConversationScriptBackend(tokenizer,
                                        {0: [call_text("echo", "hi") + "<|im_end|>", "done"]})
    out = run_batch(AsyncRolloutEngine(rollout_config(), tokenizer, backend, make_tools()),
                    prompts_batch(1, tools_kwargs={"echo": {}}))

`ConversationScriptBackend` plays a fixed list of model turns per conversation (the
conversation whose user message contains `conv-k` plays `scripts[k]`), so engine behaviour
is tested without a model; it implements the `GenerationBackend` protocol as a user's own
backend would. The real backends are tested against the same engine in tests/rollout/.
"""

from __future__ import annotations

import asyncio
import json
import re

from agentrl.config import load_config
from agentrl.protocol import DataProto
from agentrl.rollout.backends import BackendError, GenerationOutput
from agentrl.tools import BaseTool, OpenAIFunctionToolSchema, ToolResponse

PROMPT_LENGTH, RESPONSE_LENGTH = 1024, 2048


def rollout_config(*overrides: str):
    cfg = load_config(
        overrides=[
            f"data.max_prompt_length={PROMPT_LENGTH}",
            f"data.max_response_length={RESPONSE_LENGTH}",
            "actor_rollout_ref.rollout.multi_turn.enable=true",
            "actor_rollout_ref.rollout.multi_turn.max_parallel_calls=8",
            "actor_rollout_ref.rollout.multi_turn.max_tool_response_length=100000",
            "actor_rollout_ref.rollout.multi_turn.retry_backoff=0.001",
            *[f"actor_rollout_ref.rollout.{o}" for o in overrides],
        ]
    )
    return cfg.actor_rollout_ref.rollout


def schema(name: str) -> OpenAIFunctionToolSchema:
    return OpenAIFunctionToolSchema.model_validate(
        {
            "type": "function",
            "function": {
                "name": name,
                "description": f"the {name} tool",
                "parameters": {
                    "type": "object",
                    "properties": {"text": {"type": "string"}},
                    "required": ["text"],
                },
            },
        }
    )


class RecordingTool(BaseTool):
    """Answers with `respond(text)`; records the lifecycle calls of every instance."""

    def __init__(
        self, name: str, respond=lambda text: text, reward: float = 0.0, final_reward: float = 0.0
    ):
        super().__init__({}, schema(name))
        self.respond, self.reward, self.final_reward = respond, reward, final_reward
        self.events: list[tuple[str, str]] = []
        self.running = self.max_running = 0

    async def create(self, instance_id=None, **kwargs):
        self.events.append(("create", instance_id))
        return await super().create(instance_id, **kwargs)

    async def execute(self, instance_id, parameters, **kwargs):
        self.events.append(("execute", instance_id))
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        try:
            await asyncio.sleep(0)
            return (
                ToolResponse(text=await _maybe_await(self.respond(parameters["text"]))),
                self.reward,
                {},
            )
        finally:
            self.running -= 1

    async def calc_reward(self, instance_id, **kwargs):
        self.events.append(("calc_reward", instance_id))
        return self.final_reward

    async def release(self, instance_id, **kwargs):
        self.events.append(("release", instance_id))
        await super().release(instance_id, **kwargs)

    def instances(self, event: str) -> list[str]:
        return [i for e, i in self.events if e == event]


async def _maybe_await(value):
    return await value if asyncio.iscoroutine(value) else value


class ConversationScriptBackend:
    """Plays a script per conversation: `scripts[k]` is the list of model turn texts of the
    conversation whose user message contains `conv-k`; its turn index is the number of
    assistant turns already in the input. Records every output and the calls in flight."""

    def __init__(
        self,
        tokenizer,
        scripts: dict[int, list[str]],
        fail: dict | None = None,
        finish_reason: str = "stop",
    ):
        self.tokenizer, self.scripts, self.fail = tokenizer, scripts, dict(fail or {})
        self.finish_reason = finish_reason
        self.outputs: dict[tuple[int, str], list[list[int]]] = {}
        self.calls: list[dict] = []
        self.in_flight = self.max_in_flight = 0
        self.aborted: list[str] = []
        self.weight_version = 0  # reported with every output; update_weights sets it

    async def generate(self, input_ids, sampling_params, request_id):
        self.calls.append(dict(sampling_params))
        text = self.tokenizer.decode(input_ids, skip_special_tokens=False)
        conversation = int(re.search(r"conv-(\d+)", text).group(1))
        if self.fail.get(conversation):
            self.fail[conversation] -= 1
            raise BackendError(f"scripted failure of conv-{conversation}", retryable=True)
        turn = text.count("<|im_start|>assistant") - 1
        script = self.scripts[conversation]
        out_text = script[min(turn, len(script) - 1)]
        ids = self.tokenizer.encode(out_text, add_special_tokens=False)
        ids = ids[: sampling_params["max_new_tokens"]]
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        await asyncio.sleep(0.001)
        self.in_flight -= 1
        prompt = text.split("<|im_start|>assistant")[0]
        self.outputs.setdefault((conversation, request_id.split("-t")[0]), []).append(ids)
        log_probs = [-0.25 - 0.001 * i for i in range(len(ids))]
        return GenerationOutput(
            ids, out_text, self.finish_reason, log_probs,
            meta_info={"prompt": prompt, "weight_version": str(self.weight_version)},
        )  # fmt: skip

    async def abort(self, request_id):
        self.aborted.append(request_id)

    async def update_weights(self, source, weight_version=None):
        self.weight_version = int(weight_version) if weight_version is not None else (
            self.weight_version + 1
        )


def call_text(name: str, text: str, compact: bool = False) -> str:
    body = {"name": name, "arguments": {"text": text}}
    if compact:
        return "<tool_call>" + json.dumps(body, separators=(",", ":")) + "</tool_call>"
    return "<tool_call>\n" + json.dumps(body, ensure_ascii=False) + "\n</tool_call>"


def prompts_batch(n_prompts: int, tools_kwargs=None, **columns) -> DataProto:
    non_tensors = {
        "raw_prompt": [
            [{"role": "user", "content": f"Question conv-{k}?"}] for k in range(n_prompts)
        ],
        "tools_kwargs": [tools_kwargs or {} for _ in range(n_prompts)],
        "data_source": ["agentrl/arithmetic"] * n_prompts,
        "reward_model": [{"ground_truth": "42"} for _ in range(n_prompts)],
        "index": list(range(n_prompts)),
        **columns,
    }
    return DataProto.from_dict(non_tensors=non_tensors)


def expected_ids(tokenizer, request_messages, tools) -> list[int]:
    """The template's rendering of the final messages, minus the newline after the last
    <|im_end|> (generation stops at <|im_end|>)."""
    text = tokenizer.apply_chat_template(request_messages, tools=tools or None, tokenize=False)
    assert text.endswith("<|im_end|>\n")
    return tokenizer.encode(text[:-1], add_special_tokens=False)


def run_batch(engine, batch, collected: list | None = None) -> DataProto:
    return asyncio.run(
        engine.agenerate_sequences(
            batch, on_request_done=None if collected is None else collected.append
        )
    )



def make_tools() -> dict[str, RecordingTool]:
    return {
        "echo": RecordingTool("echo"),
        "reverse": RecordingTool("reverse", lambda t: t[::-1] + "\n\t "),
        "wrap": RecordingTool("wrap", lambda t: f"  [{t}]\n\n", reward=0.5),
    }




def scripted_backend_factory(scripts: dict[int, list[str]]):
    """A picklable ``make_backend(tokenizer)`` for agent workers in other processes."""
    import functools

    return functools.partial(_scripted_backend, scripts)


def _scripted_backend(scripts: dict[int, list[str]], tokenizer) -> ConversationScriptBackend:
    return ConversationScriptBackend(tokenizer, scripts)


def token_check_cases(renderer, tokenizer) -> dict[str, object]:
    """One finished request per tokenization check result (`match`, `token_drift`,
    `strippable_drift`, `text_drift`), each with a structured tool-call turn, and one
    (`verbatim`) whose compact call the template writes otherwise (checked as written)."""
    from agentrl.rollout.request import AsyncRolloutRequest, FinishReason

    schemas = [schema("echo").model_dump(exclude_none=True)]

    def ids(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False)

    def conversation(kind: str) -> AsyncRolloutRequest:
        req = AsyncRolloutRequest.from_prompt(
            renderer, [{"role": "user", "content": f"Question {kind}?"}], schemas,
            batch_data_id=0, rollout_offset=0, request_id=kind, tools_kwargs={"echo": {}})  # fmt: skip
        call = call_text("echo", "hi", compact=kind == "verbatim")
        content = req.add_model_output(renderer, ids("Let me see.\n" + call + "<|im_end|>"), None)
        message_call = {"id": "call_1_0", "type": "function",
                        "function": {"name": "echo", "arguments": {"text": "hi"}}}  # fmt: skip
        req.add_assistant_message(renderer, content, "Let me see.\n", [message_call])
        req.add_messages(renderer, [{"role": "tool", "content": "hi"}])
        final = ids("the answer is 42<|im_end|>")
        if kind == "token_drift":  # "the" spelled letter by letter
            final = tokenizer.convert_tokens_to_ids(list("the")) + ids(" answer is 42<|im_end|>")
        content = req.add_model_output(renderer, final, None)
        req.add_assistant_message(renderer, content, content, [])
        if kind == "strippable_drift":
            req.messages[-1]["content"] += "  "
        elif kind == "text_drift":
            req.messages[-1]["content"] = req.messages[-1]["content"].replace("42", "43")
        req.finish(FinishReason.STOP)
        return req

    return {kind: conversation(kind) for kind in
            ("match", "token_drift", "strippable_drift", "text_drift", "verbatim")}  # fmt: skip
