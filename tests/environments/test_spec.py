"""SPEC parsing: supported kinds pass, anything else lists the supported forms."""

import pytest

from agentrl.environments.spec import SPEC_FORMS, EnvSpec, parse_spec


def test_supported_specs_parse():
    assert parse_spec("reasoning_gym:basic_arithmetic") == EnvSpec("reasoning_gym",
                                                                   "basic_arithmetic")
    assert parse_spec("textarena:Wordle-v0") == EnvSpec("textarena", "Wordle-v0")
    assert parse_spec("openenv:http://localhost:8000") == EnvSpec("openenv",
                                                                  "http://localhost:8000")
    assert parse_spec("openenv:echo_env.server.app:app") == EnvSpec("openenv",
                                                                    "echo_env.server.app:app")
    assert parse_spec("verifiers:vf-wordle") == EnvSpec("verifiers", "vf-wordle")


@pytest.mark.parametrize("spec", ["gym:CartPole-v1", "reasoning_gym", "textarena: ", ""])
def test_an_unknown_spec_lists_the_supported_forms(spec):
    with pytest.raises(ValueError, match="supported forms") as err:
        parse_spec(spec)
    assert all(form in str(err.value) for form, _ in SPEC_FORMS.values())
