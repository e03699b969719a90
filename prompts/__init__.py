"""Prompt texts for the agent, kept as files beside this module."""
