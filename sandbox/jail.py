"""The first process of a contained command: pid 1 of its pid namespace, in a mount namespace
of its own. Run as ``python -E -S jail.py PLAN -- COMMAND...`` by ``unshare``, or, for the
solution's box inside an evaluation, by the referee itself with ``"box": true`` in the plan
(see ``enter_box``); standard library only (it runs before, and outside, anything the command
may import).

It arranges the files the command sees, as the plan (JSON, see ``file_plans.FilePlan``)
says, drops every capability for what it executes, then starts the command and reaps
orphans until the command ends. Its exit status is the command's (a death by signal N as
128+N, since pid 1 cannot die by its own signal); when it exits the kernel kills all that is
left in the namespace. The command must not be pid 1 itself: the kernel ignores every signal
pid 1 has no handler for, so its own abort() or kill(self) would not end it.

The file arrangement, all in this namespace only:

* ``hide``: folders covered by an empty read-only tmpfs (home folders, other runs, the
  user's project); ``private``: covered by an empty writable one (/tmp, /dev, /dev/shm);
* ``show``/``writable``: paths inside those brought back, read-only or read-write, through
  descriptors opened before the cover went on (a bind mount from /proc/self/fd/N);
* every other mount is remounted read-only, then ``read_only`` paths inside writable ones
  (the task's files, git's history) are bound read-only over themselves;
* no capabilities survive the exec, and no_new_privs is set: a root command cannot unmount,
  remount, mount, or open files by handle around any of this, nor gain privileges through
  setuid programs.
"""

import ctypes
import json
import os
import re
import signal
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_NOATIME, MS_NODIRATIME, MS_BIND = 32, 1024, 2048, 4096
MS_REC, MS_PRIVATE, MS_RELATIME, MS_STRICTATIME = 16384, 1 << 18, 1 << 21, 1 << 24
# Per-mount flags a read-only remount must keep (the kernel refuses to drop some of them).
KEPT_OPTIONS = {
    "nosuid": MS_NOSUID,
    "nodev": MS_NODEV,
    "noexec": MS_NOEXEC,
    "noatime": MS_NOATIME,
    "nodiratime": MS_NODIRATIME,
    "relatime": MS_RELATIME,
    "strictatime": MS_STRICTATIME,
}
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 24, 38
CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID = 0x20000, 0x8000000, 0x10000000, 0x20000000
SIGKILL = 9
# Mounts the read-only pass leaves alone: the namespace's own /proc (unshare --mount-proc).
UNTOUCHED = ("/proc",)

_libc = ctypes.CDLL(None, use_errno=True)


class JailError(Exception):
    pass


def _mount(source, target, fstype, flags, data=None):
    def enc(s):
        return None if s is None else os.fsencode(s)

    if _libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        err = ctypes.get_errno()
        raise JailError(f"mount {source} on {target} ({fstype}, flags {flags:#x}): {os.strerror(err)}")


def _inside(path, folder):
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _mountinfo():
    """(mount point, per-mount options) of every mount, parents before children."""
    mounts = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            # \040 is a space, and so on. (Not the unicode_escape codec: it would be imported
            # on first use, when the standard library may lie under a cover.)
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
            mounts.append((point, fields[5].split(",")))
    return mounts


def _options_of(point):
    """The per-mount options of the mount on top at ``point``: a read-only remount must keep
    them (inside a user namespace the kernel refuses to drop nosuid or nodev)."""
    found = [options for mounted, options in _mountinfo() if mounted == point]
    return found[-1] if found else []


def _make_mountpoint(path, like_fd):
    """An empty folder or file at ``path`` (inside a fresh tmpfs) to bind ``like_fd`` onto."""
    if os.path.isdir(f"/proc/self/fd/{like_fd}"):
        os.makedirs(path, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if not os.path.exists(path):
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))


