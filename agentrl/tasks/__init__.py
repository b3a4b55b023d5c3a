"""Task generators: seeded, offline datasets of problems with their tools, for tests, the CPU
quickstart and the CPU recipes.

- `arithmetic`: calculator word problems as verl rows; `arithmetic_sft`: correct calculator
  trajectories for the SFT warm-up (uses the calculator in the top-level `tools` package).
- `code_arithmetic`: problems a tiny model solves with a one-line Python program (ReTool's
  format, `agentrl.data.retool`).
- `search_facts`: a synthetic world of fictional people and organisations, its corpus and
  one- and two-hop questions (the CPU Search-R1 run).
- `quickstart`: the tasks `agentrl quickstart` teaches (calculator, search, retool): their
  data pools, recipe and tool; `search_task` and `retool_task` start the local retriever
  and code sandbox those two need.

This package sits above `data/` and may import the top-level `tools/` and `envs/` packages;
nothing below it imports it (docs/architecture.md).
"""
