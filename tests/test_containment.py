"""Containment of executed code: no network, no IPC objects shared between commands, the
whole process tree killed at the limit and when kagent dies, a process cap a fork bomb cannot
pass, a memory cap, files hidden or read-only outside the workspace, no capabilities, and a
plain run (with one notice) where a mechanism is missing.
Each test that needs a mechanism skips where the probe found it missing."""

from __future__ import annotations

import ctypes
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kagent.sandbox import containment, file_plans
from kagent.sandbox.cgroups import CgroupSupport
from kagent.sandbox.containment import Capabilities, Limits
from kagent.sandbox.evaluate import EvalOptions, evaluate
from kagent.sandbox.results import Verdict
from kagent.tasks import resolve_task
from kagent.tools import default_tools
from kagent.tools.base import ToolContext
from kagent.tools.jobs import Jobs

from conftest import WAIT_S, processes_with, reference_solution, run_eval

TOOLS = {tool.spec.name: tool for tool in default_tools()}
CAPS = containment.probe()
needs_netns = pytest.mark.skipif(not CAPS.network_namespace, reason="no network namespace on this machine")
needs_ipcns = pytest.mark.skipif(not CAPS.ipc_namespace, reason="no IPC namespace on this machine")
needs_pidns = pytest.mark.skipif(not CAPS.pid_namespace, reason="no pid namespace on this machine")
# Without a process cap a fork bomb run as root would take the machine down, not the test.
needs_cap = pytest.mark.skipif(
    not CAPS.process_cap or not CAPS.pid_namespace,
    reason="no pids cgroup and pid namespace: a fork bomb would not be bounded",
)
needs_memory_cap = pytest.mark.skipif(not CAPS.memory_cap, reason="no memory cgroup on this machine")
needs_files = pytest.mark.skipif(not CAPS.files, reason="no mount namespace for the jail on this machine")
NOTHING_WORKS = Capabilities(
    unshare=None,
    network_namespace=False,
    ipc_namespace=False,
    pid_namespace=False,
    files=False,
    cgroups=None,
    rlimits=False,
)
EVERYTHING = Capabilities(
    unshare="/usr/bin/unshare",
    network_namespace=True,
    ipc_namespace=True,
    pid_namespace=True,
    files=True,
    rlimits=True,
    cgroups=CgroupSupport(2, Path("/nonexistent/cgroup"), Path("/nonexistent/cgroup")),
    solution_box=True,
)


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


def connect_script(port: int) -> str:
    return (
        f"import socket\n"
        f"try:\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=3).close()\n"
        f"    print('CONNECTED')\n"
        f"except OSError as exc:\n"
        f"    print('UNREACHABLE', exc)\n"
    )


# -- network ---------------------------------------------------------------------------------
@needs_netns
def test_shell_cannot_reach_a_loopback_listener(ctx: ToolContext, listener: int):
    # The listener is real: kagent's own process can reach it.
    socket.create_connection(("127.0.0.1", listener), timeout=3).close()
    script = ctx.workspace / "connect.py"
    script.write_text(connect_script(listener))
    out = shell(ctx, f"{sys.executable} connect.py")
    assert "UNREACHABLE" in out.content and "CONNECTED" not in out.content, out.content


@pytest.mark.slow
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


# -- IPC objects -----------------------------------------------------------------------------
# Creates (``create``) or looks for (``find``) a System V shared memory segment under the key
# it is given, and says what it did or found.
SHARED_MEMORY = """
import ctypes, errno, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
libc.shmat.restype = ctypes.c_void_p
key, action, marker = int(sys.argv[1]), sys.argv[2], b"left by an earlier command"
if action == "create":
    segment = libc.shmget(key, 4096, 0o1000 | 0o600)  # IPC_CREAT
    if segment < 0:
        sys.exit(f"shmget: {errno.errorcode[ctypes.get_errno()]}")
    ctypes.memmove(libc.shmat(segment, None, 0), marker, len(marker))
    print("created")
else:
    segment = libc.shmget(key, 0, 0)
    if segment < 0:
        print("absent", errno.errorcode[ctypes.get_errno()])
    else:
        print("found:", ctypes.string_at(libc.shmat(segment, None, 0), len(marker)).decode())
"""


def shared_memory(key: int, action: str, contain: bool) -> str:
    argv = [sys.executable, "-c", SHARED_MEMORY, str(key), action]
    quietly = dict(stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=WAIT_S)
    if contain:
        with containment.contained(argv, Limits()) as box:
            done = subprocess.run(box.argv, preexec_fn=box.preexec, **quietly)
    else:
        done = subprocess.run(argv, **quietly)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def unused_ipc_key() -> int:
    return uuid.uuid4().int % (1 << 30) + 1


