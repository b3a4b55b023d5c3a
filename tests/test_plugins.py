"""Tests for agentrl/plugins.py: the one plugin loader (dotted paths and file paths)."""

import collections
import textwrap

import pytest

from agentrl.plugins import PluginLoadError, load_object


def test_dotted_path_loads_object_and_nested_attribute():
    assert load_object("collections.OrderedDict") is collections.OrderedDict
    assert load_object("collections.OrderedDict.fromkeys") == collections.OrderedDict.fromkeys
    assert load_object("os.path.join").__name__ == "join"


def test_expected_base_is_checked():
    assert load_object("collections.OrderedDict", dict) is collections.OrderedDict
    with pytest.raises(PluginLoadError, match="is not a subclass of builtins.list"):
        load_object("collections.OrderedDict", list)
    with pytest.raises(PluginLoadError, match="is a function, expected a subclass of"):
        load_object("os.path.join", dict)


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("nosuchpkg_xyz.Thing", "cannot import 'nosuchpkg_xyz.Thing'"),
        ("collections.NoSuchName", "module 'collections' has no attribute 'NoSuchName'"),
        # a module missing inside an existing package is named as the missing module
        ("tools.calculatr.CalculatorTool",
         "cannot import 'tools.calculatr.CalculatorTool': no module named 'tools.calculatr'$"),
        ("collections.OrderDict", "has no attribute 'OrderDict'; did you mean OrderedDict"),
        ("Thing", "is not a plugin path"),
        ("a b.c", "is not a plugin path"),
        ("", "non-empty string"),
    ],
)
def test_bad_dotted_paths_name_the_problem(path, message):
    with pytest.raises(PluginLoadError, match=message):
        load_object(path)


def test_file_path_form_and_same_module_twice(tmp_path, monkeypatch):
    plugin = tmp_path / "my_plugin.py"
    plugin.write_text("class Thing(dict):\n    VALUE = 7\n")
    cls = load_object(f"{plugin}:Thing", dict)
    assert cls.VALUE == 7
    assert load_object(f"{plugin}:Thing") is cls
    # relative to base_dir when not found relative to the current directory
    monkeypatch.chdir(tmp_path.parent)
    assert load_object("my_plugin.py:Thing", base_dir=tmp_path) is cls
    monkeypatch.chdir(tmp_path)
    assert load_object("my_plugin.py:Thing") is cls


def test_file_errors_name_the_file(tmp_path):
    with pytest.raises(PluginLoadError, match="file not found"):
        load_object(f"{tmp_path}/missing.py:Thing")
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('bad plugin')\n")
    with pytest.raises(PluginLoadError, match="broken.py raised RuntimeError: bad plugin"):
        load_object(f"{broken}:Thing")


def test_module_whose_own_import_fails_is_reported_not_skipped(tmp_path, monkeypatch):
    pkg = tmp_path / "plugpkg_h4a"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text(
        textwrap.dedent(
            """
            import nosuchdependency_h4a
            class Thing: pass
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginLoadError, match="nosuchdependency_h4a"):
        load_object("plugpkg_h4a.mod.Thing")
