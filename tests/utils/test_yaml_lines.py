"""agentrl/utils/yaml_lines.py: the line of each list entry's key in a YAML file."""

from __future__ import annotations

from agentrl.utils.yaml_lines import entry_key_lines


def test_lines_of_each_entrys_key(tmp_path):
    path = tmp_path / "tools.yaml"
    path.write_text(
        "# my tools\n"
        "tools:\n"
        "  - class_name: a.B\n"          # line 3
        "    config: {}\n"
        "  - config: {type: native}\n"
        "    class_name: c.D\n"          # line 6
        "  - tool_schema: {}\n"          # no class_name
    )
    assert entry_key_lines(path, "tools", "class_name") == {0: 3, 1: 6}
    assert entry_key_lines(path, "interaction", "class_name") == {}


def test_no_lines_for_what_is_not_such_a_yaml(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("tools: [unclosed\n")
    assert entry_key_lines(bad, "tools", "class_name") == {}
    assert entry_key_lines(tmp_path / "missing.yaml", "tools", "class_name") == {}
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    assert entry_key_lines(tmp_path / "list.yaml", "tools", "class_name") == {}