@needs_ipcns
def test_shared_memory_does_not_pass_from_one_command_to_the_next():
    key = unused_ipc_key()
    assert shared_memory(key, "create", contain=True) == "created"
    assert shared_memory(key, "find", contain=True) == "absent ENOENT"


def test_without_an_ipc_namespace_shared_memory_passes_from_one_command_to_the_next():
    # The test above can fail: run plainly, the second command finds what the first left.
    key = unused_ipc_key()
    try:
        assert shared_memory(key, "create", contain=False) == "created"
        assert shared_memory(key, "find", contain=False) == "found: left by an earlier command"
    finally:
        libc = ctypes.CDLL(None, use_errno=True)
        segment = libc.shmget(key, ctypes.c_size_t(0), 0)
        if segment >= 0:
            libc.shmctl(segment, 0, None)  # IPC_RMID


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
        "time.sleep(300)\n"
    )
    out = shell(ctx, f"{sys.executable} escape.py {marker} & wait", timeout_s=3)
    assert out.data["timed_out"] and (ctx.workspace / "started").exists()
    for _ in range(50):
        if not processes_with(marker):
            break
        time.sleep(0.1)
    assert not processes_with(marker)


@needs_cap
def test_fork_bomb_is_bounded_and_cleaned_up(ctx: ToolContext):
    # The marker in the shell's command line is in every fork of it: the bomb's processes are
    # counted alone, whatever else runs on the machine (other tests, in parallel).
    marker = f"kagent-bomb-{uuid.uuid4().hex}"
    started = time.monotonic()
    # The trailing sleep keeps the shell alive, so the bomb rages until the limit (in a pid
    # namespace the shell's exit alone would end it).
    out = shell(ctx, f": {marker}; :(){{ :|:& }};:; sleep 60", timeout_s=5)
    assert out.data["timed_out"] and time.monotonic() - started < 20
    for _ in range(100):
        if not processes_with(marker):
            break
        time.sleep(0.1)
    assert not processes_with(marker)
    after = shell(ctx, "echo still-fine")
    assert not after.is_error and "still-fine" in after.content


# -- limits ----------------------------------------------------------------------------------
def test_rlimits_and_cgroup_reach_the_command(ctx: ToolContext):
    if not CAPS.rlimits:
        pytest.skip("rlimits cannot be set here")
    out = shell(ctx, "ulimit -c; ulimit -n; cat /proc/self/cgroup")
    lines = out.content.splitlines()
    assert "0" in lines and str(Limits().max_open_files) in lines, out.content
    if CAPS.process_cap:
        # A cgroup of its own, named after this kagent process; removed when it ended.
        assert f"/kagent-{os.getpid()}-" in out.content, out.content
        names = [line.rsplit("/", 1)[-1] for line in lines if f"/kagent-{os.getpid()}-" in line]
        assert not any((CAPS.cgroups.pids_root / name).exists() for name in names)


def test_contained_wraps_only_what_works(monkeypatch):
    full = Capabilities(
        unshare="/usr/bin/unshare",
        network_namespace=True,
        ipc_namespace=True,
        pid_namespace=True,
        files=True,
        cgroups=None,
        rlimits=True,
    )
    monkeypatch.setattr(containment, "probe", lambda: full)
    monkeypatch.setattr(containment, "_noticed", True)
    plan = file_plans.file_plan(writable=[Path.cwd()])
    box = containment.contained(["echo", "hi"], Limits(), plan)
    assert box.argv[0] == "/usr/bin/unshare" and {"-n", "-i", "--kill-child"} <= set(box.argv)
    # unshare runs the jail, which runs the command: never the command as pid 1.
    assert box.argv[-2:] == ["echo", "hi"] and str(containment.JAIL) in box.argv and box.preexec is not None
    spec = json.loads(box.argv[box.argv.index(str(containment.JAIL)) + 1])
    assert spec["arrange_files"] and spec["drop_capabilities"] and spec["writable"][0] == str(Path.cwd())
    with_network = containment.contained(["echo", "hi"], Limits(network=True)).argv
    assert "-n" not in with_network and {"-i", "-p"} <= set(with_network)


# -- describe and the notice -----------------------------------------------------------------
def test_describe_names_each_mechanism(monkeypatch):
    monkeypatch.setattr(containment, "probe", lambda: EVERYTHING)
    text = containment.describe()
    for words in (
        "network namespace",
        "IPC namespace",
        "pid namespace",
        "mount namespace",
        "pids cgroup",
        "memory cgroup",
        "rlimits",
        "box of its own (user, pid, mount and IPC namespaces)",
    ):
        assert words in text
    assert "NOT" not in text
    monkeypatch.setattr(containment, "probe", lambda: NOTHING_WORKS)
    missing = containment.describe()
    assert "solution: NOT boxed" in missing and "scheduling before each timed block stand in" in missing
    assert "network: NOT isolated" in missing and "setsid can survive" in missing and "no IPC namespace" in missing
    assert "not capped for root" in missing and "files: NOT isolated" in missing and "memory: NOT capped" in missing


