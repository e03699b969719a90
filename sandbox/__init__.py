"""Workspaces, isolation and the evaluation harness (agent side here; GPU side in ``harness``)."""
