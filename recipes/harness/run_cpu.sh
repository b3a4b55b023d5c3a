#!/usr/bin/env bash
# GRPO on the offline shell tasks through an agent harness, on CPU: the tiny model served by
# the embedded hf engine behind the in-process gateway, Claude Code --bare (or Codex) as
# the agent in a bubblewrap sandbox, 2 steps. It shows the pipeline end to end; a tiny
# random model does not solve the tasks, so rewards stay ~0 and nothing is learned.
#   bash recipes/harness/run_cpu.sh OUT_DIR [key.sub=value ...]
#   AGENTRL_HARNESS=claude_code|codex (default claude_code); MODEL=DIR to skip make-tiny-model
# Needs the CLIs (scripts/setup_agent_clis.sh prints AGENTRL_CLAUDE_BIN / AGENTRL_CODEX_BIN)
# and bubblewrap (apt-get install bubblewrap; AGENTRL_AGENT_SANDBOX=none runs unsandboxed).
set -euo pipefail
if [ $# -lt 1 ] || [[ "$1" == -* ]]; then
  echo "usage: bash recipes/harness/run_cpu.sh OUT_DIR [key.sub=value ...]" >&2
  exit 2
fi
out_dir=$1
shift
harness=${AGENTRL_HARNESS:-claude_code}
case "$harness" in
  claude_code) export AGENTRL_CLAUDE_ARGS=${AGENTRL_CLAUDE_ARGS:---bare} ;;
  codex) ;;
  *) echo "AGENTRL_HARNESS must be claude_code or codex, got '$harness'" >&2; exit 2 ;;
esac
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${AGENTRL_VENV:-$root/.venv}/bin
export AGENTRL_AGENT_MAX_TURNS=${AGENTRL_AGENT_MAX_TURNS:-4}
export AGENTRL_AGENT_TIMEOUT_S=${AGENTRL_AGENT_TIMEOUT_S:-120}
export AGENTRL_AGENT_MAX_OUTPUT_TOKENS=${AGENTRL_AGENT_MAX_OUTPUT_TOKENS:-512}
# the CLI and the sandbox, checked before any work (each episode would fail without them)
"$bin/python" - "$harness" <<'PY'
import sys
from importlib import import_module
from agentrl.agents.harness import AgentOptions, find_binary
from agentrl.agents.sandbox import INSTALL_BWRAP, find_bwrap
harness = getattr(import_module(f"agentrl.agents.{sys.argv[1]}"),
                  {"claude_code": "CLAUDE_CODE", "codex": "CODEX"}[sys.argv[1]])
options = AgentOptions.from_env(harness)
try:
    find_binary(harness, options)
    if options.sandbox == "bwrap" and find_bwrap() is None:
        raise FileNotFoundError(f"the agent sandbox needs bubblewrap: {INSTALL_BWRAP}")
except FileNotFoundError as err:
    sys.exit(f"recipes/harness/run_cpu.sh: {err}")
PY
mkdir -p "$out_dir"
"$bin/python" "$root/examples/data_preprocess/shell_tasks.py" --local_dir "$out_dir/data" \
  --train_size 8 --test_size 3 --seed 0
model=${MODEL:-$out_dir/model}
if [ -z "${MODEL:-}" ] && [ ! -f "$model/config.json" ]; then
  "$bin/agentrl" make-tiny-model "$model"
fi
exec "$bin/agentrl" train --config "$root/recipes/harness/config.yaml" \
  actor_rollout_ref.model.path="$model" \
  data.train_files="$out_dir/data/train.parquet" \
  data.val_files="$out_dir/data/test.parquet" \
  actor_rollout_ref.rollout.agent_function="agentrl.agents.$harness.run" \
  trainer.default_local_dir="$out_dir/run" \
  "$@"
