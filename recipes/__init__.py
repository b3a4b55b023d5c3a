"""Runnable recipes (configs, tool files, run scripts), shipped as package data so that
`agentrl` commands find them in an installed wheel too."""
