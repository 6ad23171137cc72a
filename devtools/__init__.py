"""Developer tools for gcu-stack: a real local Kubernetes control plane with
kwok-simulated nodes (:mod:`devtools.localcluster`) and a private real dockerd
(:mod:`devtools.dockerd`).

Both use binaries prepared by ``scripts/toolchain/kube.sh`` (cached under
``~/.cache/gcu-stack/<tool>-<version>/``) and only the Python standard library.
This package also holds the small helpers its modules share: processes, state files, the
CLIs' exit codes; :mod:`devtools.daemon` is what the private dockerd and containerd share.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

CACHE_DIR = Path(os.environ.get("GCU_CACHE_DIR") or Path.home() / ".cache" / "gcu-stack")
TOOLCHAIN_HINT = "run scripts/toolchain/kube.sh (it installs/builds the local toolchain)"
PROJECT_DIR = Path(__file__).resolve().parent.parent
# Which Kubernetes the local clusters and real nodes run, as scripts/toolchain/kube.sh reads it too: the newest the
# suite is proven on (devtools/go), or, with GCU_KUBERNETES=oldest, the oldest supported one (its own build module).
KUBERNETES_BUILD_MODULES = {"newest": PROJECT_DIR / "devtools" / "go",
                            "oldest": PROJECT_DIR / "devtools" / "oldest-kubernetes" / "go"}


class ToolchainMissing(RuntimeError):
    """A binary needed by devtools is missing; run scripts/toolchain/kube.sh."""


class ComponentFailed(RuntimeError):
    """A server process did not come up (message carries its log tail)."""


# --------------------------------------------------------------------------- processes

# util-linux's setpriv sets PR_SET_PDEATHSIG and execs the server. A Python preexec_fn did that before, but it ran
# Python (and dlopen) in the child of a multithreaded process; the child then sometimes died of SIGSEGV before exec
# (a relaunched kube-apiserver "exited -11" with no line in its log, CI of stop 33).
_DIE_WITH_PARENT = ("setpriv", "--pdeathsig", "KILL", "--")


# Log files of the servers this process started, oldest first: a failing test shows their tails (tests/conftest.py).
SERVER_LOGS: list[Path] = []


def spawn(argv: Sequence[str], log_path: Path, *, detach: bool, env: Optional[dict] = None,
          cwd: Optional[Path] = None) -> subprocess.Popen:
    """Start a server process in its own session, stdout+stderr appended to log_path.

    detach=False: when called from the main thread, the process gets SIGKILL if this
    Python process dies (PR_SET_PDEATHSIG), so a crashed test run leaves no strays.
    (PDEATHSIG fires when the *forking thread* exits, so it is not set when spawning
    from another thread; atexit/stop() still clean up there.)
    detach=True: it outlives this process.
    """
    import threading
    pdeath = not detach and threading.current_thread() is threading.main_thread()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    if log_path not in SERVER_LOGS:
        SERVER_LOGS.append(log_path)
    log = open(log_path, "ab", buffering=0)
    log.write(f"\n==== {time.strftime('%H:%M:%S')} exec: {' '.join(map(str, argv))}\n".encode())
    try:
        return subprocess.Popen(
            [*(_DIE_WITH_PARENT if pdeath else ()), *(str(a) for a in argv)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            env=env, cwd=cwd, start_new_session=True, close_fds=True,
        )
    finally:
        log.close()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie counts as dead
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def start_time(pid: int) -> int:
    """A process's start time (clock ticks since boot, /proc/PID/stat field 22): with the PID, its identity."""
    with open(f"/proc/{pid}/stat") as handle:
        return int(handle.read().rsplit(")", 1)[1].split()[19])


def owner(pid: int) -> dict:
    """A record naming process `pid` for good (PIDs are reused), for `owner_alive`."""
    return {"pid": pid, "start_time": start_time(pid)}


def owner_alive(record: Any) -> bool:
    """Whether the process an `owner` record names still runs (not a later process with the same PID)."""
    try:
        return pid_alive(record["pid"]) and start_time(record["pid"]) == record["start_time"]
    except (OSError, KeyError, TypeError, ValueError, IndexError):
        return False


def mountpoints() -> list[str]:
    """Every mount point of this process's mount namespace, in mount order."""
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4].encode().decode("unicode_escape") for line in f]


def mounts_under(roots: Iterable[str]) -> list[str]:
    """The mount points at or below any of `roots`, deepest first (the order to unmount them in)."""
    roots = [str(r).rstrip("/") for r in roots if r]
    inside = [m for m in mountpoints() if any(m == r or m.startswith(r + "/") for r in roots)]
    return sorted(inside, key=len, reverse=True)


def go_requirement(go_mod: Path, module: str) -> Optional[str]:
    """The version (without its v) that a build module's go.mod requires of `module`; None if it requires none."""
    found = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+v(\S+)", go_mod.read_text(), re.M)
    return found.group(1) if found else None


def kubernetes_version() -> str:
    """The Kubernetes version to run: GCU_K8S_VERSION when set (with GCU_KUBE_BIN_DIR, binaries built elsewhere),
    else what the build module GCU_KUBERNETES names (newest or oldest; default newest) requires."""
    if os.environ.get("GCU_K8S_VERSION"):
        return os.environ["GCU_K8S_VERSION"].lstrip("v")
    leg = os.environ.get("GCU_KUBERNETES") or "newest"
    if leg not in KUBERNETES_BUILD_MODULES:
        raise ToolchainMissing(f"GCU_KUBERNETES={leg!r}: it is one of {', '.join(KUBERNETES_BUILD_MODULES)}")
    go_mod = KUBERNETES_BUILD_MODULES[leg] / "go.mod"
    found = go_requirement(go_mod, "k8s.io/kubernetes")
    if not found:
        raise ToolchainMissing(f"{go_mod} requires no k8s.io/kubernetes version")
    return found


