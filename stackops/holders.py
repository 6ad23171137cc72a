"""Who runs a Pulumi command on a stack, recorded so that a lock it leaves behind can be proved stale.

Pulumi's file-backend lock names only a pid, a user, a host name and a time. A host name is not a
machine (containers and clones share them) and a pid is reused after a reboot or a while, so that
alone never proves the holder is gone. `run()` starts the command and writes, next to the backend,
a holder record: the pid and its start time (clock ticks since boot, /proc/<pid>/stat field 22),
the machine's boot id (/proc/sys/kernel/random/boot_id, new at every boot), its machine id, its pid
namespace and host name. A lock whose record says "this host, this boot, this pid namespace" and
whose pid is not running with that start time is provably stale.

Killing the CLI is not killing the command: Pulumi starts its plugins (the language host, the
Kubernetes provider, the Python dynamic provider running a driver rollout) in process groups of their
own, so a SIGKILL of the CLI's group leaves them running, still acting on the cluster with no one to
report to. `run()` marks every process of the command with GCU_STACKOPS_RUN=<run id> in its environment
(plugins inherit it); `leftovers()` finds them after the CLI is gone, and they are stopped before the
lock is cleared, so an orphaned rollout never runs alongside the next one.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional, Sequence

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
RUN_ENV = "GCU_STACKOPS_RUN"  # in the environment of every process of a command run(): how its leftovers are found
MACHINE_ID = (Path("/etc/machine-id"), Path("/var/lib/dbus/machine-id"))


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


@dataclass(frozen=True)
class Host:
    """This machine, as far as a lock's holder needs to be told apart from it."""

    hostname: str
    boot_id: str
    machine_id: str
    pid_namespace: str

    @classmethod
    def here(cls) -> "Host":
        machine = next((value for value in (_read(p) for p in MACHINE_ID) if value), "")
        try:
            namespace = os.readlink("/proc/self/ns/pid")
        except OSError:
            namespace = ""
        return cls(socket.gethostname(), _read(BOOT_ID), machine, namespace)


