"""The command line: the `kagent` commands (app), their settings file and flags (config), the
live view of a run and its results (views), the replay of a trace (replay) and `kagent sweep`'s
commands (sweep). What they show of finished runs lives below, in kagent.agent.report, and the
sweep's scheduler in kagent.agent.sweep."""
