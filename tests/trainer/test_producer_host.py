"""The producer's process: `ProducerHost` is the `RolloutProducer` in a Ray actor, with only
what the process adds (no method that only forwards to the producer), and every call the
off-policy source makes on the actor handle names a method the actor has. Runs of the actor
itself: tests/trainer/test_off_policy.py."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import agentrl.trainer.off_policy as off_policy
from agentrl.trainer.producer import RolloutProducer
from agentrl.trainer.producer_host import ProducerHost


def forwarders(class_source: str) -> list[str]:
    """Methods whose body (docstring aside) is one call of another object's method with
    the method's own parameters, unchanged: `return self.producer.start(version)`."""
    (node,) = ast.parse(class_source).body
    found = []
    for function in node.body:
        if not isinstance(function, ast.FunctionDef) or function.name == "__init__":
            continue
        body = [s for s in function.body
                if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]  # fmt: skip
        if len(body) != 1 or not isinstance(body[0], ast.Return | ast.Expr):
            continue
        call = body[0].value
        params = [a.arg for a in function.args.args[1:]]
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and [ast.unparse(a) for a in call.args] == params and not call.keywords):  # fmt: skip
            found.append(function.name)
    return found


def test_the_scan_finds_a_forwarder():
    code = ("class H:\n    def start(self, version):\n        self.producer.start(version)\n"
            "    def wanted(self):\n        'doc'\n        return self.producer.wanted()\n"
            "    def take(self, n):\n        return self.producer.take(n + 1)\n")
    assert forwarders(code) == ["start", "wanted"]


def test_the_host_is_the_producer_with_no_forwarder():
    assert issubclass(ProducerHost, RolloutProducer)
    assert forwarders(inspect.getsource(ProducerHost)) == []
    added = {name for name, value in vars(ProducerHost).items()
             if callable(value) and not name.startswith("_")}  # fmt: skip
    assert added == {"ready", "take_batch", "set_drained", "stacks", "close"}
    assert not added & set(vars(RolloutProducer)), "the host overrides a producer method"


def actor_calls(source: str) -> set[str]:
    """The method names in `self.host.<name>.remote(...)`."""
    calls = set()
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Attribute) and node.attr == "remote"
                and isinstance(node.value, ast.Attribute)
                and ast.unparse(node.value.value) == "self.host"):  # fmt: skip
            calls.add(node.value.attr)
    return calls


def test_every_call_on_the_actor_names_a_method_it_has():
    calls = actor_calls(Path(off_policy.__file__).read_text())
    assert {"start", "add_batch", "take_batch", "set_version", "close"} <= calls  # the scan
    methods = {name for name, value in inspect.getmembers(ProducerHost) if callable(value)}
    assert calls - methods == set()


def test_the_actor_stays_threaded_with_no_coroutine_method():
    """Ray makes an actor with any coroutine method (private ones too) an asyncio actor,
    whose plain methods would then run one at a time on its loop: `stacks` could not answer
    while a `take_batch` waits. The producer runs its coroutines as module functions."""
    coroutines = [name for name, member in inspect.getmembers(ProducerHost)
                  if inspect.iscoroutinefunction(member) or inspect.isasyncgenfunction(member)]
    assert coroutines == []


def test_close_stops_then_closes_the_rollout_its_engine_and_the_loop_even_when_one_raises():
    from types import SimpleNamespace

    import pytest

    closed = []

    def closer(name, error=False):
        def close():
            closed.append(name)
            if error:
                raise RuntimeError(f"{name} failed")
        return close

    host = object.__new__(ProducerHost)  # its parts only: no rollout servers
    host.main_task = None  # nothing started: stop has nothing to cancel
    host.rollout = SimpleNamespace(close=closer("rollout", error=True))
    host.engine = SimpleNamespace(close=closer("engine"))
    host.loop = SimpleNamespace(close=closer("loop"))
    with pytest.raises(RuntimeError, match="rollout failed"):
        host.close()
    assert closed == ["rollout", "engine", "loop"]


def test_every_engine_kind_the_host_builds_has_the_producers_engine_interface():
    from agentrl.gateway.agent_rollout import AgentRollout
    from agentrl.rollout.engine import AsyncRolloutEngine
    from agentrl.trainer.producer import ProducerEngine

    members = {"new_context", "build_requests", "run_request", "collect", "close"}
    assert members <= set(vars(ProducerEngine))
    for engine in (AsyncRolloutEngine, AgentRollout):
        for name in members:
            wanted = inspect.signature(getattr(ProducerEngine, name)).parameters
            has = inspect.signature(getattr(engine, name)).parameters
            keywords = {k for k, p in wanted.items() if p.default is not p.empty}
            assert len(has) >= len(wanted) and keywords <= set(has), (engine.__name__, name)
            assert inspect.iscoroutinefunction(getattr(engine, name)) == (name == "run_request")
