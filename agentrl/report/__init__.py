"""`agentrl report`: plots and a trajectory viewer of a run directory, as one HTML file.

    from agentrl.report import write_report
    write_report("outputs/smoke")          # -> outputs/smoke/report.html

    agentrl report RUN_DIR [--max-per-step 16]

It reads only the run directory (metrics.jsonl, config.yaml, the rollout dumps of
``trainer.rollout_data_dir``, trace/step_N.json of ``trainer.trace``, and a quickstart's
report.json / eval_*.jsonl / rl/), so it
works on any run, finished or not. See docs/report.md.
"""

from agentrl.report.run_dir import ReportError
from agentrl.report.writer import write_report

__all__ = ["ReportError", "write_report"]