def arrange(plan):
    """Do the plan's file arrangement in this (new) mount namespace."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    # Descriptors first: once a cover is on, the paths under it can no longer be opened.
    kept = {}
    for kind in ("show", "writable"):
        for path in plan.get(kind, []):
            if os.path.lexists(path) and path not in kept:
                kept[path] = (kind, os.open(path, os.O_PATH | os.O_CLOEXEC))
    covers = [(p, False) for p in plan.get("hide", [])] + [(p, True) for p in plan.get("private", [])]
    # In the box, covers are fresh folders of ``cover_with`` (a folder the referee made): a
    # tmpfs mounted there would belong to the box's user namespace, in which the box's user
    # has no id, and nothing could be made in it (EOVERFLOW).
    cover_with = os.open(plan["cover_with"], os.O_PATH | os.O_CLOEXEC) if plan.get("cover_with") else None
    writable_mounts, shown = [], []
    # Shallow covers first; a deeper one exists only if it is private (made here) or sits
    # inside something brought back.
    for number, (cover, is_private) in enumerate(sorted(covers, key=lambda c: (c[0].count("/"), c[0]))):
        if not os.path.isdir(cover):
            if not is_private:
                continue
            os.makedirs(cover, exist_ok=True)
        if cover_with is None:
            _mount("tmpfs", cover, "tmpfs", MS_NOSUID, "mode=1777" if is_private else "mode=0755")
        else:
            name = f"cover-{number}"
            os.mkdir(name, dir_fd=cover_with)
            os.chmod(name, 0o1777 if is_private else 0o755, dir_fd=cover_with)
            _mount(f"/proc/self/fd/{cover_with}/{name}", cover, None, MS_BIND)
        if is_private:
            writable_mounts.append(cover)
        for path, (kind, fd) in sorted(kept.items()):
            if path != cover and _inside(path, cover):
                _make_mountpoint(path, fd)
                _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
                (writable_mounts if kind == "writable" else shown).append(path)
    for path in shown:  # here: the pass below skips what lies inside a private cover
        _remount_read_only(path, _options_of(path))
    for path in plan.get("writable", []):
        # Writable paths not under any cover: their own mount, kept out of the read-only pass.
        if os.path.exists(path) and not any(_inside(path, w) for w in writable_mounts):
            _mount(path, path, None, MS_BIND | MS_REC)
            writable_mounts.append(path)
    # A mount inside a cover and not brought back lies under it, out of reach (its path now
    # names a folder of the cover): nothing to make read-only there.
    shadowed = [c for c, _ in covers]
    for point, _ in _mountinfo():
        if any(_inside(point, u) for u in UNTOUCHED) or any(_inside(point, w) for w in writable_mounts):
            continue
        if any(point != c and _inside(point, c) for c in shadowed) and not any(_inside(point, s) for s in shown):
            continue
        options = _options_of(point)  # of the mount on top, which the remount acts on
        if "ro" not in options:
            _remount_read_only(point, options)
    for path in plan.get("read_only", []):
        if os.path.exists(path):
            _mount(path, path, None, MS_BIND | MS_REC)
            _remount_read_only(path, _options_of(path))
    for link, target in plan.get("links", {}).items():
        if not os.path.lexists(link):
            os.symlink(target, link)


def _remount_read_only(point, options):
    flags = MS_REMOUNT | MS_BIND | MS_RDONLY
    for option in options:
        flags |= KEPT_OPTIONS.get(option, 0)
    try:
        _mount(None, point, None, flags)
    except JailError:
        if os.path.exists(point):
            raise
        # A mount shadowed by a cover has no reachable mount point left: nothing to do.


def enter_box():
    """Namespaces of the box's own, entered by a process without capabilities: a user
    namespace (in which it may make the others; no id is mapped, so the box's processes keep
    the referee's user on every file but have no capability outside), a mount namespace, an
    IPC namespace and a pid namespace, whose pid 1 is the child forked here; this function
    returns in that child. So the box's processes can address no process outside it: no
    signal, renice, re-pin or trace reaches the referee, the baseline or anything else.

    The process that called it stays outside, waits for the box's pid 1 and ends as it ended
    (a death by signal N, reported by pid 1 as 128+N, by the same signal); when it is killed,
    the box's pid 1 gets SIGKILL, and with it every process of the box."""
    if _libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWPID) != 0:
        raise JailError(f"unshare: {os.strerror(ctypes.get_errno())}")
    alive_read, alive_write = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(alive_write)
        if _libc.prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0:
            raise JailError(f"prctl(PDEATHSIG): {os.strerror(ctypes.get_errno())}")
        # The parent may have died before the prctl (its pid is 0 from in here): its end of
        # the pipe is then closed, and the box must not start.
        os.set_blocking(alive_read, False)
        try:
            if os.read(alive_read, 1) == b"":
                os._exit(1)
        except BlockingIOError:
            pass
        os.close(alive_read)
        return
    os.close(alive_read)
    while True:
        pid, status = os.waitpid(child, 0)
        if pid == child:
            break
    code = os.waitstatus_to_exitcode(status)
    signum = -code if code < 0 else code - 128 if 128 < code <= 128 + 64 else 0
    if signum:
        if signum != SIGKILL:  # (SIGKILL's action cannot be set, nor needs to be)
            signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    os._exit(code if code >= 0 else 1)


def mount_own_proc():
    """A /proc of the box's pid namespace: the box's processes only."""
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)


def drop_privileges():
    """No capability survives the next exec, and none can be regained through it."""
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise JailError(f"prctl(NO_NEW_PRIVS): {os.strerror(ctypes.get_errno())}")
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last = int(f.read())
    for cap in range(last + 1):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise JailError(f"prctl(CAPBSET_DROP, {cap}): {os.strerror(ctypes.get_errno())}")


def run(command):
    child = os.fork()
    if child == 0:
        try:
            os.execvp(command[0], command)
        except OSError as exc:
            os.write(2, f"kagent jail: cannot run {command[0]}: {exc}\n".encode())
            os._exit(127)
    while True:
        pid, status = os.wait()
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
            os._exit(code if code >= 0 else 128 - code)


def main(argv):
    plan = json.loads(argv[1])
    command = argv[argv.index("--") + 1 :]
    if plan:
        cwd = os.getcwd()  # as a path: the old directory may now lie under a cover
        try:
            if plan.get("box"):
                enter_box()
            if plan.get("arrange_files"):
                arrange(plan)
                os.chdir(cwd)
            if plan.get("box"):
                mount_own_proc()
            if plan.get("drop_capabilities"):
                drop_privileges()
        except (JailError, OSError) as exc:
            os.write(2, f"kagent jail: cannot set up the sandbox: {exc}\n".encode())
            os._exit(126)
    run(command)


if __name__ == "__main__":
    main(sys.argv)
