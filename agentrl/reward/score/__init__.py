"""Rule-based score functions, chosen by a row's ``data_source`` (verl's names).

``default_compute_score(data_source, solution_str, ground_truth, extra_info=None)`` is the
``compute_score`` a reward manager uses when no custom function is configured. Each data
source maps to a scorer ``fn(solution_str, ground_truth, extra_info) -> float | dict``:

==========================================================  =================================
data_source                                                 scorer
==========================================================  =================================
``openai/gsm8k``                                            ``gsm8k`` strict ``#### answer``
``lighteval/MATH``, ``DigitalLearningGmbH/MATH-lighteval``,  ``math`` last ``\\boxed{}``
``HuggingFaceH4/MATH-500``
``searchR1_<set>``, ``<set>``, ``search_r1/<set>`` for nq,  ``search_r1`` exact match of the
triviaqa, popqa, hotpotqa, 2wikimultihopqa, musique,        last ``<answer>``
bamboogle
``agentrl/arithmetic``                                      ``arithmetic`` last ``<answer>``
``agentrl/search_facts``                                    ``search_r1`` exact match
``retool/math`` (recipes/retool)                            ``math`` last ``\\boxed{}``
``codecontests``, ``apps``, ``codeforces``, ``taco``        ``code_exec`` unit tests run in
                                                            the sandbox (default settings)
``reasoning_gym/<task>`` (any reasoning-gym task)           the task's own ``score_answer``
                                                            on the last ``<answer>``
``textarena/<env_id>``                                      the game's reward, reported by
                                                            the TextArena interaction
``openenv/<name>``                                          the sum of the step rewards,
                                                            reported by the OpenEnv interaction
``verifiers/<env>``                                         the environment's rubric reward,
                                                            reported by the verifiers interaction
==========================================================  =================================

Add a data source with ``register_data_source("name")``, or a family of them with
``register_data_source_prefix("family/")`` (an exact name wins over a prefix); an unknown one
is an error that names it and lists the known ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentrl.reward.score import arithmetic, code_exec, environments, gsm8k, math, search_r1
from agentrl.utils.registry import Registry, UnknownNameError

Scorer = Callable[[str, Any, dict | None], float | dict]
SCORERS: Registry[Scorer] = Registry("data_source")

SEARCH_R1_SETS = ("nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle")
MATH_SOURCES = ("lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500",
                "retool/math")


PREFIX_SCORERS: dict[str, Scorer] = {}  # "family/" -> scorer of every "family/<name>"


def register_data_source_prefix(prefix: str) -> Callable[[Scorer], Scorer]:
    """Decorator registering ``fn`` for every data source that starts with ``prefix``."""

    def decorator(fn: Scorer) -> Scorer:
        PREFIX_SCORERS[prefix] = fn
        return fn

    return decorator


def scorer_for(data_source: str) -> Scorer:
    """The scorer of ``data_source``: its own, else its family's (UnknownNameError if none)."""
    if data_source in SCORERS:
        return SCORERS.get(data_source)
    for prefix, fn in PREFIX_SCORERS.items():
        if data_source.startswith(prefix):
            return fn
    known = [*SCORERS.names(), *(f"{p}<name>" for p in PREFIX_SCORERS)]
    raise UnknownNameError(
        f"no score function for data_source {data_source!r}; known: {', '.join(known)}. "
        "Register one with agentrl.reward.score.register_data_source or set "
        "custom_reward_function.path"
    )


def has_scorer(data_source: str) -> bool:
    """Whether ``default_compute_score`` can score ``data_source``."""
    return data_source in SCORERS or any(data_source.startswith(p) for p in PREFIX_SCORERS)


def register_data_source(*names: str) -> Callable[[Scorer], Scorer]:
    """Decorator registering ``fn(solution_str, ground_truth, extra_info)`` for data sources."""

    def decorator(fn: Scorer) -> Scorer:
        for name in names:
            SCORERS.register(name)(fn)
        return fn

    return decorator


@register_data_source("openai/gsm8k")
def _gsm8k(solution_str: str, ground_truth: Any, extra_info: dict | None) -> float:
    return gsm8k.compute_score(solution_str, ground_truth)


@register_data_source(*MATH_SOURCES)
def _math(solution_str: str, ground_truth: Any, extra_info: dict | None) -> float:
    return math.compute_score(solution_str, ground_truth)


@register_data_source(
    *(f"searchR1_{name}" for name in SEARCH_R1_SETS),
    *SEARCH_R1_SETS,
    *(f"search_r1/{name}" for name in SEARCH_R1_SETS),
)
def _search_r1(solution_str: str, ground_truth: Any, extra_info: dict | None) -> float:
    return search_r1.compute_score_em(solution_str, ground_truth)


@register_data_source("agentrl/search_facts")  # the CPU Search-R1 run's synthetic questions
def _search_facts(solution_str: str, ground_truth: Any, extra_info: dict | None) -> float:
    return search_r1.compute_score_em(solution_str, ground_truth)


@register_data_source("agentrl/arithmetic")
def _arithmetic(solution_str: str, ground_truth: Any, extra_info: dict | None) -> float:
    return arithmetic.compute_score(solution_str, ground_truth)


@register_data_source(*code_exec.DATA_SOURCES)  # verl's code sets; the sandbox at its default URL
def _code_exec(solution_str: str, ground_truth: Any, extra_info: dict | None) -> dict:
    return code_exec.compute_score("code_exec", solution_str, ground_truth, extra_info)


def default_compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict | None = None,
    sandbox_fusion_url: str | None = None,
    concurrent_semaphore: Any = None,
    memory_limit_mb: int | None = None,
    *,
    max_concurrent: int | None = None,
) -> float | dict:
    """Score one decoded response with the scorer registered for ``data_source``.

    verl's signature: ``sandbox_fusion_url`` and ``memory_limit_mb`` send the code data
    sources to that sandbox (``reward_model.sandbox_fusion.*`` binds them when no custom
    function is set); sandbox calls in flight are bounded by ``max_concurrent`` per
    process (``reward_model.sandbox_fusion.max_concurrent``). verl's ``concurrent_semaphore``
    (a multiprocessing semaphore) is not used: pass ``max_concurrent`` instead.
    """
    if concurrent_semaphore is not None:
        raise TypeError(
            "default_compute_score: concurrent_semaphore is verl's cross-process semaphore; "
            "agentrl bounds sandbox calls per process: pass max_concurrent=N instead"
        )
    if sandbox_fusion_url and data_source in code_exec.DATA_SOURCES:
        options: dict[str, Any] = {"sandbox_fusion_url": sandbox_fusion_url}
        if memory_limit_mb is not None:
            options["memory_limit_mb"] = int(memory_limit_mb)
        if max_concurrent is not None:
            options["max_concurrent"] = int(max_concurrent)
        return code_exec.compute_score(data_source, solution_str, ground_truth, extra_info,
                                       **options)
    return scorer_for(data_source)(solution_str, ground_truth, extra_info)


__all__ = ["SCORERS", "default_compute_score", "register_data_source"]


register_data_source_prefix("reasoning_gym/")(environments.reasoning_gym_score)
register_data_source_prefix("textarena/")(environments.textarena_score)
register_data_source_prefix("openenv/")(environments.openenv_score)
register_data_source_prefix("verifiers/")(environments.verifiers_score)
