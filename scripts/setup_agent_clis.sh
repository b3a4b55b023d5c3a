#!/usr/bin/env bash
# Install the agent harnesses agentrl can train inside (agentrl.agents, tests marked
# `harness`): Claude Code and the Codex CLI from npm, at the versions these docs were tested
# with, into a folder of their own (default .agent-clis/; both ship native binaries, ~660 MB).
# Needs node >= 18 and npm. Safe to re-run: an install of the same versions is kept.
#   AGENTRL_AGENT_CLIS=.agent-clis               where they go (relative: to the repository)
#   AGENTRL_CLAUDE_CODE_SPEC=@anthropic-ai/claude-code@2.1.197
#   AGENTRL_CODEX_SPEC=@openai/codex@0.171.0
# Prints the two lines to export so that agentrl and the tests find them.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${AGENTRL_AGENT_CLIS:-.agent-clis}
CLAUDE_SPEC=${AGENTRL_CLAUDE_CODE_SPEC:-@anthropic-ai/claude-code@2.1.197}
CODEX_SPEC=${AGENTRL_CODEX_SPEC:-@openai/codex@0.171.0}
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "node and npm are needed (e.g. apt-get install nodejs npm)" >&2
  exit 2
fi
MARKER="$DIR/.agentrl-installed"
if [ -f "$MARKER" ] && [ "$(cat "$MARKER")" = "$CLAUDE_SPEC $CODEX_SPEC" ] \
    && [ -x "$DIR/node_modules/.bin/claude" ] && [ -x "$DIR/node_modules/.bin/codex" ]; then
  echo "$DIR is up to date ($CLAUDE_SPEC, $CODEX_SPEC)" >&2
else
  mkdir -p "$DIR"
  npm install --silent --no-audit --no-fund --prefix "$DIR" "$CLAUDE_SPEC" "$CODEX_SPEC" >&2
  echo "$CLAUDE_SPEC $CODEX_SPEC" > "$MARKER"
fi
case "$DIR" in
  /*) ABS=$DIR ;;
  *) ABS=$PWD/$DIR ;;
esac
echo "export AGENTRL_CLAUDE_BIN=$ABS/node_modules/.bin/claude"
echo "export AGENTRL_CODEX_BIN=$ABS/node_modules/.bin/codex"
