"""The multi-turn rollout: one asyncio state machine per sample against a backend."""
