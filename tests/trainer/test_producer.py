"""RolloutProducer: throttle by policy version, stale groups dropped and generated again,
the checkpoint's buffer and queue, and the collected DataProto."""

import asyncio
import time

import pytest

from agentrl.rollout.engine import AsyncRolloutEngine
from agentrl.testing.rollout import ConversationScriptBackend, prompts_batch, rollout_config
from agentrl.trainer.producer import RolloutProducer
from agentrl.workers.rollout import LoopThread

N, BATCH = 2, 2


class SlowBackend(ConversationScriptBackend):
    """A scripted backend whose conversations listed in `hold` wait until released."""

    def __init__(self, tokenizer, scripts, hold=()):
        super().__init__(tokenizer, scripts)
        self.hold = set(hold)
        self.release = asyncio.Event()

    async def generate(self, input_ids, sampling_params, request_id):
        text = self.tokenizer.decode(input_ids, skip_special_tokens=False)
        if any(f"conv-{k}?" in text for k in self.hold):
            await self.release.wait()
        return await super().generate(input_ids, sampling_params, request_id)


def loader_batches(n_batches: int):
    """Loader-shaped batch dicts: batch b holds conversations 2b, 2b + 1."""
    rows = prompts_batch(n_batches * BATCH)
    for b in range(n_batches):
        yield rows[b * BATCH : (b + 1) * BATCH].to_single_dict()


@pytest.fixture
def loop():
    thread = LoopThread("test-producer")
    yield thread
    thread.close()


class Fed(RolloutProducer):
    """A producer the test feeds as the trainer does: the batches its throttle wants."""

    def feed(self):
        for _ in range(self.batches_wanted()):
            self.add_batch(next(self.batches))

    def start(self, version):
        super().start(version)
        self.feed()

    def set_version(self, version):
        super().set_version(version)
        self.feed()


def make_producer(tokenizer, loop, backend, n_batches=3, max_staleness=1):
    engine = AsyncRolloutEngine(rollout_config(f"n={N}", "response_length=32"), tokenizer,
                                backend)
    producer = Fed(engine, loop, n=N, max_staleness=max_staleness, total_batches=n_batches)
    producer.batches = loader_batches(n_batches)
    return producer


def scripts(n):
    return {k: [f"<answer>{k}</answer><|im_end|>"] for k in range(n)}