def test_missing_mechanisms_still_run_the_command_and_say_so_once(ctx: ToolContext, monkeypatch, caplog):
    monkeypatch.setattr(containment, "probe", lambda: NOTHING_WORKS)
    monkeypatch.setattr(containment, "_noticed", False)
    box = containment.contained(["echo", "hi"], Limits(), file_plans.file_plan(writable=[Path.cwd()]))
    assert (box.argv, box.cgroup) == (["echo", "hi"], None)
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
    monkeypatch.setattr(containment, "probe", lambda: EVERYTHING)
    monkeypatch.setattr(containment, "_noticed", False)
    assert containment.notice() is None


@needs_pidns
@needs_files
def test_tmp_and_background_processes_last_one_shell_command(ctx: ToolContext):
    # What the shell's description says: /tmp is new for each command, and what a command
    # leaves running in the background dies with it; the workspace and $HOME stay.
    marker = f"kagent-left-behind-{uuid.uuid4().hex}"
    first = shell(
        ctx,
        f"echo kept > /tmp/scratch; echo kept > $HOME/kept; echo kept > kept; "
        f"(setsid {sys.executable} -c 'import time; time.sleep(300)' {marker} &); echo started",
    )
    assert first.data["exit_code"] == 0 and "started" in first.content
    assert not processes_with(marker)
    second = shell(ctx, "test -e /tmp/scratch; echo tmp=$?; cat $HOME/kept kept")
    assert "tmp=1" in second.content and second.content.count("kept") == 2, second.content
    assert "/tmp" in TOOLS["shell"].spec.description and "jobs tool" in TOOLS["shell"].spec.description


@needs_pidns
@needs_files
def test_a_job_is_jailed_and_stopping_it_or_the_runs_end_kills_all_it_started(ctx: ToolContext):
    jobs = Jobs()
    markers = [f"kagent-job-{uuid.uuid4().hex}" for _ in range(2)]
    for marker in markers:
        # A child that leaves its session, and a file it may not write: the jail holds for jobs.
        command = (
            f"touch /usr/kagent-job-probe 2>/dev/null || echo read-only; "
            f"setsid {sys.executable} -c 'import time; print(\"asleep\", flush=True); time.sleep(300)' "
            f"{marker} & sleep 300"
        )
        assert not jobs.run({"action": "start", "command": command}, ctx).is_error
    # The marker is on bash's own command line from its start: the log says when the sleeper runs.
    logs = [ctx.workspace / "build" / "jobs" / f"{number}.log" for number in (1, 2)]
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline and not all(log.read_text().endswith("asleep\n") for log in logs):
        time.sleep(0.1)
    assert all(processes_with(m) for m in markers)
    stopped = jobs.run({"action": "stop", "job": 1}, ctx)
    assert "job 1: stopped after" in stopped.content and stopped.content.endswith("read-only\nasleep"), stopped.content
    assert not processes_with(markers[0]) and processes_with(markers[1])
    jobs.close()  # the run's exploration ends
    assert not processes_with(markers[1])
    assert "job 2: killed at the run's end" in jobs.run({"action": "list"}, ctx).content


# -- the pid namespace's init ----------------------------------------------------------------
@needs_pidns
def test_init_keeps_the_command_out_of_pid_1_and_its_status_readable(ctx: ToolContext):
    out = shell(ctx, "echo pid=$$; exit 3")
    # bash is the init's child: pid 2, not pid 1 (whose unhandled signals the kernel drops).
    assert "pid=2" in out.content and out.data["exit_code"] == 3, out.content
    with containment.contained([sys.executable, "-c", "import os; os.abort()"], Limits()) as box:
        done = subprocess.run(
            box.argv, preexec_fn=box.preexec, stdin=subprocess.DEVNULL, capture_output=True, timeout=WAIT_S
        )
    assert containment.exit_status(done.returncode) == -signal.SIGABRT


@needs_pidns
def test_killing_the_group_kills_a_setsid_child(tmp_path: Path):
    # What run_harness_child does at its limit: SIGKILL to the process group it started.
    marker = f"kagent-escape-{uuid.uuid4().hex}"
    started = tmp_path / "started"
    script = (
        f"import os, time, subprocess, sys\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', '{marker}'],"
        f" start_new_session=True)\n"
        f"open({str(started)!r}, 'w').close()\n"
        f"time.sleep(300)\n"
    )
    box = containment.contained([sys.executable, "-c", script], Limits())
    proc = subprocess.Popen(box.argv, preexec_fn=box.preexec, start_new_session=True, stdin=subprocess.DEVNULL)
    try:
        for _ in range(100):
            if started.exists() and processes_with(marker):
                break
            time.sleep(0.1)
        assert processes_with(marker)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        box.close()
    for _ in range(50):
        if not processes_with(marker):
            break
        time.sleep(0.1)
    assert not processes_with(marker)


