"""The environments recipe: a reasoning-gym task trained through `agentrl env prepare`'s rows (see README.md)."""
