"""scripts/setup_agent_clis.sh prints the export lines of where the CLIs are: an absolute
AGENTRL_AGENT_CLIS as given, a relative one under the repository (it printed
$PWD//abs/path before)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).parents[2]
SCRIPT = REPO / "scripts" / "setup_agent_clis.sh"


def _installed(tmp_path: Path, where: Path) -> dict[str, str]:
    """An install the script keeps (the marker of its default versions, both binaries), and
    stand-ins for node and npm on PATH."""
    specs = [re.search(rf"{name}:-([^}}]+)}}", SCRIPT.read_text()).group(1)
             for name in ("AGENTRL_CLAUDE_CODE_SPEC", "AGENTRL_CODEX_SPEC")]
    bins = where / "node_modules" / ".bin"
    bins.mkdir(parents=True)
    for name in ("claude", "codex"):
        (bins / name).write_text("#!/bin/sh\n")
        (bins / name).chmod(0o755)
    (where / ".agentrl-installed").write_text(" ".join(specs) + "\n")
    tools = tmp_path / "tools"
    tools.mkdir()
    for name in ("node", "npm"):
        (tools / name).write_text("#!/bin/sh\nexit 1\n")  # not run: the install is kept
        (tools / name).chmod(0o755)
    return {**os.environ, "PATH": f"{tools}:{os.environ['PATH']}"}


def _exports(env: dict[str, str], dir_value: str) -> list[str]:
    done = subprocess.run(["bash", str(SCRIPT)], env={**env, "AGENTRL_AGENT_CLIS": dir_value},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "is up to date" in done.stderr
    return done.stdout.splitlines()


def test_an_absolute_folder_is_printed_as_given(tmp_path):
    where = tmp_path / "clis"
    env = _installed(tmp_path, where)
    assert _exports(env, str(where)) == [
        f"export AGENTRL_CLAUDE_BIN={where}/node_modules/.bin/claude",
        f"export AGENTRL_CODEX_BIN={where}/node_modules/.bin/codex",
    ]


def test_a_relative_folder_is_under_the_repository(tmp_path):
    where = tmp_path / "clis"
    env = _installed(tmp_path, where)
    relative = os.path.relpath(where, REPO)
    lines = _exports(env, relative)
    assert lines == [f"export AGENTRL_CLAUDE_BIN={REPO}/{relative}/node_modules/.bin/claude",
                     f"export AGENTRL_CODEX_BIN={REPO}/{relative}/node_modules/.bin/codex"]
    assert Path(lines[0].split("=", 1)[1]).resolve() == (
        where / "node_modules" / ".bin" / "claude").resolve()
