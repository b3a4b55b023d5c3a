"""`SPEC` of `agentrl env prepare`: `KIND:NAME`, checked before anything is imported."""

from __future__ import annotations

from dataclasses import dataclass

# kind -> (the form, what it prepares)
SPEC_FORMS: dict[str, tuple[str, str]] = {
    "reasoning_gym": ("reasoning_gym:TASK",
                      "any reasoning-gym dataset, scored by the task's own score_answer"),
    "textarena": ("textarena:ENV_ID",
                  "a single-player TextArena game played over turns through an interaction"),
    "openenv": ("openenv:URL|MODULE",
                "an OpenEnv environment server (a running one, or an installed server app "
                "started here), each trajectory its own episode through an interaction"),
    "verifiers": ("verifiers:ENV",
                  "an installed verifiers environment (single-turn, tool or multi-turn): its "
                  "dataset, its tools, its responses through an interaction, its rubric"),
}


@dataclass(frozen=True)
class EnvSpec:
    kind: str  # a key of SPEC_FORMS
    name: str  # the task, or the environment's id


def supported_forms() -> str:
    return "; ".join(f"{form} ({what})" for form, what in SPEC_FORMS.values())


def parse_spec(spec: str) -> EnvSpec:
    """`KIND:NAME` of a supported kind (ValueError listing the supported forms otherwise)."""
    kind, sep, name = str(spec).partition(":")
    if not sep or not name.strip() or kind not in SPEC_FORMS:
        raise ValueError(f"unknown environment spec {spec!r}; supported forms: "
                         f"{supported_forms()}")
    return EnvSpec(kind, name.strip())


__all__ = ["SPEC_FORMS", "EnvSpec", "parse_spec", "supported_forms"]