def overlay_mount_error(directory: Path) -> Optional[str]:
    """Why an overlay with its upper directory in `directory` does not mount (None when it does): tried in a
    mount namespace of its own, which goes with the probe, so the machine's mount table never sees it."""
    directory.mkdir(parents=True, exist_ok=True)
    probe = Path(tempfile.mkdtemp(prefix=".overlay-probe-", dir=directory))
    try:
        for d in ("lower", "upper", "work", "merged"):
            (probe / d).mkdir()
        r = subprocess.run(["unshare", "--mount", "--propagation", "private", "mount", "-t", "overlay", "overlay-probe",
                            "-o", f"lowerdir={probe}/lower,upperdir={probe}/upper,workdir={probe}/work",
                            str(probe / "merged")], capture_output=True, text=True, timeout=30)
        return None if r.returncode == 0 else (r.stderr.strip() or f"mount exited {r.returncode}")
    finally:
        shutil.rmtree(probe, ignore_errors=True)


def pid_cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def pid_matches(pid: int, exe: str) -> bool:
    """True if pid is alive and runs exe (guards against recycled pids)."""
    cmd = pid_cmdline(pid)
    if tuple(cmd[:len(_DIE_WITH_PARENT)]) == _DIE_WITH_PARENT:   # spawned, not yet exec'd by setpriv
        cmd = cmd[len(_DIE_WITH_PARENT):]
    return bool(cmd) and pid_alive(pid) and (cmd[0] == exe or os.path.basename(cmd[0]) == os.path.basename(exe))


def kill_pid(pid: int, *, exe: Optional[str] = None, timeout: float = 10.0,
             proc: Optional[subprocess.Popen] = None) -> None:
    """SIGTERM pid (and its process group if it leads one), SIGKILL after timeout."""
    if exe is not None and not pid_matches(pid, exe):
        return
    if not pid_alive(pid):
        if proc is not None:
            proc.poll()
        return

    def _signal(sig: int) -> None:
        try:
            if os.getpgid(pid) == pid:
                os.killpg(pid, sig)
            else:
                os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    _signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None:
            if proc.poll() is not None:
                break
        elif not pid_alive(pid):
            break
        time.sleep(0.05)
    else:
        _signal(signal.SIGKILL)
        if proc is not None:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:  # pragma: no cover
                pass
        else:
            end = time.monotonic() + 5
            while pid_alive(pid) and time.monotonic() < end:
                time.sleep(0.05)
    # leftover members of the process group (none expected)
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass


def kill_matching(matches: Callable[[str], bool]) -> None:
    """SIGKILL every process whose command line (its arguments joined by NUL bytes) `matches`."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if matches(cmdline):
            try:
                os.kill(int(entry), signal.SIGKILL)
            except OSError:
                pass


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read().decode(errors="replace")
    except OSError as e:
        return f"<no log: {e}>"
    return "\n".join(data.splitlines()[-lines:])


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------- state, HTTPS, CLI

def write_json(path: Path, data: Any) -> None:
    """Replace `path` with `data` as indented JSON at once (readers never see half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    tmp.replace(path)


class StartStop:
    """``with X(...) as x``: x.start() on entry, x.stop() on exit."""

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def exit_codes(main: Callable[..., int]) -> Callable[..., int]:
    """A CLI main whose ToolchainMissing exits 2 and ComponentFailed 1, with the message on stderr."""
    @functools.wraps(main)
    def run(*args: Any, **kwargs: Any) -> int:
        try:
            return main(*args, **kwargs)
        except (ToolchainMissing, ComponentFailed) as error:
            print(f"error: {error}", file=sys.stderr)
            return 2 if isinstance(error, ToolchainMissing) else 1
    return run


def nothing_running(command: str, *, say: str = "") -> int:
    """A state-dir CLI's answer when its state dir holds nothing running: `down` has nothing to do (0,
    after saying `say`), `status` and the others report {"running": false} and exit 3."""
    if command == "down":
        if say:
            print(say, file=sys.stderr)
        return 0
    print(json.dumps({"running": False}))
    return 3


__all__ = [
    "CACHE_DIR", "TOOLCHAIN_HINT", "ToolchainMissing", "ComponentFailed",
    "SERVER_LOGS", "mountpoints", "mounts_under", "spawn", "pid_alive", "start_time", "owner", "owner_alive",
    "pid_matches", "kill_pid", "kill_matching", "log_tail", "free_port",
    "write_json", "StartStop", "exit_codes", "nothing_running",
]


def built_module(directory: str, module: str) -> tuple[str, Path]:
    """What scripts/toolchain/kube.sh builds from devtools/<directory>: the version of `module` its go.mod requires
    (without its v), and the cache directory of the binaries (<directory's program>-<version>/bin)."""
    go_mod = PROJECT_DIR / "devtools" / directory / "go.mod"
    found = go_requirement(go_mod, module)
    if not found:
        raise ToolchainMissing(f"{go_mod} requires no {module} version")
    return found, CACHE_DIR / f"{BUILT_NAMES.get(directory, directory)}-{found}" / "bin"


BUILT_NAMES = {"containerd2": "containerd"}   # kube.sh's cache directory, where it is not the module directory's name
NFD_MODULE = ("nfd", "sigs.k8s.io/node-feature-discovery")
