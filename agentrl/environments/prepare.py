"""`prepare_environment(SPEC, DIR)`: the files a run needs, and the overrides that use them.

    DIR/train.parquet, DIR/test.parquet     verl rows that share no prompt (with
                                            allow_shared_prompts: no game)
    DIR/interaction.yaml                    when the environment talks back over turns

Nothing is written unless every file can be: the sizes and the answer tag (a tag name:
`<TAG></TAG>` in the prompts, what the scorer reads) are checked, then DIR (a file, a path
under a file, or a place this process cannot write is a ValueError naming it), the rows are
made, then written.
"""

from __future__ import annotations

import importlib
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agentrl.environments.spec import parse_spec
from agentrl.utils.answer_tags import ANSWER_TAG
from agentrl.utils.jsonl import write_parquet
from agentrl.utils.out_dir import check_writable_dir

logger = logging.getLogger(__name__)

# an XML name in ASCII: the tag the prompts ask for (<TAG></TAG>) and the scorer reads
TAG_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")


@dataclass(frozen=True)
class Prepared:
    train: Path
    test: Path
    configs: dict[str, Path] = field(default_factory=dict)  # "interaction" / "tools" -> file
    overrides: list[str] = field(default_factory=list)  # for agentrl train


def _adapter(kind: str) -> Any:
    """The module of a SPEC_FORMS kind: its `prepare(name, size, test_size, seed, answer_tag,
    *, allow_shared_prompts)` returns (train rows, test rows, {config name: content}), no
    prompt in both (with allow_shared_prompts, no game: its prompt and hidden setup)."""
    return importlib.import_module(f"agentrl.environments.{kind}")


def check_answer_tag(tag: str) -> None:
    """ValueError unless `tag` is a tag name the prompt can ask for and the scorer can read
    (an empty one would ask for the answer inside `<></>`)."""
    if not isinstance(tag, str) or not TAG_NAME.fullmatch(tag):
        raise ValueError(f"--answer-tag {tag!r} is not a tag name: a letter or _, then "
                         "letters, digits, _, - or . (the answer goes inside <TAG></TAG>)")


def prepare_environment(
    spec: str,
    out_dir: str | Path,
    *,
    size: int = 1000,
    test_size: int = 200,
    seed: int = 0,
    answer_tag: str = ANSWER_TAG,
    allow_shared_prompts: bool = False,
) -> Prepared:
    """Write the environment `spec` names into `out_dir` (see the module docstring).
    `allow_shared_prompts`: prepare a game whose prompt is the same for every seed (its
    setup hidden), whose train and test rows then share the prompt but no game; without it
    such a game is refused."""
    parsed = parse_spec(spec)
    if size < 1 or test_size < 1:
        raise ValueError(f"--size and --test-size must be >= 1, got {size} and {test_size}")
    check_answer_tag(answer_tag)
    out = Path(out_dir).expanduser()
    check_writable_dir(out, "--out")
    train, test, configs = _adapter(parsed.kind).prepare(
        parsed.name, size, test_size, seed, answer_tag, allow_shared_prompts=allow_shared_prompts
    )
    written: dict[str, Path] = {}
    train_path = write_parquet(train, out / "train.parquet")
    test_path = write_parquet(test, out / "test.parquet")
    for name, content in configs.items():
        path = out / f"{name}.yaml"
        path.write_text(yaml.safe_dump(content, sort_keys=False))
        written[name] = path
    overrides = [f"data.train_files={train_path}", f"data.val_files={test_path}"]
    if "interaction" in written or "tools" in written:
        overrides.append("actor_rollout_ref.rollout.multi_turn.enable=true")
    if "interaction" in written:
        overrides.append("actor_rollout_ref.rollout.multi_turn.interaction_config_path="
                         f"{written['interaction']}")
    if "tools" in written:
        overrides.append(
            f"actor_rollout_ref.rollout.multi_turn.tool_config_path={written['tools']}")
    logger.info("%s: %d train and %d test rows in %s", spec, len(train), len(test), out)
    return Prepared(train_path, test_path, written, overrides)


__all__ = ["Prepared", "check_answer_tag", "prepare_environment"]
