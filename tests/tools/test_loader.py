"""Tests for agentrl/tools/loader.py: verl tool YAML -> tools / schemas, errors naming entries."""

import textwrap

import pytest

from agentrl.tools import BaseTool, ToolConfigError, load_tool_schemas, load_tools

ECHO_PLUGIN = textwrap.dedent(
    """
    from agentrl.tools import BaseTool, ToolResponse

    class EchoTool(BaseTool):
        async def execute(self, instance_id, parameters, **kwargs):
            return ToolResponse(text=parameters["text"]), 0.0, {}

    class NotATool:
        pass
    """
)

ECHO_ENTRY = """
  - class_name: {class_name}
    config: {{type: native, greeting: hi}}
    tool_schema:
      type: function
      function:
        name: {name}
        description: Echo.
        parameters:
          type: object
          properties: {{text: {{type: string}}}}
          required: [text]
"""


def write_config(tmp_path, entries):
    (tmp_path / "echo_plugin.py").write_text(ECHO_PLUGIN)
    body = "".join(ECHO_ENTRY.format(class_name=c, name=n) for c, n in entries)
    path = tmp_path / "tools.yaml"
    path.write_text("tools:" + body)
    return path


def test_load_tools_from_yaml_with_file_plugin_next_to_it(tmp_path):
    path = write_config(
        tmp_path, [("echo_plugin.py:EchoTool", "echo"), ("echo_plugin.py:EchoTool", "echo2")]
    )
    tools = load_tools(path)
    assert list(tools) == ["echo", "echo2"]
    assert isinstance(tools["echo"], BaseTool)
    assert tools["echo"].config == {"type": "native", "greeting": "hi"}
    assert tools["echo2"].get_openai_tool_schema().function.name == "echo2"


def test_load_tool_schemas_does_not_import(tmp_path):
    path = write_config(tmp_path, [("not_importable_pkg.NoTool", "echo")])
    assert load_tool_schemas(path) == [
        {
            "type": "function",
            "function": {
                "name": "echo",
                "description": "Echo.",
                "parameters": {
                    "type": "object",
                    "properties": {"text": {"type": "string"}},
                    "required": ["text"],
                },
                "strict": False,
            },
        }
    ]


def test_list_and_mapping_sources_and_empty():
    entry = {
        "class_name": "tools.calculator.CalculatorTool",
        "tool_schema": {"type": "function", "function": {"name": "calc"}},
    }
    assert [t.name for t in load_tools([entry]).values()] == ["calc"]
    assert list(load_tools({"tools": [entry]})) == ["calc"]
    assert load_tools([]) == {}
    assert load_tools({"tools": None}) == {}


def test_omegaconf_source():
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(
        {
            "tools": [
                {
                    "class_name": "tools.calculator.CalculatorTool",
                    "tool_schema": {"function": {"name": "c"}},
                }
            ]
        }
    )
    assert list(load_tools(cfg)) == ["c"]


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        (
            [("no_such_module_h4a.Tool", "echo")],
            r"entry 0 \(class_name 'no_such_module_h4a.Tool'\): cannot import",
        ),
        (
            [("echo_plugin.py:NotATool", "echo")],
            r"entry 0 \(class_name 'echo_plugin.py:NotATool'\): .*not a subclass of agentrl.tools.base.BaseTool",
        ),
        ([("echo_plugin.py:Missing", "echo")], r"entry 0 .*has no attribute 'Missing'"),
        (
            [("echo_plugin.py:EchoTool", "echo"), ("echo_plugin.py:EchoTool", "echo")],
            r"entry 1 \(class_name 'echo_plugin.py:EchoTool'\): tool name 'echo' is already used by entry 0",
        ),
        ([("echo_plugin.py:EchoTool", "bad name!")], r"entry 0 .*function name 'bad name!'"),
    ],
)
def test_errors_name_the_entry(tmp_path, entries, message):
    path = write_config(tmp_path, entries)
    with pytest.raises(ToolConfigError, match=message):
        load_tools(path)


def test_invalid_json_schema_is_named(tmp_path):
    entry = {
        "class_name": "tools.calculator.CalculatorTool",
        "tool_schema": {
            "type": "function",
            "function": {
                "name": "calc",
                "parameters": {"type": "object", "properties": {"x": {"type": "strnig"}}},
            },
        },
    }
    with pytest.raises(
        ToolConfigError, match=r"entry 0 .*not a valid JSON schema at properties/x/type"
    ):
        load_tool_schemas([entry])
    with pytest.raises(ToolConfigError, match="not a valid JSON schema"):
        load_tools([entry])


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ([{"class_name": "x.Y"}], r"entry 0 \(class_name 'x.Y'\): 'tool_schema' is missing"),
        ([{"tool_schema": {}}], r"entry 0 \(class_name None\): 'class_name' must be"),
        (
            [{"class_name": "x.Y", "tool_schema": {"function": {}}}],
            r"entry 0 .*invalid tool_schema",
        ),
        ([{"class_name": "x.Y", "tool_schema": {}, "extra": 1}], r"unknown keys \['extra'\]"),
        (
            [{"class_name": "x.Y", "config": {"type": "mcp"}, "tool_schema": {}}],
            "config.type 'mcp' is not supported",
        ),
        (["not a mapping"], "entry 0 .*must be a mapping"),
        ({"not_tools": []}, "top-level 'tools:' list"),
        ({"tools": "x"}, "must be a list"),
        ("/no/such/file.yaml", "tool config file not found"),
    ],
)
def test_malformed_configs(source, message):
    with pytest.raises(ToolConfigError, match=message):
        load_tool_schemas(source)


def test_constructor_error_is_named(tmp_path):
    entry = {
        "class_name": "tools.search.SearchTool",
        "config": {},
        "tool_schema": {"function": {"name": "search"}},
    }
    with pytest.raises(
        ToolConfigError,
        match=r"entry 0 .*constructing the tool raised ValueError: .*retrieval_service_url",
    ):
        load_tools([entry])


def test_import_tool_classes_imports_without_building_and_names_file_and_line(tmp_path):
    from agentrl.tools.loader import import_tool_classes

    path = write_config(tmp_path, [("echo_plugin.py:EchoTool", "echo")])
    classes = import_tool_classes(path)
    assert [c.__name__ for c in classes] == ["EchoTool"]
    # "tools:" is line 1, each entry 12 lines: entry 1's class_name is on line 14
    path = write_config(tmp_path, [("echo_plugin.py:EchoTool", "echo"),
                                   ("tools.calculatr.CalculatorTool", "calc")])
    with pytest.raises(ToolConfigError) as err:
        import_tool_classes(path)
    assert str(err.value) == (
        f"{path}, line 14: tool config entry 1 (class_name 'tools.calculatr.CalculatorTool'): "
        "cannot import 'tools.calculatr.CalculatorTool': no module named 'tools.calculatr'")
    path = write_config(tmp_path, [("echo_plugin.py:NotATool", "echo")])
    with pytest.raises(ToolConfigError, match=r"tools.yaml, line 2: .*is not a subclass of"):
        import_tool_classes(path)
