"""The command line and what it shows: the `kagent` commands (app), the views of results and
runs, the replay of a trace and the list of runs."""
