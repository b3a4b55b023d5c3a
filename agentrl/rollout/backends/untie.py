"""A tied model served with an output layer of its own, for engines that cannot update a
tied one in place.

    if is_tied(model_dir):
        served = write_untied_copy(model_dir, out_dir)   # the directory servers launch with
    tensors = untied_tensors(bucket)                      # each synced shard: lm_head added
    untie_config_file(step_dir / "config.json")           # tie_word_embeddings: false

vLLM's CPU build prepacks every linear layer at load, the output layer too; a tied output
layer shares the embeddings' matrix, and reloading the embeddings refreshes them but not
that prepacked copy, so from the second sync the server samples from an output layer the
trainer no longer has (the probe of agentrl/rollout/backends/verify.py catches it). A plugin
says so (``BackendPlugin.updates_tied_output``); then the servers are launched on a copy of
the model whose ``lm_head.weight`` is a copy of the embeddings and whose config says
``tie_word_embeddings: false``, and every directory the trainer writes for them holds
``lm_head.weight`` too (the embeddings as they are after the update). The trainer's own
model stays tied: the gradient of both uses still reaches one matrix, and what the servers
hold equals what it computes with. The copy links every file of the model but its config
(rewritten) and adds one shard, ``lm_head.safetensors``, named in the (rewritten or new) index.

Names: the output layer is ``lm_head.weight`` and the input embeddings the one tensor whose
name ends in ``embed_tokens.weight`` (Llama, Qwen2/3, Mistral, Gemma and their kin);
``untie_problem`` names a tied model where that does not hold.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

OUTPUT_NAME = "lm_head.weight"
INPUT_SUFFIX = "embed_tokens.weight"
OUTPUT_SHARD = "lm_head.safetensors"  # the shard a served copy adds
INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"


def is_tied(model_dir: str | os.PathLike) -> bool:
    """Whether the Hugging Face model in ``model_dir`` ties its output layer to its input
    embeddings (``tie_word_embeddings``, true unless its config says otherwise, as in
    ``PretrainedConfig``); False for a path that holds no ``config.json`` (a hub name)."""
    config_file = Path(model_dir) / "config.json"
    if not config_file.is_file():
        return False
    config = json.loads(config_file.read_text())
    return bool(config.get("tie_word_embeddings", True))


def weight_files(model_dir: str | os.PathLike) -> dict[str, str]:
    """{tensor name: the safetensors file in ``model_dir`` that holds it}."""
    from safetensors import safe_open

    model_dir = Path(model_dir)
    index = model_dir / INDEX_FILE
    if index.is_file():
        return dict(json.loads(index.read_text())["weight_map"])
    out: dict[str, str] = {}
    for shard in sorted(model_dir.glob("*.safetensors")):
        with safe_open(str(shard), framework="pt") as handle:
            out.update(dict.fromkeys(handle.keys(), shard.name))
    return out


def input_embedding_name(names: Any) -> str | None:
    """The one name of ``names`` that ends in ``embed_tokens.weight``, or None."""
    found = [n for n in names if n.endswith(INPUT_SUFFIX)]
    return found[0] if len(found) == 1 else None


def untie_problem(model_dir: str | os.PathLike) -> str | None:
    """Why the tied model in ``model_dir`` cannot be served untied (a sentence), or None."""
    names = weight_files(model_dir)
    if not names:
        return f"{model_dir} holds no safetensors weights"
    if input_embedding_name(names) is None:
        return (f"{model_dir} has no single tensor named *{INPUT_SUFFIX} to copy into "
                f"{OUTPUT_NAME}")  # fmt: skip
    return None


def tied_output_problems(plugin: Any, rollout: Mapping[str, Any],
                         model_path: str | None) -> list[str]:  # fmt: skip
    """The config check: where ``plugin``'s servers cannot update a tied output layer in
    place and ``model_path`` is tied, what keeps agentrl from serving it untied (servers
    the user started at ``server_urls``, weights it cannot untie), each naming the fix."""
    if not model_path or plugin.updates_tied_output(rollout) or not is_tied(model_path):
        return []
    cause = (f"actor_rollout_ref.model.path={model_path} ties its output layer to its input "
             f"embeddings, and {plugin.name or rollout['name']} servers here do not update a "
             "tied output layer when weights are reloaded (vLLM's CPU build keeps the copy "
             "it prepacked, so the second sync would serve stale weights)")
    if rollout.get("server_urls"):
        return [f"{cause}; servers agentrl launches get an untied copy, but the ones at "
                "actor_rollout_ref.rollout.server_urls serve what they were started with: "
                "leave server_urls empty, or start them on a copy with lm_head.weight and "
                "tie_word_embeddings: false (agentrl.rollout.backends.untie.write_untied_copy "
                "writes one)"]
    problem = untie_problem(model_path)
    if problem is not None:
        return [f"{cause}; agentrl serves such a model untied, but {problem}: give a model "
                "with an output layer of its own (tie_word_embeddings: false)"]
    return []


def untie_config_file(config_file: str | os.PathLike) -> None:
    """Rewrite a ``config.json`` to say ``tie_word_embeddings: false``."""
    config_file = Path(config_file)
    config = json.loads(config_file.read_text())
    config["tie_word_embeddings"] = False
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def untied_tensors(tensors: Mapping[str, Any]) -> dict[str, Any]:
    """``tensors`` (one shard's) with ``lm_head.weight``, a copy of the input embeddings,
    added when they hold those and no output layer (its own storage: safetensors writes no
    shared tensors)."""
    out = dict(tensors)
    source = input_embedding_name(out)
    if source is not None and OUTPUT_NAME not in out:
        out[OUTPUT_NAME] = out[source].clone()
    return out


def write_untied_copy(model_dir: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """A copy of the tied model in ``model_dir`` at ``out_dir`` with an output layer of its
    own (module docstring): every file linked but the config (untied) and the index (with
    ``lm_head.weight``; made when the model had none, its lone ``model.safetensors`` linked
    as ``model-base.safetensors``), plus ``lm_head.safetensors``. Raises ``ValueError`` naming
    ``untie_problem``."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    model_dir, out_dir = Path(model_dir).resolve(), Path(out_dir)
    problem = untie_problem(model_dir)
    if problem is not None:
        raise ValueError(f"cannot serve an untied copy of the tied model: {problem}")
    names = weight_files(model_dir)
    source = input_embedding_name(names)
    out_dir.mkdir(parents=True, exist_ok=True)
    # a lone model.safetensors is read by Hugging Face loaders in place of any index
    renamed = {SINGLE_FILE: "model-base.safetensors"}
    for entry in model_dir.iterdir():
        if entry.name not in ("config.json", INDEX_FILE, OUTPUT_SHARD):
            (out_dir / renamed.get(entry.name, entry.name)).symlink_to(entry)
    names = {name: renamed.get(file, file) for name, file in names.items()}
    (out_dir / "config.json").write_text((model_dir / "config.json").read_text())
    untie_config_file(out_dir / "config.json")
    with safe_open(str(out_dir / names[source]), framework="pt") as handle:
        embeddings = handle.get_tensor(source)
    save_file({OUTPUT_NAME: embeddings.contiguous()}, str(out_dir / OUTPUT_SHARD),
              metadata={"format": "pt"})  # fmt: skip
    index = model_dir / INDEX_FILE  # an index, so every loader reads the added shard too
    content = json.loads(index.read_text()) if index.is_file() else {"metadata": {}}
    content["weight_map"] = {**names, OUTPUT_NAME: OUTPUT_SHARD}
    (out_dir / INDEX_FILE).write_text(json.dumps(content, indent=2))
    return out_dir


__all__ = [
    "OUTPUT_NAME",
    "input_embedding_name",
    "is_tied",
    "tied_output_problems",
    "untie_config_file",
    "untie_problem",
    "untied_tensors",
    "weight_files",
    "write_untied_copy",
]
