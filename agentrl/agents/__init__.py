"""Harness agents: unmodified agent CLIs (Claude Code, Codex) as agent-mode functions.

    actor_rollout_ref.rollout.agent_function: agentrl.agents.claude_code.run   # or .codex.run

Each sample's episode runs the CLI in a fresh workspace made from the row, sandboxed
(bubblewrap: an allow-listed root that shows nothing of the host but the system folders
and what the CLI needs, the workspace the only writable place, no network but the
gateway, rlimits, the process tree killed at the budget), its model calls sent to the
sample's gateway session, and is scored by the row's check run afterwards over a copy of
the workspace holding the check's own files (docs/agents.md).

- harness.py: one episode (options, workspace, relay, sandbox, check)
- claude_code.py, codex.py: what each CLI needs (command, environment, final answer)
- workspace.py: the row -> files, prompt, budget
- relay.py: the unix socket -> the gateway session, with the turn budget
- bridge.py: inside the sandbox, loopback TCP -> that socket, then the CLI
- cage.py: the Sandbox interface (start, copy in, run, copy out, close) and its loader
- sandbox.py: the bubblewrap cage (sandbox=bwrap, the default), rlimits, the tree's kill
- container.py: sandbox=container, a podman container per run from a named image
- limits.py: the whole episode's limits (cgroups: memory, tasks, CPU share; the disk)
"""
