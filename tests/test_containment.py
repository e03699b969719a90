"""Containment of executed code: no network, the whole process tree killed at the limit, a
process cap a fork bomb cannot pass, and a plain run (with one notice) where a mechanism is
missing. Each test that needs a mechanism skips where the probe found it missing."""
from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from kagent.sandbox import containment
from kagent.sandbox.containment import Capabilities, Limits
from kagent.sandbox.evaluate import EvalOptions
from kagent.sandbox.results import Verdict
from kagent.tools import default_tools
from kagent.tools.base import ToolContext

from conftest import reference_solution, run_eval

TOOLS = {tool.spec.name: tool for tool in default_tools()}
CAPS = containment.probe()
needs_netns = pytest.mark.skipif(not CAPS.network_namespace, reason="no network namespace on this machine")
needs_pidns = pytest.mark.skipif(not CAPS.pid_namespace, reason="no pid namespace on this machine")
# Without a process cap a fork bomb run as root would take the machine down, not the test.
needs_cap = pytest.mark.skipif(CAPS.pids_cgroup is None or not CAPS.pid_namespace,
                               reason="no pids cgroup and pid namespace: a fork bomb would not be bounded")
NOTHING_WORKS = Capabilities(unshare=None, network_namespace=False, pid_namespace=False, pids_cgroup=None,
                             rlimits=False)


@pytest.fixture
def ctx(tmp_path: Path, kimi, kagent_home: Path) -> ToolContext:
    workspace = tmp_path / "ws"
    (workspace / "task").mkdir(parents=True)
    options = EvalOptions(device="cpu", scale="smoke", rounds=1, cache_dir=kagent_home)
    return ToolContext(workspace=workspace, task=kimi, eval_options=options)


@pytest.fixture
def listener() -> Iterator[int]:
    """A loopback socket that accepts connections; yields its port."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


def shell(ctx: ToolContext, command: str, timeout_s: float = 30):
    return TOOLS["shell"].run({"command": command, "timeout_s": timeout_s}, ctx)


def process_count() -> int:
    return sum(1 for entry in os.listdir("/proc") if entry.isdigit())


def processes_with(marker: str) -> list[int]:
    """Live (not zombie) processes whose command line holds ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state != "Z":
            found.append(int(entry))
    return found


def connect_script(port: int) -> str:
    return (f"import socket\n"
            f"try:\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=3).close()\n"
            f"    print('CONNECTED')\n"
            f"except OSError as exc:\n"
            f"    print('UNREACHABLE', exc)\n")


# -- network ---------------------------------------------------------------------------------
@needs_netns
def test_shell_cannot_reach_a_loopback_listener(ctx: ToolContext, listener: int):
    # The listener is real: kagent's own process can reach it.
    socket.create_connection(("127.0.0.1", listener), timeout=3).close()
    script = ctx.workspace / "connect.py"
    script.write_text(connect_script(listener))
    out = shell(ctx, f"{sys.executable} connect.py")
    assert "UNREACHABLE" in out.content and "CONNECTED" not in out.content, out.content


@needs_netns
def test_solution_cannot_reach_a_loopback_listener(kimi, kagent_home, tmp_path, listener: int):
    # At import the solution tries the listener; if it got through, the load would fail.
    patch = f"""
import socket as _socket
try:
    _socket.create_connection(("127.0.0.1", {listener}), timeout=3).close()
except OSError:
    pass
else:
    raise RuntimeError("the solution reached the network")
"""
    result = run_eval(kimi, reference_solution(kimi, tmp_path, patch), kagent_home, mode="check")
    # PASS also proves the result pipe still reaches kagent through unshare.
    assert result.verdict is Verdict.PASS, result.reason


# -- the process tree ------------------------------------------------------------------------
def test_endless_loop_is_stopped_at_the_limit(ctx: ToolContext):
    started = time.monotonic()
    out = shell(ctx, "while :; do :; done", timeout_s=2)
    assert out.data["timed_out"] and time.monotonic() - started < 10


@needs_pidns
def test_setsid_process_ignoring_sigterm_is_gone_after_the_limit(ctx: ToolContext):
    marker = f"kagent-escape-{uuid.uuid4().hex}"
    (ctx.workspace / "escape.py").write_text(
        "import os, signal, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "os.setsid()  # leaves the process group kagent kills\n"
        "open('started', 'w').close()\n"
        "time.sleep(300)\n")
    out = shell(ctx, f"{sys.executable} escape.py {marker} & wait", timeout_s=3)
    assert out.data["timed_out"] and (ctx.workspace / "started").exists()
    for _ in range(50):
        if not processes_with(marker):
            break
        time.sleep(0.1)
    assert not processes_with(marker)


@needs_cap
def test_fork_bomb_is_bounded_and_cleaned_up(ctx: ToolContext):
    before = process_count()
    started = time.monotonic()
    # The trailing sleep keeps the shell alive, so the bomb rages until the limit (in a pid
    # namespace the shell's exit alone would end it).
    out = shell(ctx, ":(){ :|:& };:; sleep 60", timeout_s=5)
    assert out.data["timed_out"] and time.monotonic() - started < 20
    for _ in range(100):
        if process_count() <= before + 5:
            break
        time.sleep(0.1)
    assert process_count() <= before + 5, (before, process_count())
    after = shell(ctx, "echo still-fine")
    assert not after.is_error and "still-fine" in after.content