def start_ticks(pid: int) -> Optional[int]:
    """When process `pid` started (clock ticks after boot), or None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: fields after the last ')'.
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[19])  # field 22 of the whole line


def running(pid: int, ticks: int) -> bool:
    """Whether the very process that started at `ticks` is still there (not merely another with its pid)."""
    now = start_ticks(pid)
    if now is None or now != ticks:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has finished; only its parent has not reaped it yet


@dataclass
class Holder:
    """A holder record: one Pulumi command started by gcu-stack (scripts/gcu-stack, the service)."""

    pid: int
    start_ticks: int
    hostname: str
    boot_id: str
    machine_id: str
    pid_namespace: str
    user: str
    stack: str
    command: list = field(default_factory=list)
    started_at: str = ""
    run_id: str = ""  # RUN_ENV's value in the environment of the command's processes

    @property
    def key(self) -> str:
        return f"{self.hostname}-{self.pid}"

    def describe(self) -> str:
        what = " ".join(self.command[:3]) or "a pulumi command"
        return f"`{what}` (pid {self.pid} on {self.hostname}, user {self.user}, started {self.started_at})"


def holders_dir(state_root: Path) -> Path:
    return Path(state_root) / ".gcu-stack" / "holders"


def record_path(state_root: Path, hostname: str, pid: int) -> Path:
    return holders_dir(state_root) / f"{hostname}-{pid}.json"


def write(state_root: Path, pid: int, stack: str, command: Sequence[str], run_id: str = "") -> Holder:
    host = Host.here()
    ticks = start_ticks(pid)
    if ticks is None:
        raise RuntimeError(f"process {pid} is not running")
    holder = Holder(
        pid=pid, start_ticks=ticks, hostname=host.hostname, boot_id=host.boot_id, machine_id=host.machine_id,
        pid_namespace=host.pid_namespace, user=os.environ.get("USER") or str(os.getuid()), stack=stack,
        command=list(command), started_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), run_id=run_id,
    )
    path = record_path(state_root, host.hostname, pid)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(asdict(holder), indent=1))
    temporary.replace(path)
    return holder


def read(state_root: Path, hostname: str, pid: int) -> Optional[Holder]:
    try:
        data = json.loads(record_path(state_root, hostname, pid).read_text())
        return Holder(**data)
    except (OSError, ValueError, TypeError):
        return None


def remove(state_root: Path, holder: Holder) -> None:
    try:
        record_path(state_root, holder.hostname, holder.pid).unlink()
    except FileNotFoundError:
        pass


def verdict(holder: Optional[Holder], host: Optional[Host] = None) -> tuple[str, str]:
    """("gone" | "running" | "elsewhere" | "unknown", why). Only "gone" is proof the holder no longer runs."""
    host = host or Host.here()
    if holder is None:
        return "unknown", "gcu-stack did not start it (no holder record), so nothing proves whether it still runs"
    if holder.hostname != host.hostname:
        return "elsewhere", f"it runs on another host, {holder.hostname}"
    if holder.boot_id != host.boot_id:
        if holder.machine_id and holder.machine_id == host.machine_id:
            return "gone", f"this machine has rebooted since it started (boot id {holder.boot_id[:8]}… is now {host.boot_id[:8]}…)"
        return "elsewhere", (f"the host named {holder.hostname} it ran on is not this machine (another boot id and "
                             "machine id: a clone or another machine of the same name)")
    if holder.pid_namespace and host.pid_namespace and holder.pid_namespace != host.pid_namespace:
        return "elsewhere", "it runs in another container on this machine (another pid namespace)"
    if running(holder.pid, holder.start_ticks):
        return "running", f"process {holder.pid} is still running"
    ticks = start_ticks(holder.pid)
    if ticks is None:
        return "gone", f"no process {holder.pid} runs on this machine any more (same host, same boot)"
    if ticks == holder.start_ticks:
        return "gone", f"process {holder.pid} has exited (only its exit status is left to collect; same host, same boot)"
    return "gone", f"process {holder.pid} now is another program (it started at another time; same host, same boot)"


def leftovers(holder: Holder) -> list[tuple[int, str]]:
    """(pid, command line) of the processes a gone command left running on this machine (its plugins)."""
    if not holder.run_id:
        return []
    found = []
    for pid in marked(holder.run_id):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        found.append((pid, cmdline[:200]))
    return found


def stop(processes: list[tuple[int, str]], timeout: float = 15.0) -> None:
    """SIGKILL each (a gone command's leftovers: nothing of theirs is worth a clean exit), and wait until they are."""
    for pid, _ in processes:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    pids = {pid for pid, _ in processes}
    while pids and time.monotonic() < deadline:
        for pid in list(pids):
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                state = "gone"
            if state in ("gone", "Z"):
                pids.discard(pid)
        time.sleep(0.1)
    if pids:
        raise RuntimeError(f"processes {sorted(pids)} of a killed command did not stop")


def sweep(state_root: Path) -> list[Holder]:
    """Remove the records of holders that are provably gone on this host; the ones removed."""
    removed = []
    for path in sorted(holders_dir(state_root).glob("*.json")):
        try:
            holder = Holder(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            continue
        if verdict(holder)[0] == "gone":
            remove(state_root, holder)
            removed.append(holder)
    return removed


def run(state_root: Path, stack: str, argv: Sequence[str], env: Optional[dict] = None) -> int:
    """Run `argv` (a pulumi command) with a holder record for as long as it runs; its exit status.

    SIGINT and SIGTERM are passed on, so Pulumi can stop cleanly and release its lock. If this process is
    killed outright, the record stays, and proves the lock stale once the command is gone too."""
    run_id = uuid.uuid4().hex
    process = subprocess.Popen(list(argv), env={**(env if env is not None else os.environ), RUN_ENV: run_id})
    holder = write(state_root, process.pid, stack, argv, run_id)

    def forward(signum, _frame):
        try:
            process.send_signal(signum)
        except ProcessLookupError:
            pass

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = process.wait()
        return 128 - code if code < 0 else code  # killed by a signal: as a shell reports it
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        remove(state_root, holder)


def marked(run_id: str, name: str = "") -> list[int]:
    """The live processes whose environment carries RUN_ENV=<run_id> (and whose command is `name`, when given)."""
    marker = f"{RUN_ENV}={run_id}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            stat = (proc / "stat").read_text()
            if stat.rsplit(")", 1)[1].split()[0] == "Z" or (name and stat[stat.index("(") + 1: stat.rindex(")")] != name):
                continue
            if marker in (proc / "environ").read_bytes().split(b"\0"):
                found.append(int(proc.name))
        except (OSError, ValueError):
            continue
    return sorted(found)
