"""The agent side: the command line, errors users see, and (later) the loop that drives a model."""