# -- when kagent dies ------------------------------------------------------------------------
# kagent in a Python process of its own, running an evaluation or the model's shell command
# until the test SIGKILLs it, as the out-of-memory killer or an impatient user would.
EVALUATE_IN_A_PROCESS = """
import sys
from pathlib import Path
from kagent.sandbox.evaluate import EvalOptions, evaluate
from kagent.tasks import resolve_task
evaluate(resolve_task(sys.argv[1]), Path(sys.argv[2]),
         EvalOptions(mode="check", device="cpu", scale="smoke", cache_dir=Path(sys.argv[3]), timeout_s=3600))
"""
SHELL_IN_A_PROCESS = """
import sys
from pathlib import Path
from kagent.sandbox.evaluate import EvalOptions
from kagent.tasks import resolve_task
from kagent.tools.base import ToolContext
from kagent.tools.jobs import Jobs
from kagent.tools.shell import Shell
ctx = ToolContext(workspace=Path(sys.argv[1]), task=resolve_task(sys.argv[2]), eval_options=EvalOptions())
Shell().run({"command": sys.argv[3], "timeout_s": 3600}, ctx)
"""
# Says it is there (beside the solution, in the evaluation's copy), then keeps a core busy.
HANGS_IN_ITS_STEP = """
import pathlib as _pathlib
class Model(Model):
    def step(self, hidden, state):
        _pathlib.Path(__file__).with_name("hanging").touch()
        while True:
            pass
"""


def survivors_of_killing(kagent: subprocess.Popen, marker: str, started: Callable[[], bool]) -> list[int]:
    """SIGKILL ``kagent`` once its command has ``started()``; the processes holding ``marker``
    still alive 5 s later. Whatever is left is killed before returning, so that a failing
    test leaves no core busy."""
    try:
        give_up = time.monotonic() + 300
        while not (started() and processes_with(marker)):
            assert kagent.poll() is None, "kagent ended before its command started"
            assert time.monotonic() < give_up, "the command never started"
            time.sleep(0.2)
        kagent.kill()
        kagent.wait()
        gone_by = time.monotonic() + 5
        while processes_with(marker) and time.monotonic() < gone_by:
            time.sleep(0.1)
        return processes_with(marker)
    finally:
        kagent.kill()
        kagent.wait()
        for pid in processes_with(marker):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass  # it died meanwhile


@pytest.mark.slow
@needs_pidns
def test_a_hanging_evaluation_dies_with_kagent(kimi, kagent_home: Path, tmp_path: Path):
    # The evaluation's temporary folder, and so every command line of its processes (unshare,
    # the jail, the harness), carries the marker.
    marker = f"kagent-dies-with-{uuid.uuid4().hex}"
    temporary = tmp_path / marker
    temporary.mkdir()
    solution = reference_solution(kimi, tmp_path / "solution", HANGS_IN_ITS_STEP)
    kagent = subprocess.Popen(
        [sys.executable, "-c", EVALUATE_IN_A_PROCESS, kimi.name, str(solution), str(kagent_home)],
        env={**os.environ, "TMPDIR": str(temporary)},
        stdin=subprocess.DEVNULL,
    )
    left = survivors_of_killing(kagent, marker, lambda: any(temporary.glob("kagent-eval-*/solution/hanging")))
    assert left == [], f"{len(left)} process(es) of the evaluation outlived kagent"


@needs_pidns
def test_a_shell_command_dies_with_kagent(kimi, tmp_path: Path):
    marker = f"kagent-dies-with-{uuid.uuid4().hex}"
    workspace = tmp_path / "ws"
    (workspace / "task").mkdir(parents=True)
    command = f"touch started; python -c 'import time; time.sleep(3600)' {marker}"
    kagent = subprocess.Popen(
        [sys.executable, "-c", SHELL_IN_A_PROCESS, str(workspace), kimi.name, command], stdin=subprocess.DEVNULL
    )
    left = survivors_of_killing(kagent, marker, (workspace / "started").exists)
    assert left == [], f"{len(left)} process(es) of the shell command outlived kagent"


# Prints the signal this process gets when its parent dies (prctl PR_GET_PDEATHSIG).
PRINTS_ITS_DEATH_SIGNAL = (
    "import ctypes; death = ctypes.c_int(); "
    "ctypes.CDLL(None).prctl(2, ctypes.byref(death), 0, 0, 0); print(death.value)"
)


