"""Agent rollout mode: train any agent function written against the OpenAI client.

    actor_rollout_ref.rollout.agent_function: my_agents.py:run      # or pkg.module.run
    actor_rollout_ref.rollout.agent_timeout: 300
    actor_rollout_ref.rollout.agent_client: openai    # or anthropic (the Messages API)

    async def run(task: dict, client: openai.AsyncOpenAI) -> float | dict:
        reply = await client.chat.completions.create(model="policy", messages=task["raw_prompt"])
        return 1.0 if "42" in reply.choices[0].message.content else 0.0

``AgentRollout`` receives these keys once, typed: ``AgentSettings.from_config(rollout)``
(agent_settings.py; built where the rollout is assembled, agentrl/workers/rollout_assembly.py).
For each sample it opens a gateway session (the gateway runs in process, the
client reaches it through an in-process ASGI transport, no socket), hands the function a client
bound to it and the row's fields (``raw_prompt``, ``reward_model``, ``extra_info``, ...),
awaits the reward (a number, a dict with ``score``, or None to use the one posted to
``/sessions/{id}/reward``) and turns the session's segments into the rows the trainer
consumes: the model's exact tokens with loss mask 1, everything else 0, the reward as
``rm_scores`` on the last response token of the segment of the episode's latest call
(``Session.final_segment``: the reward managers return it as the reward). With
``rollout.agent_segments: all`` (the default) every segment of the session tree is a row of
its own (``rollout.agent_segments: last``: that segment only), and with ``rollout.agent_side_calls: train`` so is every side call; the rows of one
episode share its ``episode_id`` and the advantage computed on its reward row
(``episode_row`` 0; agentrl/algos/segments.py), so a GRPO group is still ``n`` episodes.
Each row's place in its session tree is its ``segment`` column (`segment_tree`: the segment's
index, ``parent``, branch point, whether it is a side call, the session's counts), which the
trainer's dumps keep for the open trajectory format (docs/trajectories.md).
An exception, a timeout, or a function that never calls the model fails only its sample
(FAILED, zero loss mask, counted in ``rollout/agent_errors``); history rewrites (forks) are
counted in ``rollout/agent_rewrites`` and ``gateway/forks``, calls outside the episode (a
CLI's title generation; recorded apart, never trained) in ``gateway/side_calls``, and a
dict's ``limit_kills`` (runs an episode limit ended, agentrl.agents) in ``agent/limit_kills``.

It offers the engine's interface for a stream of prompts (``new_context``,
``build_requests``, ``run_request`` per request, ``collect``), so the off-policy producer
(agentrl/trainer/producer.py) runs episodes as it runs the engine's requests: each episode
has its own session, each model call's tokens keep the policy version the server reported,
and an episode that spans a weight update keeps its earlier calls (its tokens then carry two
or more versions).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agentrl.gateway.agent_settings import AgentSettings
from agentrl.gateway.server import create_app
from agentrl.protocol import DataProto, to_object_array
from agentrl.reward.base import scores_on_last_token
from agentrl.rollout.collector import TrajectoryCollector
from agentrl.rollout.output import request_metrics
from agentrl.rollout.request import AsyncRolloutRequest, FinishReason, RequestState
from agentrl.utils.extras import missing_package

logger = logging.getLogger(__name__)

AgentFunction = Callable[[dict, Any], Awaitable[Any]]
AGENT_REWARD_KEY = "agent_reward"  # a finished request's reward, in its reward_scores
SIDE_CALLS_KEY = "side_calls"  # its calls outside the episode, in its reward_scores
TOKENS_RECORDED_KEY = "policy_tokens_recorded"  # its session's policy tokens, in reward_scores
SEGMENTS_KEY = "segments"  # its other trained segments, in reward_scores until `collect`
LIMIT_KILLS_KEY = "limit_kills"  # its runs an episode limit ended (agentrl.agents' dict)
SEGMENT_SEP = "/seg-"  # a segment row's request id: {episode's request id}/seg-{j}
# its rows' places in the session tree (`segment_tree`: the reward row's first, then one per
# SEGMENTS_KEY entry), in reward_scores until `collect` makes them the `segment` column
SEGMENT_TREE_KEY = "segment_tree"


@dataclass
class EpisodeContext:
    """What a batch's episodes share (the engine's `BatchContext` for agent mode)."""

    n: int  # episodes per prompt
    on_request_done: Callable[[AsyncRolloutRequest], None] | None = None


def _reward(result: Any, posted: float | None) -> float:
    if result is None:
        if posted is None:
            raise ValueError("the agent returned None and posted no reward")
        return float(posted)
    if isinstance(result, dict):
        if "score" not in result:
            raise ValueError(f"the agent returned a dict without 'score': {sorted(result)}")
        return float(result["score"])
    return float(result)


class AgentRollout:
    """``agenerate_sequences`` by running ``agent_fn`` per sample (see the module docstring)."""

    def __init__(
        self,
        settings: AgentSettings,
        tokenizer: Any,
        backend: Any,
        agent_fn: AgentFunction,
        *,
        chat_template_kwargs: dict[str, Any] | None = None,
        tools: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(settings, AgentSettings):
            raise TypeError("AgentRollout takes AgentSettings.from_config(actor_rollout_ref."
                            f"rollout), got {type(settings).__name__}")
        self.settings = settings
        self.agent_fn = agent_fn
        self.timeout = settings.timeout
        self.client_kind = settings.client
        self.segments = settings.segments
        self.side_calls = settings.side_calls
        multi_turn = settings.rollout.multi_turn
        self.app = create_app(
            backend, tokenizer, model_name="policy", tool_format=multi_turn.format,
            chat_template_kwargs=chat_template_kwargs,
            default_max_tokens=settings.rollout.response_length,
            tools=tools, multi_turn=multi_turn,
        )  # fmt: skip
        # the padding, truncation and metrics of the engine's output, for these requests
        self.collector = TrajectoryCollector(settings.rollout, tokenizer, chat_template_kwargs)
        self._tasks: dict[str, dict[str, Any]] = {}  # request id -> its row, until it runs

    async def agenerate_sequences(
        self, batch: DataProto, on_request_done: Callable[[Any], None] | None = None
    ) -> DataProto:
        """Every sample's episode at once; `on_request_done(request)` as each one ends."""
        started = time.perf_counter()
        ctx = self.new_context(bool(batch.meta_info.get("validate", False)), on_request_done)
        requests = self.build_requests(batch, ctx.n)
        await asyncio.gather(*(self.run_request(r, ctx) for r in requests))
        return self.collect(requests, batch, time.perf_counter() - started)

    # The engine's interface for a stream of prompts (the off-policy producer,
    # agentrl/trainer/producer.py, drives AsyncRolloutEngine and this class alike, its
    # ProducerEngine): new_context, build_requests, run_request per request, collect, close.

    def new_context(self, validate: bool = False,
                    on_request_done: Callable[[Any], None] | None = None,
                    trace: Any = None) -> EpisodeContext:  # fmt: skip
        """What the episodes of one batch (or of the producer's whole stream) share; agent
        mode records no timeline (`trace` is accepted for the engine's signature)."""
        n, _ = self.collector.sampling_params(validate)
        return EpisodeContext(n=n, on_request_done=on_request_done)

    def build_requests(self, batch: DataProto, n: int) -> list[AsyncRolloutRequest]:
        """n PENDING requests per row, each to be one episode (`run_request`); the row's
        fields wait for it by request id."""
        batch_id = uuid.uuid4().hex[:8]
        requests = []
        for i in range(len(batch)):
            task = self._task(batch, i)
            for k in range(n):
                request = AsyncRolloutRequest(
                    batch_data_id=i, rollout_offset=k, request_id=f"{batch_id}-{i}-{k}",
                    messages=[dict(m) for m in task.get("raw_prompt", [])], tool_schemas=[],
                    tools_kwargs={}, interaction_kwargs={},
                )  # fmt: skip
                self._tasks[request.request_id] = task
                requests.append(request)
        return requests

    async def run_request(self, request: AsyncRolloutRequest, ctx: EpisodeContext) -> None:
        """Run the request's episode through its own gateway session (the session id is
        the request id) and fill the request: COMPLETED, or FAILED for this sample alone.
        Its reward and side calls go in `reward_scores` (`collect` reads them), so a
        request carried in a checkpoint is collected as one that just ended."""
        task = self._tasks.pop(request.request_id)
        async with in_process_http(sdk_module(self.client_kind), self.app,
                                   self.timeout + 30) as http:
            await self._episode(request, task, http)
        if ctx.on_request_done is not None:
            ctx.on_request_done(request)

    def collect(self, requests: list[AsyncRolloutRequest], batch: DataProto,
                wall_s: float) -> DataProto:  # fmt: skip
        """The finished episodes as the rollout's DataProto: one row per trained segment
        (`segment_rows`), the collector's padding, the rewards as `rm_scores` on the last
        response token of each episode's reward row, the metrics per episode, the agent
        counts."""
        rows = self.segment_rows(requests)
        trees = {r.request_id: (r.reward_scores.pop(SEGMENT_TREE_KEY, None) or [None])[0]
                 for r in requests + rows}  # fmt: skip
        out = self.collector.collect(requests + rows, batch, wall_s)
        out.meta_info["metrics"] = request_metrics(requests)  # per episode, not per row
        ordered = sorted(requests + rows, key=lambda r: (r.batch_data_id, r.rollout_offset))
        out.batch["rm_scores"] = scores_on_last_token(
            [float(r.reward_scores.get(AGENT_REWARD_KEY, 0.0)) for r in ordered],
            out.batch["attention_mask"],
            out.batch["responses"].shape[1],
        )
        episodes = {r.request_id: r for r in requests}
        out.non_tensor_batch["episode_id"] = to_object_array(
            [r.request_id.split(SEGMENT_SEP)[0] for r in ordered], "episode_id")
        out.non_tensor_batch["episode_row"] = to_object_array(
            [0 if r.request_id in episodes else int(r.request_id.split(SEGMENT_SEP)[1])
             for r in ordered], "episode_row")  # fmt: skip
        out.non_tensor_batch["segment"] = to_object_array(
            [trees[r.request_id] for r in ordered], "segment")
        metrics = out.meta_info["metrics"]
        metrics["agent/segments"] = float(sum(r.reward_scores.get("segments_recorded", 0)
                                              for r in requests))
        metrics["agent/tokens_recorded"] = float(sum(r.reward_scores.get(TOKENS_RECORDED_KEY, 0)
                                                     for r in requests))
        metrics["agent/tokens_trained"] = float(out.batch["response_mask"].sum())
        metrics["rollout/agent_errors"] = float(
            sum(r.state == RequestState.FAILED for r in requests))
        forks = float(sum(r.reward_scores.get("rewrites", 0) for r in requests))
        metrics["rollout/agent_rewrites"] = forks
        metrics["gateway/forks"] = forks  # the same count, the name
        metrics["gateway/side_calls"] = float(
            sum(r.reward_scores.get(SIDE_CALLS_KEY, 0) for r in requests))
        metrics["agent/limit_kills"] = float(
            sum(r.reward_scores.get(LIMIT_KILLS_KEY, 0) for r in requests))
        return out

    def close(self) -> None:
        """Drop the rows of requests built but never run (a stopped producer's); the
        episodes' gateway sessions and HTTP clients close as each episode ends."""
        self._tasks.clear()

    def segment_rows(self, requests: list[AsyncRolloutRequest]) -> list[AsyncRolloutRequest]:
        """The rows of the finished episodes' other trained segments (taken out of their
        `reward_scores`), as finished requests: the episode's batch row, offsets after every
        episode's own (`rollout_offset + stride * j`), reward 0 (the episode's reward row
        carries it), request id `{episode}/{j}`."""
        stride = max((r.rollout_offset for r in requests), default=0) + 1
        rows = []
        for request in requests:
            trees = request.reward_scores.get(SEGMENT_TREE_KEY) or []
            for j, segment in enumerate(request.reward_scores.pop(SEGMENTS_KEY, []), start=1):
                row = AsyncRolloutRequest(
                    batch_data_id=request.batch_data_id,
                    rollout_offset=request.rollout_offset + stride * j,
                    request_id=f"{request.request_id}{SEGMENT_SEP}{j}",
                    messages=list(segment.messages), tool_schemas=[], tools_kwargs={},
                    interaction_kwargs={},
                )  # fmt: skip
                row.copy_tokens(segment)
                row.prompt_length = segment.prompt_length
                row.reward_scores[SEGMENT_TREE_KEY] = trees[j:j + 1]
                row.finish(FinishReason.STOP)
                budget, name = self.collector.response_budget(row)
                row.finalize(self.collector.renderer, budget, name, "disable")
                rows.append(row)
        return rows

    @staticmethod
    def _task(batch: DataProto, i: int) -> dict[str, Any]:
        return {key: values[i] for key, values in batch.non_tensor_batch.items()}

    async def _episode(self, request: AsyncRolloutRequest, task: dict, http: Any) -> None:
        """The sample's episode; its session and tool instances are released however it
        ends (a cancelled episode's too: the producer cancels what is in flight)."""
        session_id = request.request_id
        client = agent_client(self.client_kind, session_id, http)
        error: str | None = None
        result: Any = None
        tools = self.app.state.tools
        if tools is not None:
            tools.register(session_id, task.get("tools_kwargs"))
        try:
            result = await asyncio.wait_for(self.agent_fn(dict(task), client), self.timeout)
        except TimeoutError:
            error = f"the agent did not finish within rollout.agent_timeout={self.timeout:g} s"
        except Exception as err:  # the user's code: this sample fails, the batch goes on
            error = f"the agent raised {type(err).__name__}: {err}"
        finally:
            session = self.app.state.sessions.pop(session_id, None)
            closing = (asyncio.ensure_future(tools.close(session_id))
                       if tools is not None else None)
            used = await asyncio.shield(closing) if closing is not None else None
        reward = 0.0
        if session is None or not session.segments:
            error = error or "the agent never called the model"
            prompt = self.collector.renderer.prompt_ids(request.messages, None)
            request.append(list(prompt), 0)
            request.prompt_length = len(prompt)
        else:
            segment = session.final_segment
            request.messages = list(segment.messages)
            request.copy_tokens(segment)
            request.prompt_length = segment.prompt_length
            request.reward_scores = {
                "rewrites": session.rewrites, SIDE_CALLS_KEY: len(session.side),
                "segments_recorded": len(session.segments),
                TOKENS_RECORDED_KEY: sum(s.policy_tokens for s in session.segments + session.side),
                SEGMENTS_KEY: self._other_rows(session),
            }  # fmt: skip
            request.reward_scores[SEGMENT_TREE_KEY] = [
                segment_tree(session, s) for s in [segment, *request.reward_scores[SEGMENTS_KEY]]]
            for recorded in self._other_rows(session):
                if all(recorded is not s for s in session.side):
                    _count_turns(request.metrics, recorded)
            _count_turns(request.metrics, segment)
            if error is None:
                try:
                    reward = _reward(result, session.reward)
                except (TypeError, ValueError) as err:
                    error = str(err)
        if used is not None:  # the gateway's tools: their errors and calc_reward scores
            request.metrics.tool_errors.update(used.metrics.tool_errors)
            request.metrics.tool_metrics.extend(used.metrics.tool_metrics)
            request.metrics.tool_s += sum(m["latency_s"] for m in used.metrics.tool_metrics)
            request.reward_scores.update(used.reward_scores)
        if error is None:
            request.finish(FinishReason.STOP)
        else:
            request.fail(error)
            request.reward_scores.pop(SEGMENTS_KEY, None)  # a failed episode trains nothing
            reward = 0.0
        request.reward_scores[AGENT_REWARD_KEY] = reward
        if isinstance(result, dict) and LIMIT_KILLS_KEY in result:
            request.reward_scores[LIMIT_KILLS_KEY] = int(result[LIMIT_KILLS_KEY] or 0)
        budget, name = self.collector.response_budget(request)
        request.finalize(self.collector.renderer, budget, name, "disable")


    def _other_rows(self, session: Any) -> list[Any]:
        """The session's segments that train as rows besides the reward row (the segment of
        its latest call, ``Session.final_segment``): its other segments with
        ``agent_segments: all``, its side calls with ``agent_side_calls: train``."""
        final = session.final_segment
        earlier = ([s for s in session.segments if s is not final]
                   if self.segments == "all" else [])
        return earlier + (session.side if self.side_calls == "train" else [])


