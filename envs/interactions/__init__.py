"""Concrete interactions (simulated users) for multi-turn rollouts; see agentrl.interactions."""
