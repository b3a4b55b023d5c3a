"""Foreign environments as agentrl data: `agentrl env prepare SPEC --out DIR`.

Each adapter turns an environment of another standard into what a run needs: verl-format
`train.parquet` / `test.parquet` (disjoint), and the interaction config when the
environment talks back over several turns. The environment's own scoring is used, never
re-implemented (`agentrl.reward.score.environments` dispatches the rows' `data_source`).

    from agentrl.environments import prepare_environment
    prepared = prepare_environment("reasoning_gym:basic_arithmetic", "data/rg", size=2000)
    prepared.overrides        # the `agentrl train` overrides that use the files

SPEC forms (`SPEC_FORMS`): `reasoning_gym:TASK`, `textarena:ENV_ID`, `openenv:URL|MODULE`,
`verifiers:ENV`. docs/environments.md says what maps to what.
"""

from agentrl.environments.prepare import Prepared, prepare_environment
from agentrl.environments.spec import SPEC_FORMS, EnvSpec, parse_spec

__all__ = ["SPEC_FORMS", "EnvSpec", "Prepared", "parse_spec", "prepare_environment"]