def segment_tree(session: Any, segment: Any) -> dict[str, Any]:
    """A recorded segment's place in its session tree: ``index`` (episode segments 0, 1, ...
    in the order they started, then the side calls), ``parent``, ``branch`` (``fork`` or
    ``spawn``; None for a root), ``branch_message``, ``branch_token``
    (agentrl/gateway/sessions.py), ``side_call``, and the session's
    ``session_segments`` and ``session_side_calls`` (how many it recorded, trained or not)."""
    side = all(s is not segment for s in session.segments)
    index = (len(session.segments) + next(i for i, s in enumerate(session.side) if s is segment)
             if side else next(i for i, s in enumerate(session.segments) if s is segment))
    return {"index": index, "parent": segment.parent, "branch": segment.branch,
            "branch_message": segment.branch_message, "branch_token": segment.branch_token,
            "side_call": side,
            "session_segments": len(session.segments), "session_side_calls": len(session.side)}


def _count_turns(metrics: Any, segment: Any) -> None:
    """The engine's turn and tool-call counters for an agent's episode, read from the
    messages the segment recorded after its prompt: the model's turns, the calls it made
    (the agent ran them), and the tool and user messages the agent added."""
    for message in segment.messages[segment.prompt_messages:]:
        if message["role"] == "assistant":
            metrics.assistant_turns += 1
            metrics.tool_calls.update(call["name"] for call in message.get("tool_calls", ()))
        else:
            metrics.user_turns += 1