def test_without_any_mechanism_the_command_still_dies_with_kagent(monkeypatch):
    monkeypatch.setattr(containment, "probe", lambda: NOTHING_WORKS)
    monkeypatch.setattr(containment, "_noticed", True)
    with containment.contained([sys.executable, "-c", PRINTS_ITS_DEATH_SIGNAL], Limits()) as box:
        done = subprocess.run(
            box.argv, preexec_fn=box.preexec, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=WAIT_S
        )
    assert box.argv[0] == sys.executable  # run as it is, nothing around it
    assert done.stdout.strip() == str(int(signal.SIGKILL)), (done.stdout, done.stderr)


def test_a_command_whose_kagent_died_before_it_started_never_runs(tmp_path: Path, monkeypatch):
    ran = tmp_path / "ran"
    box = containment.contained(["touch", str(ran)], Limits())
    # The child finds a parent other than the kagent that made the box: as if kagent had died
    # between the fork and the prctl, and the child had gone to init. No signal will come.
    monkeypatch.setattr(containment.os, "getppid", lambda: 1)
    with box:
        done = subprocess.run(box.argv, preexec_fn=box.preexec, stdin=subprocess.DEVNULL, timeout=WAIT_S)
    assert done.returncode != 0 and not ran.exists()


# -- files -----------------------------------------------------------------------------------
@needs_files
def test_shell_writes_only_the_workspace_and_its_home(ctx: ToolContext, tmp_path: Path):
    (ctx.workspace / ".git").mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    out = shell(
        ctx,
        f"touch ws-file && touch $HOME/home-file && echo $HOME; "
        f"touch task/x; touch .git/x; touch {outside}/x; touch /usr/kagent-x; "
        f"echo CapEff=$(grep CapEff /proc/self/status | cut -f2); "
        f"umount task 2>&1 || echo cannot-umount; mount -t tmpfs none task 2>&1 || echo cannot-mount",
    )
    assert (ctx.workspace / "ws-file").exists() and (ctx.home / "home-file").exists(), out.content
    assert str(ctx.home) in out.content
    assert out.content.count("Read-only file system") == 3, out.content  # task/, .git/, /usr
    # /tmp is the command's own: the write succeeded there, and left nothing here.
    assert not (outside / "x").exists() and not (ctx.workspace / "task" / "x").exists()
    assert "CapEff=0000000000000000" in out.content, out.content
    assert "cannot-umount" in out.content and "cannot-mount" in out.content


@needs_files
def test_shell_cannot_see_home_project_kagent_home_or_other_runs(ctx: ToolContext, tmp_path: Path, monkeypatch):
    secrets = {
        "HOME": tmp_path / "user-home",
        "KAGENT_RUNS": tmp_path / "project" / "runs",
        "KAGENT_HOME": tmp_path / "kagent-home",
    }
    for variable, folder in secrets.items():
        folder.mkdir(parents=True)
        (folder / "secret.txt").write_text(f"secret of {variable}")
        monkeypatch.setenv(variable, str(folder))
    (tmp_path / "project" / "notes.txt").write_text("the user's own file")
    monkeypatch.chdir(tmp_path / "project")
    paths = [f / "secret.txt" for f in secrets.values()] + [tmp_path / "project" / "notes.txt"]
    out = shell(ctx, "; ".join(f"cat {p} 2>/dev/null || echo hidden" for p in paths) + f"; ls {tmp_path}")
    assert "secret" not in out.content and "own file" not in out.content, out.content
    assert out.content.count("hidden") == len(paths)
    # The interpreter and torch stay usable inside.
    out = shell(ctx, "python -c 'import torch; print(torch.ones(2).sum().item())'")
    assert "2.0" in out.content, out.content


@pytest.mark.slow
@needs_files
def test_solution_cannot_write_outside_its_folder_or_read_the_project(kimi, kagent_home, tmp_path, monkeypatch):
    project = tmp_path / "project"
    project.mkdir()
    (project / "notes.txt").write_text("the user's own file")
    monkeypatch.chdir(project)
    patch = f"""
import os as _os, pathlib as _pathlib
for _target in ({str(project / "planted.txt")!r}, '/usr/kagent-planted', {str(kagent_home / ".." / "planted.txt")!r}):
    try:
        _pathlib.Path(_target).write_text('x')
    except OSError:
        pass
if _os.path.exists({str(project / "notes.txt")!r}):
    raise RuntimeError("the solution sees the user's files")
"""
    result = run_eval(kimi, reference_solution(kimi, tmp_path, patch), kagent_home, mode="check")
    assert result.verdict is Verdict.PASS, result.reason
    assert not (project / "planted.txt").exists() and not Path("/usr/kagent-planted").exists()
    assert not (kagent_home.parent / "planted.txt").exists()


