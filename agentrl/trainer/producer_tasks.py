"""The off-policy producer's tasks on its loop (producer.py): starting prompt groups as the
throttle allows, running one group's requests, and cancelling them all.

    producer.main_task = asyncio.ensure_future(produce(producer))   # RolloutProducer.start
    await cancel(producer)                                           # RolloutProducer.stop

They are module functions, not methods, so that the producer class has no coroutine member
and the Ray actor hosting it (producer_host.py) stays a threaded one (Ray hosts a class with
any coroutine member as an asyncio actor, whose plain methods run one at a time). They run
on the producer's loop only, and change its state there: ``waiting``, ``running``,
``finished``, ``error``, and ``changed`` (set on every change the trainer's calls wait for).
Each takes the ``RolloutProducer`` (typed ``Any``: producer.py imports this module).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from agentrl.trainer.prompt_group import PromptGroup

logger = logging.getLogger(__name__)


async def produce(producer: Any) -> None:
    """Start queued prompts as the throttle allows, until stopped."""
    p = producer
    try:
        while True:
            while p.waiting and p.allowed(p.waiting[0].batch_index):
                group = p.waiting.popleft()
                group.started_version = p.version
                task = asyncio.ensure_future(run_group(p, group))
                p.running[group.uid] = (group, task)
            p.mark_idle(not p.running)
            p.changed.clear()
            await p.changed.wait()
    except asyncio.CancelledError:
        raise
    except BaseException as err:  # a bad row or a data error: the trainer sees it
        logger.exception("the rollout producer stopped")
        p.error = err
        p.changed.set()


async def run_group(producer: Any, group: PromptGroup) -> None:
    """Generate one prompt group's ``n`` requests; a failure is the trainer's in ``take``."""
    p, started = producer, time.perf_counter()
    try:
        requests = p.engine.build_requests(group.prompt, p.n)
        await asyncio.gather(*(p.engine.run_request(r, p.context) for r in requests))
    except asyncio.CancelledError:
        raise
    except Exception as err:  # a row the engine refuses: the trainer sees it in take
        logger.exception("prompt %s: the rollout failed", group.uid)
        p.error = err
        p.changed.set()
        return
    finally:
        p.running.pop(group.uid, None)
    group.requests, group.seconds = requests, time.perf_counter() - started
    p.finished.append(group)
    p.changed.set()


async def cancel(producer: Any) -> None:
    """Cancel the producer's task and its requests in flight, and wait for them."""
    tasks = [producer.main_task, *(task for _, task in producer.running.values())]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    producer.main_task = None
