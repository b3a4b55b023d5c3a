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
#
# A stage that misses its target stops the recipe with the quickstart's message and exit
# status (3; 2 is a refused flag or setting): the teacher's SFT reaching its cap before its
# skill check (no student is trained), or a teacher scoring below the student after SFT (no
# distillation). --allow-weak-teacher / --allow-missed-targets go on anyway
# (docs/quickstart.md, "When a stage misses its target").
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
# stopped RUN STATUS WHAT: say which run stopped and what did not run (the run's own message
# is above), then exit with the run's status
stopped() {
  local report="$out_dir/$1/report.json"
  [ -f "$report" ] && report="; its report: $report" || report=""
  echo "recipes/distill/run_cpu.sh: the $1 run stopped (exit status $2): $3$report" >&2
  exit "$2"
}
if [ -z "$teacher" ]; then
  status=0
  "$bin/agentrl" quickstart --out-dir "$out_dir/teacher" --size "$teacher_size" --no-control \
    "$@" || status=$?
  [ "$status" -eq 0 ] || stopped teacher "$status" "no student was trained"
  teacher=$("$bin/python" - "$out_dir/teacher/rl" <<'PY'
import sys
from pathlib import Path
root = Path(sys.argv[1])
step = int((root / "latest_checkpointed_iteration.txt").read_text().strip())
print(root / f"global_step_{step}" / "actor" / "huggingface")
PY
)
fi
status=0
"$bin/agentrl" quickstart --out-dir "$out_dir/student" --teacher "$teacher" "$@" || status=$?
if [ -f "$out_dir/student/report.json" ]; then
  cp "$out_dir/student/report.json" "$out_dir/report.json"
fi
[ "$status" -eq 0 ] || stopped student "$status" "the student was not distilled"
"$bin/python" - "$out_dir/report.json" <<'PY'
import json
import sys
report = json.loads(open(sys.argv[1]).read())
for key in ("eval_sft", "eval_rl", "control", "teacher"):
    m = report[key]
    print(f"{key:9s} accuracy {m['accuracy']:.3f} ± {m['accuracy_stderr']:.3f}")
PY
