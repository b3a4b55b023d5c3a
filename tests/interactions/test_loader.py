"""load_interactions: verl's YAML format, default names, file plugins and clear errors."""

from __future__ import annotations

import pytest

from agentrl.interactions import InteractionConfigError, load_interactions
from agentrl.interactions.loader import default_name
from envs.interactions.arithmetic import ArithmeticInteraction

ARITHMETIC = "envs.interactions.arithmetic.ArithmeticInteraction"


def test_load_from_yaml_with_and_without_names(tmp_path):
    plugin = tmp_path / "my_user.py"
    plugin.write_text(
        "from agentrl.interactions import BaseInteraction\n"
        "class PoliteInteraction(BaseInteraction):\n"
        "    async def generate_response(self, instance_id, messages, **kwargs):\n"
        "        return True, 'thanks', 1.0, {}\n"
    )
    config = tmp_path / "interactions.yaml"
    config.write_text(
        "interaction:\n"
        f"  - name: math\n    class_name: {ARITHMETIC}\n    config: {{max_attempts: 2}}\n"
        "  - class_name: my_user.py:PoliteInteraction\n"
    )
    interactions = load_interactions(config)
    assert list(interactions) == ["math", "polite"]
    assert isinstance(interactions["math"], ArithmeticInteraction)
    assert interactions["math"].max_attempts == 2
    assert interactions["math"].config == {"max_attempts": 2, "name": "math"}
    assert interactions["polite"].name == "polite"


def test_default_name():
    assert default_name("verl.interactions.gsm8k_interaction.Gsm8kInteraction") == "gsm8k"
    assert default_name("file.py:Judge") == "judge"


@pytest.mark.parametrize(
    "source, message",
    [
        ({"tools": []}, "must have a top-level 'interaction:' list"),
        ({"interaction": {"a": 1}}, "'interaction' must be a list of entries, got dict"),
        ({"interaction": ["x"]}, "interaction config entry 0: must be a mapping, got str"),
        ({"interaction": [{"class_name": ARITHMETIC, "kwargs": {}}]}, r"unknown keys \['kwargs'\]"),
        ({"interaction": [{"name": "a"}]}, "'class_name' must be a non-empty string"),
        (
            {
                "interaction": [
                    {"name": "a", "class_name": ARITHMETIC},
                    {"name": "a", "class_name": ARITHMETIC},
                ]
            },
            "entry 1 .* interaction name 'a' is used twice",
        ),
        (
            {"interaction": [{"class_name": "agentrl.tools.BaseTool"}]},
            "is not a subclass of agentrl.interactions.base",
        ),
        (
            {"interaction": [{"class_name": ARITHMETIC, "config": {"max_attempts": "x"}}]},
            "constructing it raised ValueError",
        ),
    ],
)
def test_errors_name_the_entry(source, message):
    with pytest.raises(InteractionConfigError, match=message):
        load_interactions(source)


def test_missing_file(tmp_path):
    with pytest.raises(InteractionConfigError, match="interaction config file not found"):
        load_interactions(tmp_path / "nope.yaml")


def test_import_interaction_classes_names_file_and_line(tmp_path):
    from agentrl.interactions.loader import import_interaction_classes

    config = tmp_path / "interactions.yaml"
    config.write_text("interaction:\n"
                      f"  - name: math\n    class_name: {ARITHMETIC}\n"
                      "  - name: typo\n    class_name: envs.interactions.arithmetc.X\n")
    with pytest.raises(InteractionConfigError) as err:
        import_interaction_classes(config)
    assert str(err.value) == (
        f"{config}, line 5: interaction config entry 1 (class_name "
        "'envs.interactions.arithmetc.X'): cannot import 'envs.interactions.arithmetc.X': "
        "no module named 'envs.interactions.arithmetc'")
    config.write_text(f"interaction:\n  - class_name: {ARITHMETIC}\n")
    assert import_interaction_classes(config) == [ArithmeticInteraction]
