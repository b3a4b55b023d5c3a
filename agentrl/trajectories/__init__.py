"""The open trajectory format: agent sessions as trees of token-level segments, one JSON
object per line, with a JSON Schema shipped in the package (docs/trajectories.md).

- ``format``: the schema, checking, reading and writing files, the segments SFT trains on;
- ``export``: a run's trajectory dumps -> a file (`agentrl trajectories export`);
- ``cli``: the `agentrl trajectories` command.
"""

from agentrl.trajectories.format import (
    FORMAT_VERSION,
    TrajectoryFormatError,
    check_trajectory,
    read_trajectories,
    trained_segments,
    trajectory_schema,
    write_trajectories,
)

__all__ = ["FORMAT_VERSION", "TrajectoryFormatError", "check_trajectory", "read_trajectories",
           "trained_segments", "trajectory_schema", "write_trajectories"]