def wait_until(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_throttle_starts_a_batch_only_when_its_version_is_near(tiny_tokenizer, loop):
    backend = ConversationScriptBackend(tiny_tokenizer, scripts(6))
    producer = make_producer(tiny_tokenizer, loop, backend, max_staleness=0)
    producer.start(version=0)
    groups, stats = producer.take(BATCH, policy_version=0)
    assert sorted(g.uid for g in groups) == ["1-0", "1-1"]
    time.sleep(0.1)
    assert producer.next_batch == 2 and not producer.finished  # batch 2 waits for version 1
    assert stats.dropped == 0 and stats.buffer_size == 0
    backend.weight_version = 1  # the weight sync
    producer.set_version(1)
    groups, _ = producer.take(BATCH, policy_version=1)
    assert sorted(g.uid for g in groups) == ["2-0", "2-1"]
    producer.stop()


def test_a_stale_group_is_dropped_and_generated_again(tiny_tokenizer, loop):
    backend = ConversationScriptBackend(tiny_tokenizer, scripts(6))
    producer = make_producer(tiny_tokenizer, loop, backend, n_batches=2, max_staleness=1)
    producer.start(version=0)
    wait_until(lambda: len(producer.finished) == 4)  # batches 1 and 2, all at version 0
    backend.weight_version = 2
    producer.set_version(2)
    groups, stats = producer.take(4, policy_version=2)  # version 0 is 2 behind: too stale
    assert stats.dropped == 4 and producer.dropped_total == 4
    assert sorted(g.uid for g in groups) == ["1-0", "1-1", "2-0", "2-1"]
    assert all(g.versions == [2] for g in groups)  # generated again under version 2
    producer.stop()


def test_collect_gives_n_rows_per_prompt_with_versions(tiny_tokenizer, loop):
    backend = ConversationScriptBackend(tiny_tokenizer, scripts(6))
    backend.weight_version = 5
    producer = make_producer(tiny_tokenizer, loop, backend)
    producer.start(version=5)
    groups, _ = producer.take(BATCH, policy_version=5)
    data = producer.collect(groups, {"global_steps": 6})
    assert len(data) == BATCH * N and data.meta_info["global_steps"] == 6
    uids = list(data.non_tensor_batch["uid"])
    assert uids == [g.uid for g in groups for _ in range(N)]
    model = data.batch["response_mask"].bool()
    assert (data.batch["rollout_versions"][model] == 5).all()
    assert data.meta_info["metrics"]["rollout/requests"] == BATCH * N
    producer.stop()


def test_state_dict_resumes_every_prompt_once(tiny_tokenizer, loop):
    backend = SlowBackend(tiny_tokenizer, scripts(6), hold={3})  # batch 2's second prompt
    producer = make_producer(tiny_tokenizer, loop, backend, n_batches=3, max_staleness=1)
    producer.start(version=0)
    first, _ = producer.take(BATCH, policy_version=0)  # batch 1 trained
    wait_until(lambda: len(producer.finished) == 1)  # 2-0 finished, 2-1 held in flight
    state = producer.state_dict()
    producer.stop()
    assert state["next_batch"] == 3
    assert [g["uid"] for g in state["finished"]] == ["2-0"]
    assert [g["uid"] for g in state["unfinished"]] == ["2-1"]

    backend = ConversationScriptBackend(tiny_tokenizer, scripts(6))
    backend.weight_version = 1
    resumed = make_producer(tiny_tokenizer, loop, backend, n_batches=3)
    resumed.batches = (b for i, b in enumerate(loader_batches(3)) if i >= 2)  # the loader's rest
    resumed.load_state_dict(state)
    resumed.start(version=1)
    rest = []
    for version in (1, 2):
        groups, _ = resumed.take(BATCH, policy_version=version)
        rest += groups
        resumed.engine.backend.weight_version = version + 1
        resumed.set_version(version + 1)
    trained = [g.uid for g in first + rest]
    assert sorted(trained) == ["1-0", "1-1", "2-0", "2-1", "3-0", "3-1"]  # each exactly once
    assert rest[0].uid == "2-0"  # the saved finished group first, not generated again
    resumed.stop()


def test_a_version_the_servers_never_got_is_an_error(tiny_tokenizer, loop):
    backend = ConversationScriptBackend(tiny_tokenizer, scripts(6))  # keeps reporting version 0
    producer = make_producer(tiny_tokenizer, loop, backend, max_staleness=0)
    producer.start(version=0)
    producer.take(BATCH, policy_version=0)
    producer.set_version(1)  # as if synced, but the backend never saw it
    with pytest.raises(RuntimeError, match="did not reach them"):
        producer.take(BATCH, policy_version=1)
    producer.stop()


def test_take_with_a_timeout_returns_none_until_ready(tiny_tokenizer, loop):
    backend = SlowBackend(tiny_tokenizer, scripts(6), hold={0, 1})
    producer = make_producer(tiny_tokenizer, loop, backend, max_staleness=0)
    producer.start(version=0)
    assert producer.take(BATCH, policy_version=0, timeout=0.2) is None
    loop.loop.call_soon_threadsafe(backend.release.set)
    groups, _ = producer.take(BATCH, policy_version=0, timeout=10)
    assert sorted(g.uid for g in groups) == ["1-0", "1-1"]
    producer.stop()


def test_the_producers_timeline_is_drained_as_its_requests_run(tiny_tokenizer, loop):
    """trainer.trace: the producer's requests record as they run; each drain hands over the
    spans finished since the last one (the trainer takes them after every weight sync)."""
    from agentrl.utils.trace import TraceRecorder

    assert make_producer(tiny_tokenizer, loop, ConversationScriptBackend(tiny_tokenizer, scripts(6))
                         ).drain_trace() == []  # fmt: skip
    backend = SlowBackend(tiny_tokenizer, scripts(6), hold={3})  # batch 2's second prompt
    engine = AsyncRolloutEngine(rollout_config(f"n={N}", "response_length=32"), tiny_tokenizer,
                                backend)  # fmt: skip
    producer = Fed(engine, loop, n=N, max_staleness=1, total_batches=3,
                   trace=TraceRecorder("producer"))  # fmt: skip
    producer.batches = loader_batches(3)
    producer.start(version=0)
    producer.take(BATCH, policy_version=0)
    wait_until(lambda: len(producer.finished) == 1)  # 2-0 finished, 2-1 held in flight
    events = producer.drain_trace()
    assert {e[0].split(" (pid")[0] for e in events} == {"producer"}
    finished = {e[1] for e in events if e[2] == "request"}
    assert len(finished) == 3 * N  # 1-0, 1-1, 2-0; 2-1's requests have not ended
    held = {e[1] for e in events if e[2] == "PENDING"} - finished
    assert len(held) == N  # ... though their first state did, and shows already
    assert producer.drain_trace() == []  # handed over once
    loop.loop.call_soon_threadsafe(backend.release.set)  # the event belongs to the loop
    wait_until(lambda: len(producer.finished) == 2)
    later = producer.drain_trace()
    assert {e[1] for e in later if e[2] == "request"} == held
    producer.stop()


def test_allow_more_lets_one_more_batch_start_and_is_checkpointed(tiny_tokenizer, loop):
    """algorithm.filter_groups: a step that needs more groups than one batch holds grants
    the producer one more loader batch, generated under the current version."""
    backend = ConversationScriptBackend(tiny_tokenizer, scripts(6))
    producer = make_producer(tiny_tokenizer, loop, backend, n_batches=3, max_staleness=0)
    producer.start(version=0)
    producer.take(BATCH, policy_version=0)
    time.sleep(0.1)
    assert producer.next_batch == 2 and not producer.finished  # batch 2 waits for version 1
    producer.allow_more(1)
    producer.feed()
    groups, _ = producer.take(BATCH, policy_version=0)  # the same step's second take
    assert sorted(g.uid for g in groups) == ["2-0", "2-1"]
    assert all(g.versions == [0] for g in groups)
    state = producer.state_dict()
    assert state["extra_batches"] == 1 and state["next_batch"] == 3
    producer.stop()
    resumed = make_producer(tiny_tokenizer, loop, backend, n_batches=3, max_staleness=0)
    resumed.load_state_dict(state)
    assert resumed.extra_batches == 1  # batch 3 then starts at version 1, not 2


# ---------------------------------------------------------------- agent mode

AGENT_GATE: dict[str, asyncio.Event] = {}


async def two_call_agent(task, client):
    """One model call, a pause until the test opens the gate (a weight update lands
    meanwhile), a second call continuing the same conversation."""
    messages = list(task["raw_prompt"])
    first = await client.chat.completions.create(model="policy", messages=messages)
    await AGENT_GATE.setdefault("open", asyncio.Event()).wait()
    messages += [first.choices[0].message, {"role": "user", "content": "And then?"}]
    await client.chat.completions.create(model="policy", messages=messages)
    return 1.0


def make_agent_producer(tokenizer, loop, backend, max_staleness):
    from agentrl.gateway.agent_rollout import AgentRollout
    from agentrl.gateway.agent_settings import AgentSettings

    settings = AgentSettings.from_config(
        rollout_config(f"n={N}", "response_length=64", "agent_timeout=30"))
    rollout = AgentRollout(settings, tokenizer, backend, two_call_agent)
    producer = Fed(rollout, loop, n=N, max_staleness=max_staleness, total_batches=1)
    producer.batches = loader_batches(1)
    return producer


def agent_scripts(n):
    return {k: [f"first {k}<|im_end|>", f"second {k}<|im_end|>"] for k in range(n)}


def start_and_update_mid_episode(producer, backend, loop):
    """Start at version 0, wait until every episode made its first call, sync version 1,
    then let the episodes make their second call."""
    AGENT_GATE.clear()
    loop.run(_make_gate())
    producer.start(version=0)
    wait_until(lambda: sum(len(v) for v in backend.outputs.values()) == BATCH * N)
    backend.weight_version = 1  # the weight sync reached the servers
    producer.set_version(1)
    loop.loop.call_soon_threadsafe(AGENT_GATE["open"].set)


async def _make_gate():
    AGENT_GATE["open"] = asyncio.Event()  # made on the loop that waits on it


def test_an_agent_episode_spanning_an_update_keeps_its_earlier_calls(tiny_tokenizer, loop):
    from agentrl.trainer.off_policy import staleness_metrics

    backend = ConversationScriptBackend(tiny_tokenizer, agent_scripts(BATCH))
    producer = make_agent_producer(tiny_tokenizer, loop, backend, max_staleness=1)
    start_and_update_mid_episode(producer, backend, loop)
    groups, stats = producer.take(BATCH, policy_version=1)
    assert stats.dropped == 0
    assert all(g.versions == [0, 1] for g in groups)  # partial episodes, kept whole
    for request in (r for g in groups for r in g.requests):
        model = [v for v, m in zip(request.weight_versions, request.loss_mask,
                                           strict=True) if m]
        first = len(tiny_tokenizer.encode(f"first {request.batch_data_id}<|im_end|>"))
        assert model[:first] == [0] * first  # the first call's tokens keep their version
        assert set(model[first:]) == {1}
    data = producer.collect(groups, {"global_steps": 2})
    assert data.batch["rm_scores"].sum() == BATCH * N  # each episode's reward
    assert data.meta_info["metrics"]["rollout/agent_errors"] == 0
    metrics = staleness_metrics(data.batch["rollout_versions"], data.batch["response_mask"], 1)
    assert metrics["async/partial_episodes"] == BATCH * N
    assert metrics["async/staleness/max"] == 1.0  # from the oldest token, not the newest
    producer.stop()
    assert producer.engine.app.state.sessions == {}  # every episode's session released


def test_staleness_is_per_token_an_episode_with_an_old_call_is_dropped(tiny_tokenizer, loop):
    backend = ConversationScriptBackend(tiny_tokenizer, agent_scripts(BATCH))
    producer = make_agent_producer(tiny_tokenizer, loop, backend, max_staleness=0)
    start_and_update_mid_episode(producer, backend, loop)
    # the last call is of version 1, but the first is of version 0: too stale for
    # max_staleness 0 at version 1, so each group is generated again from its prompt
    groups, stats = producer.take(BATCH, policy_version=1)
    assert stats.dropped == BATCH and producer.dropped_total == BATCH
    assert all(g.versions == [1] for g in groups)
    producer.stop()
