"""The project's tool plugins: concrete tools a run names by class path.

    actor_rollout_ref.rollout.multi_turn.tool_config_path: recipes/quickstart/calculator_tool.yaml
    # tools: [{class_name: tools.calculator.CalculatorTool, ...}]

`tools` (this top-level package) holds tools (calculator, search, sandbox, gsm8k);
`agentrl.tools` is the framework they are written against (`BaseTool`, the schema, the
loader that imports a tool by its `class_name`). agentrl reaches these tools only through
that loader, by class path, as a user's config does; it never imports this package.
docs/architecture.md ("Packages beside agentrl") states the split.
"""