def test_file_plan_covers_never_the_system(monkeypatch, tmp_path: Path):
    monkeypatch.chdir("/")
    monkeypatch.setenv("HOME", "/usr")
    monkeypatch.setenv("KAGENT_RUNS", "/tmp")  # private anyway: one cover, not two
    plan = file_plans.file_plan(writable=[tmp_path])
    assert "/" not in plan.hide and "/usr" not in plan.hide and "/tmp" not in plan.hide
    assert str(tmp_path) in plan.writable and "/tmp" in plan.private and "/dev" in plan.private
    # What runs the command comes back inside the covers.
    assert sys.prefix in plan.show or Path(sys.prefix).resolve().as_posix() in plan.show


def test_a_build_cache_the_command_could_not_write_falls_back_to_its_home(
    ctx: ToolContext, tmp_path: Path, monkeypatch
):
    # A user's TRITON_CACHE_DIR under /opt is read-only in the jail: Triton's first compile
    # failed there with EROFS. Only caches the command may write and keep are passed on.
    monkeypatch.setenv("TRITON_CACHE_DIR", "/opt/shared-triton-cache")
    monkeypatch.setenv("TRITON_HOME", str(ctx.home / "triton-home"))
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(ctx.workspace / "task" / "ext"))  # read-only: task/
    out = shell(
        ctx,
        "echo cache=${TRITON_CACHE_DIR:-unset} home=${TRITON_HOME:-unset} "
        "ext=${TORCH_EXTENSIONS_DIR:-unset} HOME=$HOME",
    )
    assert f"cache=unset home={ctx.home / 'triton-home'} ext=unset HOME={ctx.home}" in out.content, out.content
    (tmp_path / "work" / "task").mkdir(parents=True)
    plan = file_plans.file_plan(writable=[tmp_path / "work"], read_only=[tmp_path / "work" / "task"])
    env = {
        "TRITON_CACHE_DIR": str(tmp_path / "work" / "cache"),
        "TRITON_HOME": "/tmp/elsewhere",
        "TORCH_EXTENSIONS_DIR": "",
        "PATH": "/usr/bin",
    }
    assert file_plans.with_writable_build_caches(env, plan) == {
        "TRITON_CACHE_DIR": str(tmp_path / "work" / "cache"),
        "PATH": "/usr/bin",
    }


# -- memory ----------------------------------------------------------------------------------
@needs_memory_cap
@needs_pidns
def test_memory_hog_is_killed_and_reported_and_the_next_command_runs(ctx: ToolContext, monkeypatch):
    # Limits() takes three quarters of what the machine has: pretend it has 512 MiB.
    monkeypatch.setattr(containment, "_machine_memory", lambda: 512 << 20)
    out = shell(ctx, "python -c 'x = bytearray(2 << 30); print(\"survived\")'")
    assert "survived" not in out.content and "out of memory" in out.content, out.content
    assert "0.4 GiB" in out.content  # the limit it ran into, said plainly
    after = shell(ctx, "echo still-fine")
    assert "still-fine" in after.content and "out of memory" not in after.content


@pytest.mark.slow
@needs_memory_cap
@needs_pidns
def test_solution_that_exhausts_memory_is_a_crash_that_says_so(kimi, kagent_home, tmp_path, monkeypatch):
    monkeypatch.setattr(containment, "_machine_memory", lambda: 1 << 30)
    patch = "_hog = bytearray(4 << 30)\n"
    result = run_eval(kimi, reference_solution(kimi, tmp_path, patch), kagent_home, mode="check")
    assert result.verdict is Verdict.CRASH and "out of memory" in result.reason, result.reason
    assert result.limits_hit and result.peak_host_memory_bytes


