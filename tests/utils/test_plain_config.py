"""plain_config: a resolved, read-only snapshot with attribute access."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from agentrl.utils.plain_config import PlainConfig, plain_config


def test_snapshot_resolves_reads_like_the_config_and_is_read_only():
    cfg = OmegaConf.create({"a": 2, "b": "${a}", "sub": {"x": [1, {"y": 3}], "z": None}})
    snap = plain_config(cfg)
    assert snap.b == 2 and snap["a"] == 2 and snap.sub.z is None
    assert snap.sub.x[1].y == 3 and isinstance(snap.sub, PlainConfig)
    with pytest.raises(AttributeError, match="no key 'nope'"):
        _ = snap.nope
    with pytest.raises(TypeError, match="read-only"):
        snap.a = 3
    assert plain_config({"k": {"v": 1}}).k.v == 1 and plain_config(None) is None


def test_a_snapshot_pickles_for_other_processes():
    import pickle

    snap = plain_config(OmegaConf.create({"a": {"b": [1, {"c": 2}]}, "d": "${a.b}"}))
    again = pickle.loads(pickle.dumps(snap))
    assert again == snap and isinstance(again.a, PlainConfig) and again.a.b[1].c == 2
    with pytest.raises(TypeError, match="read-only"):
        again.x = 1
