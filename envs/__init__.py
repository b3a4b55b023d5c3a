"""The project's environment plugins: the servers tools talk to and concrete interactions.

- `envs.retriever`: the retrieval server of the search tool (`agentrl retriever`).
- `envs.sandbox`: the code sandbox server of the sandbox tool (`agentrl sandbox`).
- `envs.interactions`: concrete interactions (simulated users), named by class path in an
  interaction config (`envs.interactions.arithmetic.ArithmeticInteraction`).

Beside them in agentrl: `agentrl.interactions` is the interaction framework (`BaseInteraction`,
the loader by class path); `agentrl.environments` adapts foreign environments
(reasoning_gym, textarena, openenv, verifiers) into data and interaction configs
(`agentrl env prepare`). agentrl reaches this package only by module path (the command table
of `agentrl.cli`, class paths in configs); it never imports it.
docs/architecture.md ("Packages beside agentrl") states the split.
"""
