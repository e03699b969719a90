"""What the commands of the command line share: the consoles they print to, the scale
option's choices, a warning's form, the exit codes a run's help ends with, and the quiet
terminal under a live view."""

from __future__ import annotations

import inspect
import sys
import termios
from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum

from rich.console import Console

from kagent.agent.outcome import exit_codes_text

console = Console()
err_console = Console(stderr=True)


class Scale(str, Enum):
    smoke = "smoke"
    full = "full"


def documents_exit_codes(command):
    """Ends a command's help with the exit codes of a run's end states (kagent.agent.outcome)."""
    command.__doc__ = f"{inspect.cleandoc(command.__doc__)}\n\nExit codes:\n{exit_codes_text()}"
    return command


def warn(text: str) -> None:
    err_console.print(f"[yellow]warning:[/] {text}", highlight=False)


@contextmanager
def keys_not_echoed() -> Iterator[None]:
    """While a live view is drawn, keys typed at the terminal are not echoed: the echo of a
    Ctrl-C (^C) moves the cursor under the view, which is then drawn again one line lower,
    its top border twice."""
    try:
        fd = sys.stdin.fileno()
        saved = termios.tcgetattr(fd)
    except (AttributeError, ValueError, OSError, termios.error):  # no terminal on stdin
        yield
        return
    quiet = list(saved)
    quiet[3] &= ~termios.ECHO  # the local modes
    termios.tcsetattr(fd, termios.TCSANOW, quiet)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSANOW, saved)
