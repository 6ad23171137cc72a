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

import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Optional, Sequence, Union

from devtools import TOOLCHAIN_HINT, ToolchainMissing, exit_codes, kill_matching, kill_pid, pid_alive, pid_matches
from devtools.daemon import Daemon, daemon_cli

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


class Containerd(Daemon):
    """A private containerd: ``config_file``, ``socket``, ``pidfile``, ``root``, ``state``, ``log_file``, ``pid``.

    The socket lives in a short directory under /tmp (unix socket paths are limited to 107 bytes)."""

    NAME = "containerd"
    CONFIG = "config.toml"
    PIDFILE = "containerd.pid"
    SOCKET = "containerd.sock"
    SHORT_PREFIX = "gcuc-"
    ADDRESS = "socket"

    def __init__(self, workdir: Union[str, Path], *, detach: bool = False, short_dir: Optional[Union[str, Path]] = None):
        super().__init__(workdir, find_binaries(), detach=detach, short_dir=short_dir)
        self.restart_log = self.workdir / "restarts.log"
        self.root = self.workdir / "root"
        self.state = self.workdir / "state"
        self.rootfs = self.workdir / "rootfs"

    # ---- paths and config
    @property
    def address(self) -> str:
        return str(self.socket)

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

    def machine_roots(self) -> list[Path]:
        # task root filesystems and sandbox mounts
        return [self.root, self.state]

    # ---- lifecycle
    def start(self, timeout: float = 60.0) -> "Containerd":
        if self.pid and pid_alive(self.pid):
            return self
        for directory in (self.root, self.state, self.workdir / "cni"):
            directory.mkdir(parents=True, exist_ok=True)
        if not self.config_file.exists():
            self.write_config(self.default_config())
        if self.socket.exists():
            self.socket.unlink()
        # cwd "/": where systemd runs containerd (it resolves relative glob imports there).
        self._launch([self.bins["containerd"], "--config", self.config_file], cwd=Path("/"), timeout=timeout,
                     interval=0.05, ready=lambda: self.socket.exists() and self.ctr("version", check=False, timeout=10).returncode == 0)
        self.pidfile.write_text(f"{self.pid}\n")
        self._write_state()
        return self

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
        self._forget(self.pidfile)

    def _kill_leftover_shims(self) -> None:
        marker = f"-address\0{self.socket}\0"
        kill_matching(lambda cmdline: "containerd-shim" in cmdline and marker in cmdline + "\0")

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


@exit_codes
def main(argv: Optional[Sequence[str]] = None) -> int:
    return daemon_cli(Containerd, argv, prog="python -m devtools.containerd", description="Private real containerd.",
                      commands={"restart": Containerd.restart})


if __name__ == "__main__":
    sys.exit(main())