# -- limits ----------------------------------------------------------------------------------
def test_rlimits_and_cgroup_reach_the_command(ctx: ToolContext):
    if not CAPS.rlimits:
        pytest.skip("rlimits cannot be set here")
    out = shell(ctx, "ulimit -c; ulimit -n; cat /proc/self/cgroup")
    lines = out.content.splitlines()
    assert "0" in lines and str(Limits().max_open_files) in lines, out.content
    if CAPS.pids_cgroup is not None:
        assert f"pids:/{CAPS.pids_cgroup.name}" in out.content, out.content


def test_contained_wraps_only_what_works(monkeypatch):
    full = Capabilities(unshare="/usr/bin/unshare", network_namespace=True, pid_namespace=True,
                        pids_cgroup=None, rlimits=True)
    monkeypatch.setattr(containment, "probe", lambda: full)
    monkeypatch.setattr(containment, "_noticed", True)
    argv, preexec = containment.contained(["echo", "hi"], Limits())
    assert argv[0] == "/usr/bin/unshare" and "-n" in argv and "--kill-child" in argv
    # unshare runs the init, which runs the command: never the command as pid 1.
    assert argv[-2:] == ["echo", "hi"] and sys.executable in argv and preexec is not None
    with_network, _ = containment.contained(["echo", "hi"], Limits(network=True))
    assert "-n" not in with_network and "-p" in with_network


# -- describe and the notice -----------------------------------------------------------------
def test_describe_names_each_mechanism(monkeypatch):
    full = Capabilities(unshare="/usr/bin/unshare", network_namespace=True, pid_namespace=True,
                        pids_cgroup=Path("/sys/fs/cgroup/pids/x"), rlimits=True)
    monkeypatch.setattr(containment, "probe", lambda: full)
    text = containment.describe()
    for words in ("network namespace", "pid namespace", "pids cgroup", "rlimits", "files: not isolated"):
        assert words in text
    assert "NOT" not in text
    monkeypatch.setattr(containment, "probe", lambda: NOTHING_WORKS)
    missing = containment.describe()
    assert "network: NOT isolated" in missing and "setsid can survive" in missing
    assert "not capped" in missing and "files: not isolated" in missing


def test_missing_mechanisms_still_run_the_command_and_say_so_once(ctx: ToolContext, monkeypatch, caplog):
    monkeypatch.setattr(containment, "probe", lambda: NOTHING_WORKS)
    monkeypatch.setattr(containment, "_noticed", False)
    assert containment.contained(["echo", "hi"], Limits()) == (["echo", "hi"], None)
    # That call used up the notice; start over to see what the CLI would see.
    monkeypatch.setattr(containment, "_noticed", False)
    first = containment.notice()
    assert first is not None and "NOT isolated" in first
    assert containment.notice() is None
    monkeypatch.setattr(containment, "_noticed", False)
    caplog.clear()  # the first contained() call above logged the notice too
    with caplog.at_level(logging.WARNING, logger=containment.__name__):
        runs = [shell(ctx, "echo plain-run") for _ in range(2)]
    assert all(not r.is_error and "plain-run" in r.content for r in runs)
    assert [r.getMessage() for r in caplog.records if "NOT isolated" in r.getMessage()] == [first]


def test_complete_machine_gives_no_notice(monkeypatch):
    full = Capabilities(unshare="/usr/bin/unshare", network_namespace=True, pid_namespace=True,
                        pids_cgroup=Path("/sys/fs/cgroup/pids/x"), rlimits=True)
    monkeypatch.setattr(containment, "probe", lambda: full)
    monkeypatch.setattr(containment, "_noticed", False)
    assert containment.notice() is None


# -- the pid namespace's init ----------------------------------------------------------------
@needs_pidns
def test_init_keeps_the_command_out_of_pid_1_and_its_status_readable(ctx: ToolContext):
    out = shell(ctx, "echo pid=$$; exit 3")
    # bash is the init's child: pid 2, not pid 1 (whose unhandled signals the kernel drops).
    assert "pid=2" in out.content and out.data["exit_code"] == 3, out.content
    argv, preexec = containment.contained([sys.executable, "-c", "import os; os.abort()"], Limits())
    done = subprocess.run(argv, preexec_fn=preexec, stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    assert containment.exit_status(done.returncode) == -signal.SIGABRT


@needs_pidns
def test_killing_the_group_kills_a_setsid_child(tmp_path: Path):
    # What run_child does at its limit: SIGKILL to the process group it started.
    marker = f"kagent-escape-{uuid.uuid4().hex}"
    started = tmp_path / "started"
    script = (f"import os, time, subprocess, sys\n"
              f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', '{marker}'],"
              f" start_new_session=True)\n"
              f"open({str(started)!r}, 'w').close()\n"
              f"time.sleep(300)\n")
    argv, preexec = containment.contained([sys.executable, "-c", script], Limits())
    proc = subprocess.Popen(argv, preexec_fn=preexec, start_new_session=True, stdin=subprocess.DEVNULL)
    try:
        for _ in range(100):
            if started.exists() and processes_with(marker):
                break
            time.sleep(0.1)
        assert processes_with(marker)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    for _ in range(50):
        if not processes_with(marker):
            break
        time.sleep(0.1)
    assert not processes_with(marker)
