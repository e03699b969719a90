"""A command run in a pseudo-terminal, as a user at a terminal runs it: it sees a tty of a
given size (so rich draws its live views), and Ctrl-C typed there reaches it as SIGINT."""

from __future__ import annotations

import fcntl
import os
import re
import signal
import struct
import subprocess
import termios
import threading
import time
from collections.abc import Callable
from typing import Optional

CTRL_C = b"\x03"
# Colours, cursor moves and the like: what a terminal acts on rather than shows.
ESCAPES = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|[@-Z\\-_])")


def hearing_ctrl_c() -> None:
    """For a child between fork and exec: SIGINT as a terminal's program has it. Tests started
    in the background by a shell without job control (a CI runner's, `cmd &` in a script)
    inherit SIGINT ignored, and exec keeps it so: a Ctrl-C test would then wait out its whole
    tool and read exit code 0."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Terminal:
    """``with Terminal(argv, ...) as term:``; the output so far is ``term.text()``."""

    def __init__(
        self,
        argv: list[str],
        *,
        cwd: Optional[str] = None,
        env: Optional[dict[str, str]] = None,
        columns: int = 100,
        rows: int = 30,
        stdout: Optional[int] = None,
    ):
        self._master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        env = {**(env or os.environ), "TERM": "xterm-256color", "COLUMNS": str(columns), "LINES": str(rows)}
        env.pop("NO_COLOR", None)

        def take_the_terminal() -> None:
            # After setsid (start_new_session), the pty becomes this session's controlling
            # terminal: the line discipline turns a typed Ctrl-C into SIGINT for it.
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
            hearing_ctrl_c()

        # stdout may go elsewhere (a pipe), to check what a program writes there when only
        # stderr is a terminal.
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=slave,
            stdout=slave if stdout is None else stdout,
            stderr=slave,
            start_new_session=True,
            preexec_fn=take_the_terminal,
        )
        os.close(slave)
        self._output = bytearray()
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        # Drained all the time, so the program never blocks on a full terminal buffer.
        while True:
            try:
                chunk = os.read(self._master, 1 << 16)
            except OSError:  # EIO: every writer has closed its end
                return
            if not chunk:
                return
            with self._lock:
                self._output += chunk

    def text(self) -> str:
        """What the program wrote, without escape sequences."""
        with self._lock:
            return ESCAPES.sub("", self._output.decode("utf-8", errors="replace"))

    def type(self, keys: bytes) -> None:
        os.write(self._master, keys)

    def wait_until(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if self.proc.poll() is not None:
                raise AssertionError(f"the program ended (exit {self.proc.returncode}) before {what}:\n{self.text()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} within {timeout:.0f} s:\n{self.text()}")
            time.sleep(0.1)

    def wait(self, timeout: float) -> int:
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            # kagent prints every thread's stack on SIGUSR1: where it waits, for the failure.
            self.proc.send_signal(signal.SIGUSR1)
            time.sleep(2)
            raise AssertionError(
                f"the program did not end within {timeout:.0f} s; its screen and stacks:\n{self.text()}"
            ) from None
        self._reader.join(timeout=5)
        return code

    def __enter__(self) -> Terminal:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self._master)
