"""missing_package names the package, the extra and what needed it."""

from agentrl.utils.extras import missing_package


def test_the_error_names_the_extra_to_install():
    err = missing_package("textarena", "envs", "the TextArena game Wordle-v0")
    assert isinstance(err, ImportError)
    assert "pip install 'agentrl[envs]'" in str(err) and "Wordle-v0" in str(err)
