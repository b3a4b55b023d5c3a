"""CPUThreads: as many intra-op threads as cores other programs leave free."""

from __future__ import annotations

import threading

import pytest
import torch

from agentrl.utils import threads as threads_module
from agentrl.utils.threads import CPUThreads, threads_for


@pytest.fixture(autouse=True)
def _keep_torch_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_threads_for_the_free_cores():
    assert threads_for(0.0, 2) == 2
    assert threads_for(0.5, 2) == 2  # less than BUSY_CORE of a core: still free
    assert threads_for(0.7, 2) == 1 and threads_for(1.0, 2) == 1
    assert threads_for(2.0, 2) == 1  # never none
    assert threads_for(1.3, 8) == 7 and threads_for(2.65, 8) == 5


class FakeMachine:
    """/proc/stat and /proc/self/stat as counters the test moves (100 ticks per second)."""

    def __init__(self, monkeypatch):
        self.now, self.busy, self.own = 0.0, 0, 0
        monkeypatch.setattr(threads_module, "_machine_busy_ticks", lambda: self.busy)
        monkeypatch.setattr(threads_module, "_own_ticks", lambda: self.own)
        monkeypatch.setattr(threads_module.time, "monotonic", lambda: self.now)
        monkeypatch.setattr(threads_module, "_CLOCK_TICKS", 100)
        monkeypatch.setattr(threads_module, "usable_cores", lambda: 2)

    def run(self, seconds: float, own_cores: float, other_cores: float) -> None:
        self.now += seconds
        self.own += int(100 * seconds * own_cores)
        self.busy += int(100 * seconds * (own_cores + other_cores))


def test_a_busy_core_is_left_to_the_other_program_and_taken_back(monkeypatch):
    machine = FakeMachine(monkeypatch)
    governor = CPUThreads(interval_s=1.0, setting="auto")
    assert governor.tick() == 2 and torch.get_num_threads() == 2
    machine.run(1.0, own_cores=1.9, other_cores=0.05)  # alone: both cores
    assert governor.tick() == 2
    machine.run(1.0, own_cores=1.0, other_cores=1.0)  # `yes > /dev/null` on one core
    assert governor.tick() == 1 and torch.get_num_threads() == 1
    machine.run(0.5, own_cores=1.0, other_cores=0.0)  # within the interval: no new reading
    assert governor.tick() == 1
    machine.run(1.0, own_cores=1.0, other_cores=0.0)  # the other program ended
    assert governor.tick() == 2 and torch.get_num_threads() == 2
    assert governor.changes == 2


def test_each_os_thread_gets_the_count_set_in_it(monkeypatch):
    FakeMachine(monkeypatch)
    governor = CPUThreads(setting="1")
    seen = []
    worker = threading.Thread(target=lambda: seen.append((governor.tick(),
                                                          torch.get_num_threads())))
    worker.start()
    worker.join()
    assert seen == [(1, 1)]
    assert governor.tick() == 1 and torch.get_num_threads() == 1


def test_the_setting_fixes_the_count_or_is_named(monkeypatch):
    monkeypatch.setenv("AGENTRL_CPU_THREADS", "3")
    assert CPUThreads().tick() == 3
    monkeypatch.setenv("AGENTRL_CPU_THREADS", "many")
    with pytest.raises(ValueError, match="AGENTRL_CPU_THREADS='many': use auto or a number"):
        CPUThreads()
    with pytest.raises(ValueError, match="use auto or a number >= 1"):
        CPUThreads(setting="0")
