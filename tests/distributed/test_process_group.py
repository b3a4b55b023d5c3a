"""agentrl/distributed/process_group.py: a process's rank, the world's size, a barrier and an
object gather, the same with no group (one process) and over two gloo ranks."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from agentrl.distributed import process_group


def test_without_a_group_the_process_is_the_whole_world():
    assert process_group.rank() == 0
    assert process_group.world_size() == 1
    process_group.barrier()  # returns: nothing to wait for
    assert process_group.all_gather_object({"a": 1}) == [{"a": 1}]


RANK = textwrap.dedent("""
    import json, sys
    import torch.distributed as dist
    from agentrl.distributed import process_group
    rank, store = int(sys.argv[1]), sys.argv[2]
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    process_group.barrier()
    out = {"rank": process_group.rank(), "world": process_group.world_size(),
           "gathered": process_group.all_gather_object(f"from {rank}")}
    dist.destroy_process_group()
    print(json.dumps(out))
""")


def test_two_ranks_see_their_ranks_and_gather_in_rank_order(tmp_path):
    store = tmp_path / "store"
    procs = [subprocess.Popen([sys.executable, "-c", RANK, str(r), str(store)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in (1, 0)]  # fmt: skip
    outs = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr
        outs.append(json.loads(stdout.strip().splitlines()[-1]))
    by_rank = {o["rank"]: o for o in outs}
    assert set(by_rank) == {0, 1}
    for o in outs:
        assert o["world"] == 2
        assert o["gathered"] == ["from 0", "from 1"]