@pytest.mark.slow
@needs_files
def test_a_solution_cannot_poison_the_cache(kimi, tmp_path: Path):
    # It finds the cache and the staging folder in the job file named on its parent's (the
    # referee's) command line and overwrites all it can, and adds a file of its own: a cold
    # run, then a warm one. (In a box of its own it sees neither its parent nor the job.)
    patch = """
import json as _json, os as _os, pathlib as _pathlib
try:
    _argv = _pathlib.Path(f"/proc/{_os.getppid()}/cmdline").read_bytes().decode().split("\\0")
    _job = _json.loads(_pathlib.Path(_argv[_argv.index("--job") + 1]).read_text())
except (OSError, ValueError):
    _job = {"cache_dir": "/nonexistent", "cache_staging": "/nonexistent"}
for _folder in map(_pathlib.Path, (_job["cache_dir"], _job["cache_staging"])):
    for _path in [*_folder.rglob("*"), _folder / "weights" / "extra.pt"]:
        if _path.is_file() or _path.name == "extra.pt":
            try:
                _path.write_bytes(b"poison")
            except OSError:
                pass
"""
    cache = tmp_path / "cache"
    poisoner = reference_solution(kimi, tmp_path / "poisoner", patch)
    run_eval(kimi, poisoner, cache, mode="check")
    assert not any(p.read_bytes() == b"poison" for p in cache.rglob("*") if p.is_file())
    honest = run_eval(kimi, reference_solution(kimi, tmp_path / "honest"), cache, mode="check")
    assert honest.verdict is Verdict.PASS, honest.reason
    filled = {p: p.read_bytes() for p in cache.rglob("*") if p.is_file()}
    assert filled
    again = run_eval(kimi, poisoner, cache, mode="check")
    assert again.verdict is Verdict.PASS, again.reason  # the reference, its writes refused
    assert {p: p.read_bytes() for p in cache.rglob("*") if p.is_file()} == filled


@needs_files
def test_a_user_other_than_root_gets_the_jail_through_a_user_namespace(ctx: ToolContext, monkeypatch):
    # As root here, the user-namespace path is taken by pretending not to be root: the jail
    # must arrange the files, and drop what the namespace gave, just the same.
    monkeypatch.setattr(containment.os, "geteuid", lambda: 1000)
    containment.probe.cache_clear()
    try:
        caps = containment.probe()
        assert caps.network_namespace and caps.pid_namespace and caps.files, caps
        box = containment.contained(["true"], Limits())
        assert "--map-root-user" in box.argv
        box.close()
        out = shell(ctx, "touch ws-file; touch task/x; grep CapEff /proc/self/status; ls /root | wc -l")
        assert (ctx.workspace / "ws-file").exists() and "Read-only file system" in out.content, out.content
        assert "CapEff:\t0000000000000000" in out.content
    finally:
        monkeypatch.undo()
        containment.probe.cache_clear()


@pytest.mark.slow
def test_a_load_inline_build_works_in_the_jail_and_is_cached_in_the_home(tmp_path: Path):
    # The agent's main path: a solution that compiles its own extension when imported. The
    # build lands in the HOME the evaluation gives it and is reused by the next evaluation.
    problem = tmp_path / "double.py"
    problem.write_text(
        "import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, a):\n"
        "        return a * 2.0\n\ndef get_inputs():\n    return [torch.randn(64, 64)]\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    solution = tmp_path / "solution" / "solution.py"
    solution.parent.mkdir()
    solution.write_text(
        "import torch\nfrom torch.utils.cpp_extension import load_inline\n\n"
        "_ext = load_inline(name='kagent_test_double', functions=['twice'],\n"
        "                   cpp_sources='torch::Tensor twice(torch::Tensor a) { return a * 2.0; }')\n\n"
        "class ModelNew(torch.nn.Module):\n    def forward(self, a):\n        return _ext.twice(a)\n"
    )
    home = tmp_path / "home"
    options = EvalOptions(mode="check", cache_dir=tmp_path / "cache", home=home, timeout_s=600)
    first = evaluate(resolve_task(str(problem)), solution, options)
    assert first.verdict is Verdict.PASS, (first.reason, first.stderr_tail)
    assert list(home.glob(".cache/torch_extensions/*/kagent_test_double/*.so"))
    again = evaluate(resolve_task(str(problem)), solution, options)
    assert again.verdict is Verdict.PASS and again.wall_seconds < first.wall_seconds


@needs_files
def test_the_jail_keeps_locked_mount_flags_inside_a_user_namespace(tmp_path: Path, monkeypatch):
    # Inside a user namespace the kernel refuses a read-only remount that would drop nosuid or
    # nodev from a mount it inherited: a folder brought back from such a mount must keep them.
    if os.geteuid() != 0:
        pytest.skip("making a nosuid,nodev mount needs root")
    mounted = tmp_path / "mnt"
    mounted.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "nosuid,nodev", "tmpfs", str(mounted)], check=True)
    try:
        (mounted / "hidden" / "shown").mkdir(parents=True)
        (mounted / "hidden" / "shown" / "file").write_text("brought back")
        (mounted / "hidden" / "secret").write_text("covered")
        (tmp_path / "ws").mkdir()
        monkeypatch.setattr(containment.os, "geteuid", lambda: 1000)
        containment.probe.cache_clear()
        plan = file_plans.file_plan(
            writable=[tmp_path / "ws"], show=[mounted / "hidden" / "shown"], hide=[mounted / "hidden"]
        )
        script = f"cat {mounted}/hidden/shown/file; cat {mounted}/hidden/secret 2>/dev/null || echo no-secret"
        with containment.contained(["sh", "-c", script], Limits(), plan) as box:
            done = subprocess.run(
                box.argv,
                preexec_fn=box.preexec,
                capture_output=True,
                text=True,
                timeout=WAIT_S,
                cwd=tmp_path / "ws",
                stdin=subprocess.DEVNULL,
            )
        assert "--map-root-user" in box.argv
        assert "brought back" in done.stdout and "no-secret" in done.stdout, (done.stdout, done.stderr)
    finally:
        monkeypatch.undo()
        containment.probe.cache_clear()
        subprocess.run(["umount", str(mounted)], check=False)


