#!/usr/bin/env bash
# On-policy distillation on CPU: a larger tiny model trained on the quickstart's calculator
# task (SFT + GRPO) is the teacher; a nano student, after the same SFT warm-up, distils from
# it on its own samples (algorithm.adv_estimator=on_policy_distill), beside the SFT-only
# control. Writes OUT_DIR/report.json with eval_sft (the student before), eval_rl (after
# distillation), control and teacher, each with accuracy and its standard error.
#
#   bash recipes/distill/run_cpu.sh OUT_DIR [--seed N] [quickstart flags / overrides]
#   AGENTRL_DISTILL_TEACHER=DIR bash recipes/distill/run_cpu.sh ...   # reuse a trained teacher
#     (an HF model directory of the task, e.g. an earlier run's teacher export)
set -euo pipefail
if [ $# -lt 1 ] || [[ "$1" == -* ]]; then
  echo "usage: bash recipes/distill/run_cpu.sh OUT_DIR [--seed N] [...]" >&2
  exit 2
fi
out_dir=$1
shift
repo=$(cd "$(dirname "$0")/../.." && pwd)
bin="${AGENTRL_VENV:-$repo/.venv}/bin"
[ -x "$bin/agentrl" ] || bin=$(dirname "$(command -v agentrl)")
teacher_size=${AGENTRL_DISTILL_TEACHER_SIZE:-tiny}
teacher=${AGENTRL_DISTILL_TEACHER:-}
if [ -z "$teacher" ]; then
  "$bin/agentrl" quickstart --out-dir "$out_dir/teacher" --size "$teacher_size" --no-control "$@"
  teacher=$("$bin/python" - "$out_dir/teacher/rl" <<'PY'
import sys
from pathlib import Path
root = Path(sys.argv[1])
step = int((root / "latest_checkpointed_iteration.txt").read_text().strip())
print(root / f"global_step_{step}" / "actor" / "huggingface")
PY
)
fi
"$bin/agentrl" quickstart --out-dir "$out_dir/student" --teacher "$teacher" "$@"
cp "$out_dir/student/report.json" "$out_dir/report.json"
"$bin/python" - "$out_dir/report.json" <<'PY'
import json
import sys
report = json.loads(open(sys.argv[1]).read())
for key in ("eval_sft", "eval_rl", "control", "teacher"):
    m = report[key]
    print(f"{key:9s} accuracy {m['accuracy']:.3f} ± {m['accuracy_stderr']:.3f}")
PY
