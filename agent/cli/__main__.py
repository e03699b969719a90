"""`python -m kagent.agent.cli`: the same as the `kagent` command."""

from kagent.agent.cli.app import main

main()
