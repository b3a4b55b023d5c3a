"""No config key without effect: every leaf of the defaults tree is read by some code.

A static check (issue: keys accepted and silently ignored are the bug users of RL libraries
report most): each leaf's name must appear as an attribute or a quoted name in the package's
source (agentrl/, tools/, envs/). It cannot prove a key is honoured, only that nothing in
the tree is dead; behaviour is tested key by key elsewhere. Keys that only matter with a
feature agentrl refuses are listed with that reason.
"""

from __future__ import annotations

import re
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from agentrl.config import DEFAULT_CONFIG_PATH
from agentrl.config.validate import NOT_YET

ROOT = Path(__file__).resolve().parents[2]

# leaf -> the refused key that gates it (validate.NOT_YET)
GATED = {
}


def _leaves(node: DictConfig, prefix: str = "") -> list[str]:
    out = []
    for key in node:
        child = node._get_node(key)
        path = f"{prefix}{key}"
        if isinstance(child, DictConfig) and len(child) > 0:
            out.extend(_leaves(child, path + "."))
        else:
            out.append(path)
    return out


def test_every_key_in_the_defaults_is_read_by_some_code():
    source = "\n".join(
        f.read_text() for folder in ("agentrl", "tools", "envs")
        for f in (ROOT / folder).rglob("*.py")
    )  # fmt: skip
    unread = [
        key for key in _leaves(OmegaConf.load(DEFAULT_CONFIG_PATH))
        if key not in GATED
        and not re.search(r"[.\"']" + re.escape(key.rsplit(".", 1)[-1]) + r"\b", source)
    ]  # fmt: skip
    assert unread == []


def test_gated_keys_wait_for_a_refused_feature():
    for key, gate in GATED.items():
        assert gate in NOT_YET, f"{key} is gated by {gate}, which is not refused"
