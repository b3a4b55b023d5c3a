"""actor_rollout_ref.model.custom_chat_template: loaded once, used wherever prompts render."""

from __future__ import annotations

import pytest

from agentrl.distributed import InProcessWorkerGroup, WorkerSpec
from agentrl.models.tokenizer import load_tokenizer, resolve_chat_template
from agentrl.protocol import DataProto
from agentrl.testing.workers import tiny_worker_config
from agentrl.workers import ActorRolloutRefWorker

TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\nCUSTOM {{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
MESSAGES = [{"role": "user", "content": "what is 2+3?"}]


def test_template_text_or_file_replaces_the_tokenizers(tiny_model_dir, tmp_path):
    plain = load_tokenizer(tiny_model_dir)
    assert "CUSTOM" not in plain.apply_chat_template(MESSAGES, tokenize=False)
    path = tmp_path / "template.jinja"
    path.write_text(TEMPLATE)
    for value in (TEMPLATE, str(path)):
        tokenizer = load_tokenizer(tiny_model_dir, chat_template=value)
        text = tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
        assert text == "<|im_start|>user\nCUSTOM what is 2+3?<|im_end|>\n<|im_start|>assistant\n"
    assert resolve_chat_template(None) is None
    with pytest.raises(FileNotFoundError, match="custom_chat_template: 'no/such.jinja'"):
        load_tokenizer(tiny_model_dir, chat_template="no/such.jinja")


def test_the_rollout_renders_prompts_with_the_custom_template(tiny_model_dir, tmp_path):
    path = tmp_path / "template.jinja"
    path.write_text(TEMPLATE)
    cfg = tiny_worker_config(tiny_model_dir, [
        "data.max_prompt_length=32", "data.max_response_length=4",
        f"actor_rollout_ref.model.custom_chat_template={path}",
    ])
    spec = WorkerSpec(ActorRolloutRefWorker, cfg.actor_rollout_ref, role="rollout")
    with InProcessWorkerGroup(spec) as group:
        group.init_model()
        out = group.generate_sequences(DataProto.from_dict(
            non_tensors={"raw_prompt": [MESSAGES]}, meta_info={"validate": True}))
        tokenizer = group.worker().tokenizer
    prompt = out.batch["prompts"][0][out.batch["attention_mask"][0, :32].bool()].tolist()
    assert tokenizer.decode(prompt) == (
        "<|im_start|>user\nCUSTOM what is 2+3?<|im_end|>\n<|im_start|>assistant\n"
    )


def test_a_tokenizer_that_maps_tokens_differently_is_named(tiny_model_dir, tmp_path):
    import shutil

    from transformers import AutoTokenizer

    from agentrl.models.tokenizer import check_same_tokenizer

    student = load_tokenizer(tiny_model_dir)
    check_same_tokenizer(student, tiny_model_dir, "actor_rollout_ref.teacher.model.path")
    other = tmp_path / "other"
    shutil.copytree(tiny_model_dir, other)
    tokenizer = AutoTokenizer.from_pretrained(other)
    tokenizer.add_tokens(["<not-in-the-student>"])
    tokenizer.save_pretrained(other)
    with pytest.raises(ValueError, match=r"teacher.model.path .* tokenizes differently .*"
                                         r"<not-in-the-student>"):
        check_same_tokenizer(student, other, "actor_rollout_ref.teacher.model.path")
