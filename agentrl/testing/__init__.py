"""Helpers for testing code that runs on agentrl, without a real model or server.

- `agentrl.testing.rollout`: a scripted backend that answers from a script, recording
  tools, prompt batches and a full rollout config; a tool can be tested through the real
  engine in milliseconds.
- `agentrl.testing.workers`: a tiny model's worker config, hand-made batches, and the
  reference computations the worker tests compare against.

This package sits above the components it drives (it builds validated configs); nothing
in the library imports it.
"""