def sdk_module(kind: str) -> Any:
    """The SDK of ``rollout.agent_client`` (``openai`` or ``anthropic``), imported."""
    try:
        return importlib.import_module(kind)
    except ImportError as err:
        raise missing_package(kind, "agents", f"rollout.agent_client={kind}") from err


def in_process_http(sdk: Any, app: Any, timeout: float) -> Any:
    """An async HTTP client that reaches ``app`` in process (no socket), of the httpx
    package the SDK is built on (``httpx``, or ``httpx2`` for the newer SDKs, which refuse
    the other one's clients)."""
    base = next(c for c in sdk.DefaultAsyncHttpxClient.__mro__ if c.__name__ == "AsyncClient")
    http = importlib.import_module(base.__module__.split(".")[0])
    return http.AsyncClient(transport=http.ASGITransport(app=app), base_url="http://gateway",
                            timeout=timeout)


def agent_client(kind: str, session_id: str, http: Any) -> Any:
    """The SDK client an agent function gets, bound to its session of the in-process
    gateway through ``http`` (``openai.AsyncOpenAI`` or ``anthropic.AsyncAnthropic``)."""
    sdk = sdk_module(kind)
    if kind == "anthropic":  # the SDK adds /v1/messages
        return sdk.AsyncAnthropic(base_url=f"http://gateway/sessions/{session_id}",
                                  api_key="agentrl", http_client=http, max_retries=0)
    return sdk.AsyncOpenAI(base_url=f"http://gateway/sessions/{session_id}/v1",
                           api_key="agentrl", http_client=http, max_retries=0)


def load_agent_function(path: str) -> AgentFunction:
    """The agent function ``path`` names (``file.py:name`` or ``pkg.module.name``)."""
    from agentrl.plugins import load_object

    fn = load_object(path)
    if not asyncio.iscoroutinefunction(fn):
        raise TypeError(f"rollout.agent_function {path!r} must be an async function "
                        "(async def run(task, client))")
    return fn


__all__ = ["AGENT_REWARD_KEY", "LIMIT_KILLS_KEY", "SIDE_CALLS_KEY", "AgentRollout", "EpisodeContext",
           "agent_client", "in_process_http", "load_agent_function", "sdk_module", "segment_tree"]