@pytest.mark.slow
@needs_files
def test_a_cache_in_the_home_folder_beside_the_interpreter(kimi, tmp_path: Path, monkeypatch):
    # The usual layout: kagent's cache under ~/.cache and, often, the interpreter under the
    # same home (pyenv, conda). Brought back under the home's cover in name order, the cache
    # comes before the interpreter: the jail must not need the standard library meanwhile.
    cache = Path.home() / f".aaa-kagent-test-{uuid.uuid4().hex}"
    try:
        cache.mkdir()
    except OSError:
        pytest.skip("the home folder is not writable here")
    try:
        monkeypatch.setenv("KAGENT_HOME", str(cache))
        result = run_eval(kimi, reference_solution(kimi, tmp_path), cache, mode="check")
        assert result.verdict is Verdict.PASS, (result.reason, result.stderr_tail)
    finally:
        shutil.rmtree(cache, ignore_errors=True)


@needs_files
def test_a_folder_shown_inside_a_writable_one_stays_read_only(tmp_path: Path):
    # The evaluation shows kagent's cache read-only; with `kagent eval --build-home` around it
    # (~/.cache holding ~/.cache/kagent) the cache lies inside a folder the solution may write,
    # and must stay read-only there: a solution that could write it would grade every later
    # evaluation against what it wrote. (A change of this stop that dropped such shown folders
    # as "writable already", to mend a tool's command, opened exactly that; the tool now shows
    # only what lies outside the folders its command may write.)
    home = tmp_path / "home"
    (home / "cache").mkdir(parents=True)
    (home / "cache" / "entry").write_text("sealed\n")
    plan = file_plans.file_plan(writable=[home], show=[home / "cache"])
    script = (
        f"cat {home}/cache/entry; echo poisoned > {home}/cache/entry 2>/dev/null || echo ro; "
        f"touch {home}/made && echo home-writable"
    )
    with containment.contained(["sh", "-c", script], Limits(), plan) as box:
        done = subprocess.run(
            box.argv,
            preexec_fn=box.preexec,
            capture_output=True,
            text=True,
            timeout=WAIT_S,
            cwd=home,
            stdin=subprocess.DEVNULL,
        )
    assert done.stdout.split() == ["sealed", "ro", "home-writable"], (done.stdout, done.stderr)
    assert (home / "cache" / "entry").read_text() == "sealed\n"


def test_the_solutions_box_covers_all_but_the_system_and_hides_the_cache_but_its_weights(tmp_path, monkeypatch):
    cache, work, task = tmp_path / "cache", tmp_path / "run" / "solution", tmp_path / "run" / "task"
    for folder in (cache / "weights", cache / "outputs", work, task):
        folder.mkdir(parents=True)
    plan = file_plans.solution_box_plan(writable=[work], show=[task, cache / "weights"], hide=[tmp_path / "run", cache])
    tops = {str(p) for p in Path("/").iterdir() if p.is_dir() and not p.is_symlink()}
    assert tops - set(file_plans.SYSTEM_DIRS) - {"/tmp"} <= set(plan.hide)
    assert not set(file_plans.SYSTEM_DIRS) & set(plan.hide)
    assert str(tmp_path / "run") in plan.hide and str(cache) in plan.hide
    assert str(cache / "weights") in plan.show and str(task) in plan.show and str(work) in plan.writable
    assert plan.private == ["/tmp", "/var/tmp", "/dev/shm"] and plan.links == {}
    monkeypatch.setattr(containment, "probe", lambda: EVERYTHING)
    box = containment.solution_box("cpu", [work], [task], [cache], None)
    assert box is not None and box["jail"] == str(containment.JAIL) and str(cache) in box["plan"]["hide"]
    assert containment.solution_box("cuda", [work], [task], [cache], None) is None
    monkeypatch.setenv(containment.BOX_ON_CUDA_VARIABLE, "1")
    assert containment.solution_box("cuda", [work], [task], [cache], None) is not None
    monkeypatch.setattr(containment, "probe", lambda: NOTHING_WORKS)
    assert containment.solution_box("cpu", [work], [task], [cache], None) is None
