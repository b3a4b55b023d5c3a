"""Optional packages: the one error that names the extra to install.

    try:
        import textarena
    except ImportError as err:
        raise missing_package("textarena", "envs", "the TextArena game Wordle-v0") from err
"""

from __future__ import annotations


def missing_package(package: str, extra: str, what: str) -> ImportError:
    """The error for an optional ``package`` that ``what`` needs, naming the extra."""
    return ImportError(f"{what} needs the {package} package: pip install 'agentrl[{extra}]' "
                       f"(or pip install {package})")


__all__ = ["missing_package"]
