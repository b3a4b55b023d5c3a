# shellcheck shell=bash
# The lifecycle of a GPU recipe's run: start a helper server (retriever, sandbox) and wait
# for its /health, run the trainer, and stop everything started on any exit. Sourced by
# recipes/*/run_gpu.sh after `set -euo pipefail`:
#
#   source "$(dirname "$0")/../services.sh"
#   install_cleanup
#   start_service sandbox "$LOG" "http://127.0.0.1:$PORT/health" 60 SANDBOX_PORT -- cmd ...
#   run_trainer agentrl train --config ... key.sub=value ... "$@"
#
# Every child runs in a process group of its own (setsid), so stopping it stops what it
# spawned too; where setsid is missing, only the child itself is stopped. The script must
# run without job control (`bash run_gpu.sh`), so that setsid starts each group with the
# child's own pid. Messages go to stderr, prefixed with the script's name.
#
# Environment: STOP_GRACE  seconds between SIGTERM and SIGKILL when stopping a group [30]

OWN_GROUP=()
command -v setsid >/dev/null 2>&1 && OWN_GROUP=(setsid)
STARTED_NAMES=()  # what spawn started, in order, for cleanup
STARTED_PIDS=()

# say MESSAGE...: print MESSAGE to stderr, prefixed with the script's name.
say() {
  echo "${0##*/}: $*" >&2
}

# die MESSAGE...: say MESSAGE and exit 1.
die() {
  say "$@"
  exit 1
}

# spawn NAME CMD...: run CMD in the background in a process group of its own and record it
# as NAME for cleanup; sets SPAWNED_PID. Redirections of the call apply to CMD.
spawn() {
  local name=$1
  shift
  ${OWN_GROUP[@]+"${OWN_GROUP[@]}"} "$@" &
  SPAWNED_PID=$!
  STARTED_NAMES+=("$name")
  STARTED_PIDS+=("$SPAWNED_PID")
}

# stop_group NAME PID: stop the process group PID leads (PID alone without setsid), named
# NAME in messages: SIGTERM, then SIGKILL if it outlives STOP_GRACE seconds. A group with
# nothing left running is skipped silently.
stop_group() {
  local name=$1 target=$2 what="process group $2" grace=${STOP_GRACE:-30} waited=0
  if [[ ${#OWN_GROUP[@]} -gt 0 ]]; then target=-$2; else what="pid $2"; fi
  kill -0 -- "$target" 2>/dev/null || return 0
  say "stopping the $name ($what)"
  kill -TERM -- "$target" 2>/dev/null || true
  while kill -0 -- "$target" 2>/dev/null && ((waited < grace * 10)); do
    sleep 0.1
    waited=$((waited + 1))
  done
  if kill -0 -- "$target" 2>/dev/null; then
    say "the $name did not stop in ${grace} s; killing it"
    kill -KILL -- "$target" 2>/dev/null || true
  fi
}

# install_cleanup: on any exit (success, error, Ctrl-C, SIGTERM) stop every group spawn
# started, the last one first, keeping the exit status; Ctrl-C exits 130, SIGTERM 143.
install_cleanup() {
  trap cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

# cleanup: the EXIT trap of install_cleanup.
cleanup() {
  local status=$? i
  trap - EXIT INT TERM
  for ((i = ${#STARTED_PIDS[@]} - 1; i >= 0; i--)); do
    stop_group "${STARTED_NAMES[i]}" "${STARTED_PIDS[i]}"
  done
  exit "$status"
}

# service_failed LOG WHY: say WHY with the last 30 lines of LOG, and exit 1.
service_failed() {
  say "$2; the last lines of $1:"
  tail -n 30 "$1" >&2
  exit 1
}

# start_service NAME LOG URL TIMEOUT PORT_VAR -- CMD...: start the server CMD (named NAME
# in messages) in a process group of its own with its output in LOG, and wait up to TIMEOUT
# seconds for its health URL to answer; sets SERVICE_PID. Exits 1 if something already
# answers URL (PORT_VAR names the setting that picks another port), or with LOG's tail if
# the server exits or does not answer in time.
start_service() {
  local name=$1 log=$2 url=$3 timeout=$4 port_var=$5 deadline status
  [[ "${6:-}" == -- ]] || die "start_service: no -- before the command"
  shift 6
  # A server already answering, with any HTTP status, would be taken for ours.
  if curl -s -o /dev/null --max-time 2 "$url"; then
    die "something already answers on $url; stop it or set $port_var"
  fi
  spawn "$name" "$@" >"$log" 2>&1 </dev/null
  SERVICE_PID=$SPAWNED_PID
  say "$name pid $SERVICE_PID (log $log); waiting up to ${timeout} s for $url"
  deadline=$((SECONDS + timeout))
  until curl -sf -o /dev/null --max-time 5 "$url"; do
    if ! kill -0 "$SERVICE_PID" 2>/dev/null; then
      status=0
      wait "$SERVICE_PID" || status=$?
      say "the $name exited with status $status"
      service_failed "$log" "the $name exited before answering /health"
    fi
    ((SECONDS < deadline)) ||
      service_failed "$log" "the $name did not answer $url within ${timeout} s"
    sleep 0.5
  done
  kill -0 "$SERVICE_PID" 2>/dev/null || service_failed "$log" "another process answers $url"
  say "the $name is ready: $(curl -s --max-time 5 "$url")"
}

# run_trainer CMD...: run the training command CMD in a process group of its own, wait for
# it, and exit with its status (the cleanup trap then stops whatever is left).
run_trainer() {
  local status=0
  spawn trainer "$@"
  say "trainer pid $SPAWNED_PID"
  wait "$SPAWNED_PID" || status=$?
  say "training exited with status $status"
  exit "$status"
}
