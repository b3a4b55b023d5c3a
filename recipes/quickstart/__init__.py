"""The CPU quickstart's recipe: config.yaml and calculator_tool.yaml (read by
`agentrl quickstart`, agentrl/quickstart/)."""
