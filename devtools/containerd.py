"""A private, real containerd (Debian ``containerd`` 1.6.20) for tests.

    containerd --config F     (F: version = 2, own root, state and [grpc] address)

Its own root, state, socket, config, pid file and log; the CRI plugin is on (native
snapshotter, a few non-default CRI settings so tests can see them survive). Containers run
from a plain directory (a static busybox root filesystem) with ``ctr run --rootfs``; they
keep running, same PID and start time, across a containerd stop and start, as on a real
node. containerd 1.6 exits on SIGHUP, so it is never sent one: a restart is stop + start.

    d = Containerd(tmp_path).start()
    d.run_container("keep", "sleep", "3600")
    d.restart()                 # what `systemctl restart containerd` does
    d.stop()

CLI (detached, so a restart command can stop and start it)::

    python -m devtools.containerd up      --state-dir DIR   # prints the socket path
    python -m devtools.containerd restart --state-dir DIR   # the tests' restart command
    python -m devtools.containerd status  --state-dir DIR
    python -m devtools.containerd down    --state-dir DIR

``restart`` appends one JSON line per restart to ``DIR/restarts.log`` (old and new pid,
seconds), so tests and benchmarks can count restarts.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from devtools import TOOLCHAIN_HINT, ComponentFailed, ToolchainMissing, kill_pid, log_tail, pid_alive, pid_matches, spawn

CRI = "io.containerd.grpc.v1.cri"


def find_binaries() -> dict:
    found = {
        "containerd": shutil.which("containerd") or ("/usr/bin/containerd" if os.access("/usr/bin/containerd", os.X_OK) else None),
        "ctr": shutil.which("ctr") or ("/usr/bin/ctr" if os.access("/usr/bin/ctr", os.X_OK) else None),
        "shim": shutil.which("containerd-shim-runc-v2"),
        "runc": shutil.which("runc") or ("/usr/sbin/runc" if os.access("/usr/sbin/runc", os.X_OK) else None),
        "busybox": next((p for p in ("/bin/busybox", "/usr/bin/busybox") if os.access(p, os.X_OK)), None),
    }
    missing = [name for name, path in found.items() if not path]
    if missing:
        raise ToolchainMissing(f"containerd toolchain incomplete, missing: {', '.join(missing)} "
                               f"(apt: containerd runc busybox-static). Fix: {TOOLCHAIN_HINT}.")
    return found


def start_time(pid: int) -> int:
    """A process's start time (clock ticks since boot, /proc/PID/stat field 22): with the PID, its identity."""
    with open(f"/proc/{pid}/stat") as handle:
        return int(handle.read().rsplit(")", 1)[1].split()[19])


