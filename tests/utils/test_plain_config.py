"""plain_config: a resolved, read-only snapshot with attribute access; plain_dict and
plain_container: a section as a plain dict, OmegaConf containers as plain ones."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from agentrl.utils.plain_config import PlainConfig, plain_config, plain_container, plain_dict


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


def test_plain_dict_resolves_copies_and_names_what_is_not_a_mapping():
    cfg = OmegaConf.create({"a": 1, "b": "${a}", "sub": {"c": [1, 2]}})
    plain = plain_dict(cfg)
    assert plain == {"a": 1, "b": 1, "sub": {"c": [1, 2]}} and type(plain["sub"]) is dict
    source = {"k": 1}
    copy = plain_dict(source)
    assert copy == source and copy is not source
    assert plain_dict(None) == {}
    with pytest.raises(TypeError, match=r"reward_model.reward_kwargs must be a mapping, got list"):
        plain_dict(["x"], "reward_model.reward_kwargs")


def test_plain_container_unwraps_omegaconf_lists_and_dicts_only():
    cfg = OmegaConf.create({"name": "t.Tool", "entries": [{"class_name": "${name}"}]})
    entries = cfg.entries
    assert plain_container(entries) == [{"class_name": "t.Tool"}]
    assert type(plain_container(entries)) is list
    source = [{"class_name": "x"}]
    assert plain_container(source) is source and plain_container("tools.yaml") == "tools.yaml"
