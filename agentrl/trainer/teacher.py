"""An on-policy distillation teacher behind HTTP: `actor_rollout_ref.teacher.server_urls`.

    teacher = RemoteTeacher(TeacherSettings.from_config(cfg.actor_rollout_ref.teacher))
    data = data.union(teacher.compute_teacher_log_prob(data))    # teacher_log_prob (B, R)
    teacher.close()

Any server with SGLang's `/generate` that returns input log-probs (`logprob_start_len`):
SGLang itself, or `agentrl serve --model TEACHER` (agentrl/rollout/backends/serve.py).
For each trajectory the prompt's and the response's attended tokens go to the server, and
the log-probs of the response tokens come back, at temperature 1 (SGLang's input log-probs
are not tempered; the student's `old_log_probs` use the rollout's temperature, 1 in the
recipes). Requests run `max_concurrency` at a time on a loop thread of this process; a
server that fails a request after its retries fails the step with the reason. With no
servers the teacher lives in the actor's workers instead (`compute_teacher_log_prob` of
agentrl/workers/actor.py), which returns the same tensor.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import torch

from agentrl.protocol import DataProto
from agentrl.trainer.trainer_settings import TeacherSettings, refuse_raw
from agentrl.utils.aio import LoopThread


class RemoteTeacher:
    """`compute_teacher_log_prob` from the teacher's servers (see the module docstring)."""

    def __init__(self, settings: TeacherSettings, student_tokenizer: Any = None,
                 backend: Any = None) -> None:
        refuse_raw(settings, TeacherSettings, "RemoteTeacher")
        if student_tokenizer is not None:  # the servers score the student's token ids
            from agentrl.models.tokenizer import check_same_tokenizer

            check_same_tokenizer(student_tokenizer, str(settings.model_path),
                                 "actor_rollout_ref.teacher.model.path",
                                 trust_remote_code=settings.trust_remote_code)
        self.loop = LoopThread("agentrl-teacher")
        # defaults: actor_rollout_ref.teacher in agentrl/config/ppo_trainer.yaml
        self.max_concurrency = settings.max_concurrency
        timeout = settings.request_timeout
        urls = list(settings.server_urls)
        self.backend = backend or self.loop.run(self._client(urls, timeout))

    @staticmethod
    async def _client(urls: list[str], timeout: float) -> Any:
        from agentrl.rollout.backends.factory import prompt_scorer

        return prompt_scorer(urls, timeout)  # built on the loop it serves

    def compute_teacher_log_prob(self, data: DataProto) -> DataProto:
        """`teacher_log_prob` (B, R): the teacher's log-probs of each response token (0 at
        padding)."""
        return self.loop.run(self._all(data))

    async def _all(self, data: DataProto) -> DataProto:
        batch = data.batch
        responses = batch["responses"]  # (B, R)
        response_length = responses.shape[1]
        attention = batch["attention_mask"].bool()  # (B, P + R)
        input_ids = batch["input_ids"]
        slots = asyncio.Semaphore(self.max_concurrency)
        tag = uuid.uuid4().hex[:8]

        async def one(i: int) -> list[float]:
            ids = input_ids[i][attention[i]].tolist()
            n_response = int(attention[i, -response_length:].sum())
            if n_response == 0:
                return []
            async with slots:
                log_probs = await self.backend.prompt_log_probs(ids, f"teacher-{tag}-{i}")
            return log_probs[-n_response:]  # the log-probs of the response's tokens

        rows = await asyncio.gather(*(one(i) for i in range(len(responses))))
        out = torch.zeros(responses.shape, dtype=torch.float32)
        for i, row in enumerate(rows):
            if row:
                out[i, : len(row)] = torch.tensor(row, dtype=torch.float32)
        return DataProto.from_dict(tensors={"teacher_log_prob": out})

    def close(self) -> None:
        closer = getattr(self.backend, "aclose", None)
        if closer is not None:
            self.loop.run(closer(), timeout=60)
        self.loop.close()


__all__ = ["RemoteTeacher"]
