"""bench/slowed.py, the benches' slowed-machine options: the mechanics (competitors pinned,
busy their share and gone afterwards; the cgroup found, its quota written, the process moved
in and back), not the speed they cause."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import slowed  # noqa: E402

sys.path.remove(str(ROOT / "bench"))


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    slowed.add_arguments(parser)
    args = parser.parse_args(argv)
    slowed.check_arguments(parser, args)
    return args


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def gone(pid: int, within_s: float) -> bool:
    """Whether `pid` exited (or is a zombie nobody reaps) within `within_s` seconds."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def competitors(parent: int) -> list[int]:
    """The busy-loop children of `parent`, once they run the loop (a child shows its
    parent's command line until it has started)."""
    deadline = time.monotonic() + 10
    while True:
        children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
        found = [int(pid) for pid in children
                 if "share, period, parent" in Path(f"/proc/{pid}/cmdline").read_text()]
        if (found and len(found) == len(children)) or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


# ---------------------------------------------------------------------- the options


@pytest.mark.parametrize("argv, error", [
    (["--busy-share", "0"], "--busy-share 0.0: must be between 0 and 1"),
    (["--busy-share", "1.5"], "--busy-share 1.5: must be between 0 and 1"),
    (["--cpu-quota", "1"], "--cpu-quota 1.0: must be between 0 and 1"),
    (["--cpu-quota", "0.7", "--busy-share", "0.3"], "not allowed with argument"),
])  # fmt: skip
def test_out_of_range_or_both_options_are_refused_naming_the_option(argv, error, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse(*argv)
    assert exit_info.value.code == 2 and error in capsys.readouterr().err


def test_an_idle_machine_is_recorded_as_null():
    with slowed.slowed_machine(parse()) as record:
        assert record is None


# ---------------------------------------------------------------------- busy share


def test_the_competitors_are_pinned_busy_their_share_and_gone_afterwards():
    core = slowed.bench_cores()[-1]
    with slowed.busy_share(0.3, cores=[core]) as record:
        busy = competitors(os.getpid())
        assert len(busy) == 1
        assert os.sched_getaffinity(busy[0]) == {core}
        assert os.getpriority(os.PRIO_PROCESS, busy[0]) == record["nice"]
        time.sleep(0.3)  # started
        before, started = cpu_seconds(busy[0]), time.monotonic()
        time.sleep(2.0)
        share = (cpu_seconds(busy[0]) - before) / (time.monotonic() - started)
    assert record == {"mechanism": "busy_share", "share": 0.3, "period_ms": 10.0,
                      "cores": [core], "nice": record["nice"]}  # fmt: skip
    assert record["nice"] in (slowed.BUSY_NICE, 0)
    # busy for 30% of the wall time at most; less when other programs' cgroups take the
    # core during its busy slices (nice ranks it within this cgroup only), as on this shared
    # test machine: the benches measure on an otherwise idle one
    assert 0.3 / 4 < share < 0.3 + 0.05, share
    assert gone(busy[0], 5.0)


def test_a_competitor_exits_when_the_bench_is_killed(tmp_path):
    script = tmp_path / "bench.py"
    script.write_text(
        f"import sys, time; sys.path.insert(0, {str(ROOT / 'bench')!r}); import slowed\n"
        "with slowed.busy_share(0.1, cores=[0]):\n"
        "    print('ready', flush=True); time.sleep(60)\n"
    )
    bench = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert bench.stdout.readline().strip() == "ready"
        children = competitors(bench.pid)
        assert len(children) == 1
        bench.send_signal(signal.SIGKILL)  # no clean-up runs
        bench.wait(10)
        assert gone(children[0], 5.0)
    finally:
        bench.kill()


# ---------------------------------------------------------------------- cgroup quota

HYBRID_MOUNTS = """\
tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
cgroup /sys/fs/cgroup/cpuacct cgroup rw,relatime,cpuacct 0 0
cgroup /sys/fs/cgroup/cpuset cgroup rw,relatime,cpuset 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
"""
HYBRID_SELF = "3:cpuset:/\n2:cpuacct:/\n1:cpu:/jobs/a\n0::/\n"


def test_the_cpu_hierarchy_is_found_in_v1_v2_and_hybrid_layouts(tmp_path):
    assert slowed.find_cpu_cgroup(HYBRID_MOUNTS, HYBRID_SELF) == (
        1, Path("/sys/fs/cgroup/cpu/jobs/a"))
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    v2 = f"cgroup2 {tmp_path} cgroup2 rw,nosuid 0 0\n"
    assert slowed.find_cpu_cgroup(v2, "0::/user.slice/job\n") == (2, tmp_path / "user.slice/job")
    (tmp_path / "cgroup.controllers").write_text("memory pids\n")  # cpu bound to v1 elsewhere
    assert slowed.find_cpu_cgroup(v2, "0::/\n") is None


def test_the_quota_is_the_share_of_every_core():
    assert slowed.quota_files(2, 0.7, 2, 0.010) == {"cpu.max": "14000 10000"}
    assert slowed.quota_files(1, 0.7, 2, 0.010) == {
        "cpu.cfs_period_us": "10000", "cpu.cfs_quota_us": "14000"}


def test_a_v2_quota_moves_in_enables_cpu_and_undoes_it(tmp_path, monkeypatch):
    home = tmp_path / "job"
    home.mkdir()
    (home / "cgroup.subtree_control").write_text("memory\n")
    monkeypatch.setattr(slowed, "bench_cores", lambda: [0, 1])
    group = home / f"agentrl-bench-{os.getpid()}"
    # a real cgroup directory goes away with rmdir while its control files are listed
    real_rmdir = Path.rmdir
    monkeypatch.setattr(Path, "rmdir", lambda self: [p.unlink() for p in self.iterdir()]
                        and real_rmdir(self) or real_rmdir(self))  # fmt: skip
    with slowed.cpu_quota(0.7, found=(2, home)) as record:
        assert (group / "cgroup.procs").read_text() == str(os.getpid())
        assert (home / "cgroup.subtree_control").read_text() == "+cpu"
        assert (group / "cpu.max").read_text() == "14000 10000"
    assert record == {"mechanism": "cpu_quota", "quota": 0.7, "period_ms": 10.0,
                      "cores": [0, 1], "cgroup_version": 2, "cgroup": str(group)}  # fmt: skip
    assert (home / "cgroup.subtree_control").read_text() == "-cpu"
    assert (home / "cgroup.procs").read_text() == str(os.getpid())
    assert not group.exists()


def test_no_cpu_hierarchy_stops_with_the_way_out(monkeypatch):
    monkeypatch.setattr(slowed, "find_cpu_cgroup", lambda mounts, self_cgroup: None)
    with pytest.raises(SystemExit, match="no cgroup hierarchy with the cpu controller.*"
                                         "use --busy-share"), slowed.cpu_quota(0.7):
        pass


def _writable_cpu_cgroup() -> bool:
    found = slowed.find_cpu_cgroup(Path("/proc/self/mounts").read_text(),
                                   Path("/proc/self/cgroup").read_text())
    return found is not None and os.access(found[1], os.W_OK)


@pytest.mark.skipif(not _writable_cpu_cgroup(), reason="no writable cgroup with the cpu controller")
def test_a_real_quota_holds_this_process_and_its_children_then_lets_go():
    with slowed.cpu_quota(0.5) as record:
        group = Path(record["cgroup"])
        mine = Path("/proc/self/cgroup").read_text()
        child = subprocess.run([sys.executable, "-c", "print(open('/proc/self/cgroup').read())"],
                               capture_output=True, text=True, check=True).stdout
        files = {p.name: p.read_text().strip() for p in group.iterdir()
                 if p.name in ("cpu.max", "cpu.cfs_quota_us", "cpu.cfs_period_us")}
    name = group.name
    assert name in mine and name in child  # what the bench starts runs under the quota
    cores = len(slowed.bench_cores())
    assert files in ({"cpu.max": f"{5000 * cores} 10000"},
                     {"cpu.cfs_quota_us": str(5000 * cores), "cpu.cfs_period_us": "10000"})
    assert name not in Path("/proc/self/cgroup").read_text() and not group.exists()


# ---------------------------------------------------------------------- the benches


def test_the_off_policy_bench_records_the_slowed_machine_in_its_json(monkeypatch, capsys):
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import async_vs_sync
    finally:
        sys.path.remove(str(ROOT / "bench"))
    seen = {}

    def run_seed(out, seed, steps, modes, max_staleness, extra=()):
        # the first run's, with --busy-share: in the others there are none to find, and
        # competitors() would look for 10 s each time
        if "children" not in seen:
            seen["children"] = competitors(os.getpid())
        seen["extra"] = extra
        run = {"steps_per_min": 2.0, "loop_s": 1.0, "gen_s": 0.5, "update_s": 0.5,
               "accuracy": 0.5, "accuracy_stderr": 0.1, "tool_call_rate": 1.0,
               "staleness_max": 0, "dropped_stale": 0}  # fmt: skip
        return {"seed": seed, "steps": steps, "eval_sft": run, **{m: run for m in modes}}

    monkeypatch.setattr(async_vs_sync, "run_seed", run_seed)
    assert async_vs_sync.main(["--modes", "sync", "async", "--busy-share", "0.2"]) == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["slowed"]["mechanism"] == "busy_share" and line["slowed"]["share"] == 0.2
    assert len(seen["children"]) == len(slowed.bench_cores())  # while it measured
    assert async_vs_sync.main(["--modes", "sync"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["slowed"] is None
    # --override reaches every mode's run and the JSON line
    assert async_vs_sync.main(["--modes", "sync", "--override", "trainer.trace=false",
                               "--override", "trainer.seed=3"]) == 0  # fmt: skip
    assert seen["extra"] == ("trainer.trace=false", "trainer.seed=3")
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["overrides"] == ["trainer.trace=false", "trainer.seed=3"]

