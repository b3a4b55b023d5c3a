"""Rewards: reward managers (naive, dapo, batch) and rule-based score functions.

    from agentrl.reward import load_reward_manager, default_compute_score
    manager = load_reward_manager(cfg.reward_model, cfg.custom_reward_function, tokenizer)
    out = manager(batch, return_dict=True)  # {"reward_tensor", "reward_extra_info"}

See docs/rewards.md.
"""

from agentrl.reward.base import (
    REWARD_MANAGERS,
    SCORE_ERROR_KEY,
    SCORER_KIND,
    RewardManager,
    RewardScoreError,
    Sample,
    ScoreFailure,
    get_reward_manager_cls,
    register_reward_manager,
)
from agentrl.reward.judge import JudgeRewardManager
from agentrl.reward.loader import get_custom_reward_fn, load_reward_manager
from agentrl.reward.managers import BatchRewardManager, DAPORewardManager, NaiveRewardManager
from agentrl.reward.score import (
    SCORERS,
    default_compute_score,
    has_scorer,
    register_data_source,
    register_data_source_prefix,
)
from agentrl.utils.infra import InfraError

__all__ = [
    "REWARD_MANAGERS",
    "SCORERS",
    "SCORE_ERROR_KEY",
    "SCORER_KIND",
    "has_scorer",
    "register_data_source_prefix",
    "BatchRewardManager",
    "JudgeRewardManager",
    "DAPORewardManager",
    "InfraError",
    "NaiveRewardManager",
    "RewardManager",
    "RewardScoreError",
    "Sample",
    "ScoreFailure",
    "default_compute_score",
    "get_custom_reward_fn",
    "get_reward_manager_cls",
    "load_reward_manager",
    "register_data_source",
    "register_reward_manager",
]