class Containerd:
    """A private containerd: ``config_file``, ``socket``, ``pidfile``, ``root``, ``state``, ``log_file``, ``pid``.

    The socket lives in a short directory under /tmp (unix socket paths are limited to 107 bytes)."""

    def __init__(self, workdir: Union[str, Path], *, detach: bool = False, short_dir: Optional[Union[str, Path]] = None):
        self.workdir = Path(workdir).resolve()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.detach = detach
        self.bins = find_binaries()
        self.config_file = self.workdir / "config.toml"
        self.pidfile = self.workdir / "containerd.pid"
        self.log_file = self.workdir / "containerd.log"
        self.restart_log = self.workdir / "restarts.log"
        self.root = self.workdir / "root"
        self.state = self.workdir / "state"
        self.rootfs = self.workdir / "rootfs"
        self.short_dir = Path(short_dir) if short_dir else None
        self.proc: Optional[subprocess.Popen] = None
        self.pid: Optional[int] = None

    # ---- paths and config
    def _ensure_short_dir(self) -> Path:
        if self.short_dir is None:
            self.short_dir = Path(tempfile.mkdtemp(prefix="gcuc-", dir="/tmp"))
        self.short_dir.mkdir(parents=True, exist_ok=True)
        return self.short_dir

    @property
    def socket(self) -> Path:
        return self._ensure_short_dir() / "containerd.sock"

    @property
    def address(self) -> str:
        return str(self.socket)

    @property
    def runc_path(self) -> str:
        return self.bins["runc"]

    def essentials(self) -> str:
        """The lines every config of this instance needs: version, root, state (top level; no table yet)."""
        return f'version = 2\nroot = "{self.root}"\nstate = "{self.state}"\n'

    def grpc_table(self) -> str:
        return f'\n[grpc]\n  address = "{self.socket}"\n'

    def cri_table(self) -> str:
        """A CRI section with settings that differ from containerd's defaults, as a real node's would."""
        return (
            f'\n[plugins."{CRI}"]\n'
            '  sandbox_image = "gcu-test/pause:3.9"\n'
            "  restrict_oom_score_adj = true\n"
            "  disable_apparmor = true\n"
            "  max_container_log_line_size = 8192\n"
            f'  [plugins."{CRI}".containerd]\n'
            '    snapshotter = "native"\n'
            f'  [plugins."{CRI}".cni]\n'
            '    bin_dir = "/usr/lib/cni"\n'
            f'    conf_dir = "{self.workdir / "cni"}"\n'
            f'  [plugins."{CRI}".registry.mirrors."registry.local"]\n'
            '    endpoint = ["http://127.0.0.1:5000"]\n'
        )

    def default_config(self) -> str:
        return "# private containerd for gcu-stack tests\n" + self.essentials() + self.grpc_table() + self.cri_table()

    def write_config(self, text: str) -> bytes:
        data = text.encode()
        self.config_file.write_bytes(data)
        return data

    def restart_command(self) -> list[str]:
        """A `systemctl restart containerd` for this instance (runs the CLI's `restart`)."""
        project = Path(__file__).resolve().parent.parent
        return ["env", f"PYTHONPATH={project}", sys.executable, "-m", "devtools.containerd", "restart", "--state-dir", str(self.workdir)]

    # ---- lifecycle
    def __enter__(self) -> "Containerd":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def start(self, timeout: float = 60.0) -> "Containerd":
        if self.pid and pid_alive(self.pid):
            return self
        for directory in (self.root, self.state, self.workdir / "cni"):
            directory.mkdir(parents=True, exist_ok=True)
        if not self.config_file.exists():
            self.write_config(self.default_config())
        if self.socket.exists():
            self.socket.unlink()
        started = time.monotonic()
        env = {**os.environ, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin:" + os.environ.get("PATH", "")}
        # cwd "/": where systemd runs containerd (it resolves relative glob imports there).
        self.proc = spawn([self.bins["containerd"], "--config", self.config_file], self.log_file, detach=self.detach, env=env, cwd=Path("/"))
        self.pid = self.proc.pid
        while True:
            if self.proc.poll() is not None:
                raise self._fail(f"exited during startup (exit code {self.proc.returncode})")
            if self.socket.exists() and self.ctr("version", check=False, timeout=10).returncode == 0:
                break
            if time.monotonic() - started > timeout:
                error = self._fail("did not answer on its socket in time")
                self.stop()
                raise error
            time.sleep(0.05)
        self.startup_seconds = time.monotonic() - started
        self.pidfile.write_text(f"{self.pid}\n")
        self._write_state()
        return self

    def _fail(self, why: str) -> ComponentFailed:
        return ComponentFailed(f"containerd {why}\n--- last lines of {self.log_file} ---\n{log_tail(self.log_file, 40)}")

    def running(self) -> bool:
        if self.pid is None:
            return False
        if self.proc is not None:
            return self.proc.poll() is None
        return pid_matches(self.pid, self.bins["containerd"])

    def daemon_pid(self) -> Optional[int]:
        try:
            return int(self.pidfile.read_text().strip())
        except (OSError, ValueError):
            return self.pid

    def _terminate(self, timeout: float = 20.0) -> None:
        """SIGTERM containerd alone (never its shims: they keep the containers) and wait for it to exit."""
        pid = self.daemon_pid()
        if pid is None or not pid_matches(pid, self.bins["containerd"]):
            return
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while pid_alive(pid) and time.monotonic() < deadline:
            if self.proc is not None and self.proc.pid == pid:
                self.proc.poll()
            time.sleep(0.02)
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)
        if self.proc is not None:
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:  # pragma: no cover
                pass

    def restart(self) -> dict:
        """Stop and start on the same socket; running containers stay. Logged to restarts.log."""
        old = self.daemon_pid()
        started = time.monotonic()
        self._terminate()
        self.pid, self.proc = None, None
        self.start()
        record = {"time": time.time(), "oldPid": old, "newPid": self.pid, "seconds": round(time.monotonic() - started, 3)}
        with open(self.restart_log, "a") as handle:
            handle.write(json.dumps(record) + "\n")
        return record

    def restarts(self) -> list[dict]:
        try:
            return [json.loads(line) for line in self.restart_log.read_text().splitlines() if line.strip()]
        except FileNotFoundError:
            return []

    def stop(self, timeout: float = 20.0) -> None:
        """Kill this instance's containers, stop containerd, kill any shim of ours that is left."""
        if self.running():
            for namespace in self.ctr("namespaces", "ls", "-q", check=False).stdout.split():
                for task in self.ctr("-n", namespace, "tasks", "ls", "-q", check=False).stdout.split():
                    self.remove_container(task, namespace=namespace)
                for container in self.ctr("-n", namespace, "containers", "ls", "-q", check=False).stdout.split():
                    self.ctr("-n", namespace, "containers", "rm", container, check=False)
        self._terminate(timeout)
        if self.pid is not None and self.proc is None:
            kill_pid(self.pid, exe=self.bins["containerd"], timeout=timeout)
        self._kill_leftover_shims()
        self.pid, self.proc = None, None
        if self.short_dir is not None and str(self.short_dir).startswith("/tmp/gcuc-"):
            shutil.rmtree(self.short_dir, ignore_errors=True)
        for stale in (self.workdir / "state.json", self.pidfile):
            if stale.exists():
                stale.unlink()

    def _kill_leftover_shims(self) -> None:
        marker = f"-address\0{self.socket}\0"
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if "containerd-shim" in cmdline and marker in cmdline + "\0":
                try:
                    os.kill(int(entry), signal.SIGKILL)
                except OSError:
                    pass

    # ---- tools
    def ctr(self, *args: str, check: bool = True, timeout: float = 60.0) -> subprocess.CompletedProcess:
        result = subprocess.run([self.bins["ctr"], "-a", str(self.socket), *map(str, args)], capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise RuntimeError(f"ctr {' '.join(map(str, args))} failed ({result.returncode}):\n{result.stderr}")
        return result

    def config_dump(self, config_file: Optional[Path] = None) -> str:
        """`containerd --config F config dump`: the merged configuration containerd would run with."""
        result = subprocess.run([self.bins["containerd"], "--config", str(config_file or self.config_file), "config", "dump"],
                                capture_output=True, text=True, timeout=60, cwd="/")
        if result.returncode != 0:
            raise RuntimeError(f"containerd config dump failed ({result.returncode}):\n{result.stderr}")
        return result.stdout

    def ensure_rootfs(self) -> Path:
        """A static-busybox root filesystem directory for `ctr run --rootfs`."""
        if (self.rootfs / "bin" / "busybox").exists():
            return self.rootfs
        from devtools.dockerd import busybox_rootfs_tar

        tarball = busybox_rootfs_tar(self.bins["busybox"])
        partial = self.workdir / "rootfs.partial"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
        with tarfile.open(tarball) as archive:
            archive.extractall(partial, filter="tar")
        partial.replace(self.rootfs)
        return self.rootfs

    def run_container(self, container_id: str, *command: str, namespace: str = "default") -> int:
        """`ctr run -d --rootfs` a container; returns its init PID."""
        self.ctr("-n", namespace, "run", "-d", "--env", "PATH=/bin:/sbin:/usr/bin:/usr/sbin", "--rootfs", self.ensure_rootfs(), container_id, *command)
        return self.task_pid(container_id, namespace)

    def task_pid(self, container_id: str, namespace: str = "default") -> int:
        for line in self.ctr("-n", namespace, "tasks", "ls").stdout.splitlines()[1:]:
            parts = line.split()
            if parts and parts[0] == container_id:
                return int(parts[1])
        raise RuntimeError(f"no task {container_id} in namespace {namespace}")

    def task_status(self, container_id: str, namespace: str = "default") -> Optional[str]:
        for line in self.ctr("-n", namespace, "tasks", "ls").stdout.splitlines()[1:]:
            parts = line.split()
            if parts and parts[0] == container_id:
                return parts[2]
        return None

    def remove_container(self, container_id: str, namespace: str = "default") -> None:
        self.ctr("-n", namespace, "tasks", "kill", "-s", "SIGKILL", container_id, check=False)
        deadline = time.monotonic() + 10
        while self.task_status(container_id, namespace) not in (None, "STOPPED") and time.monotonic() < deadline:
            time.sleep(0.05)
        self.ctr("-n", namespace, "tasks", "rm", "-f", container_id, check=False)
        self.ctr("-n", namespace, "containers", "rm", container_id, check=False)

    # ---- state (CLI)
    def _write_state(self) -> None:
        state = {"workdir": str(self.workdir), "socket": str(self.socket), "pid": self.pid, "pidfile": str(self.pidfile),
                 "config_file": str(self.config_file), "short_dir": str(self.short_dir), "log_file": str(self.log_file)}
        path = self.workdir / "state.json"
        path.with_suffix(".tmp").write_text(json.dumps(state, indent=2))
        path.with_suffix(".tmp").replace(path)

    @classmethod
    def from_state_dir(cls, state_dir: Union[str, Path]) -> "Containerd":
        state = json.loads((Path(state_dir) / "state.json").read_text())
        daemon = cls(state["workdir"], detach=True, short_dir=state["short_dir"])
        daemon.pid = int(state["pid"])
        return daemon


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.containerd", description="Private real containerd.")
    sub = parser.add_subparsers(dest="cmd", required=True)
    for name in ("up", "down", "status", "restart"):
        sub.add_parser(name).add_argument("--state-dir", required=True)
    args = parser.parse_args(argv)
    state_dir = Path(args.state_dir).resolve()
    has_state = (state_dir / "state.json").exists()
    try:
        if args.cmd == "up":
            if has_state:
                daemon = Containerd.from_state_dir(state_dir)
                if daemon.running():
                    print(daemon.socket)
                    return 0
                daemon.stop()
            daemon = Containerd(state_dir, detach=True).start()
            print(f"containerd up in {daemon.startup_seconds:.1f}s; config {daemon.config_file}; pid {daemon.pid}", file=sys.stderr)
            print(daemon.socket)
            return 0
        if not has_state:
            if args.cmd in ("status", "restart"):
                print(json.dumps({"running": False}))
                return 3
            return 0
        daemon = Containerd.from_state_dir(state_dir)
        if args.cmd == "down":
            daemon.stop()
            return 0
        if args.cmd == "restart":
            print(json.dumps(daemon.restart()))
            return 0
        ok = daemon.running()
        print(json.dumps({"running": ok, "socket": str(daemon.socket), "pid": daemon.pid, "config_file": str(daemon.config_file)}))
        return 0 if ok else 3
    except (ToolchainMissing, ComponentFailed) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2 if isinstance(error, ToolchainMissing) else 1


if __name__ == "__main__":
    sys.exit(main())
