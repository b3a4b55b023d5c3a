"""Configuration: one YAML tree with verl's key names, loaded, merged and validated.

`load_config(config_path=None, overrides=()) -> DictConfig` is the public entry point;
every problem raises `ConfigError` (a `ValueError`) naming the keys. The documented
defaults are `agentrl/config/ppo_trainer.yaml`.
"""

from agentrl.config.loader import (
    DEFAULT_CONFIG_PATH,
    ConfigError,
    chat_template_kwargs,
    config_to_yaml,
    load_config,
)

__all__ = ["DEFAULT_CONFIG_PATH", "ConfigError", "chat_template_kwargs", "config_to_yaml",
           "load_config"]
