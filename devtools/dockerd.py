"""A private, real dockerd (Debian ``docker.io`` 20.10) for tests.

    dockerd --config-file F --data-root D --exec-root E --pidfile P -H unix://SOCK
            --iptables=false --bridge=none --storage-driver=overlay2 (vfs where overlays do not mount)

Nothing can be pulled here, so ``ensure_base_image()`` makes a base image with
``docker import`` of a static-busybox root filesystem (tarball cached under
``~/.cache/gcu-stack/busybox-<version>/rootfs.tar``).

``config_file`` is the daemon.json the daemon was started with: write
``runtimes`` / ``default-runtime`` into it and send SIGHUP (``reload()``) to
switch the default runtime without restarting containers.

    with Dockerd(tmp_path) as d:
        d.ensure_base_image()
        d.docker("run", "-d", "--network", "none", "gcu-test-base:latest", "sleep", "600")

CLI (detached)::

    python -m devtools.dockerd up --state-dir DIR      # prints DOCKER_HOST value
    python -m devtools.dockerd status --state-dir DIR
    python -m devtools.dockerd down --state-dir DIR
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from devtools import CACHE_DIR, TOOLCHAIN_HINT, ToolchainMissing, exit_codes, kill_matching, kill_pid, overlay_mount_error, pid_alive
from devtools.daemon import Daemon, daemon_cli

BASE_IMAGE = "gcu-test-base:latest"


def _which(*cands: str) -> Optional[str]:
    for c in cands:
        if os.path.isabs(c):
            if os.access(c, os.X_OK):
                return c
        else:
            p = shutil.which(c)
            if p:
                return p
    return None


def find_binaries() -> dict:
    """dockerd, docker CLI (prefer Debian's 20.10 client matching the daemon), runc, busybox."""
    found = {
        "dockerd": _which(os.environ.get("GCU_DOCKERD_BIN", ""), "/usr/sbin/dockerd", "dockerd"),
        "docker": _which(os.environ.get("GCU_DOCKER_BIN", ""), "/usr/bin/docker", "docker"),
        "runc": _which("/usr/sbin/runc", "/usr/bin/runc", "runc"),
        "containerd": _which("/usr/bin/containerd", "containerd"),
        "busybox": _which("/bin/busybox", "/usr/bin/busybox"),
    }
    missing = [k for k, v in found.items() if not v]
    if missing:
        raise ToolchainMissing(f"dockerd toolchain incomplete, missing: {', '.join(missing)} "
                               f"(apt: docker.io runc containerd busybox-static). Fix: {TOOLCHAIN_HINT}.")
    # the busybox must be static to run in an otherwise empty image
    out = subprocess.run(["file", "-b", found["busybox"]], capture_output=True, text=True).stdout \
        if shutil.which("file") else "statically linked"
    if "static" not in out:
        raise ToolchainMissing(f"{found['busybox']} is not statically linked (apt: busybox-static). "
                               f"Fix: {TOOLCHAIN_HINT}.")
    return found


def busybox_rootfs_tar(busybox: str) -> Path:
    """Root filesystem tarball (busybox + applet symlinks + /etc basics), cached."""
    data = Path(busybox).read_bytes()
    banner = subprocess.run([busybox], capture_output=True, text=True).stdout.splitlines()[:1]
    version = "unknown"
    if banner and banner[0].startswith("BusyBox v"):
        version = banner[0].split()[1].lstrip("v")
    digest = hashlib.sha256(data).hexdigest()[:12]
    out = CACHE_DIR / f"busybox-{version}" / f"rootfs-{digest}.tar"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    applets = subprocess.run([busybox, "--list"], capture_output=True, text=True, check=True).stdout.split()
    tmp = out.with_suffix(".tmp")
    with tarfile.open(tmp, "w") as tf:
        def add_dir(name: str, mode: int = 0o755) -> None:
            ti = tarfile.TarInfo(name)
            ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, mode, 0
            tf.addfile(ti)

        def add_file(name: str, content: bytes, mode: int = 0o644) -> None:
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode, ti.mtime = len(content), mode, 0
            tf.addfile(ti, io.BytesIO(content))

        for d in ("bin", "sbin", "usr", "usr/bin", "usr/sbin", "etc", "root", "var", "var/run", "proc",
                  "sys", "dev", "run", "home"):
            add_dir(d)
        add_dir("tmp", 0o1777)
        add_file("bin/busybox", data, 0o755)
        for a in applets:
            if a == "busybox":
                continue
            ti = tarfile.TarInfo(f"bin/{a}")
            ti.type, ti.linkname, ti.mode, ti.mtime = tarfile.SYMTYPE, "busybox", 0o777, 0
            tf.addfile(ti)
        add_file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n")
        add_file("etc/group", b"root:x:0:\nnogroup:x:65534:\n")
        add_file("etc/hosts", b"127.0.0.1 localhost\n")
        add_file("etc/os-release", f'NAME="gcu-test-base"\nID=busybox\nVERSION_ID="{version}"\n'.encode())
    tmp.replace(out)
    return out


class Dockerd(Daemon):
    """A private dockerd with its own config file, socket, pidfile, data and exec roots.

    Attributes: ``config_file`` (daemon.json), ``host`` ("unix://.../docker.sock"),
    ``socket``, ``pidfile``, ``data_root``, ``exec_root``, ``log_file``, ``pid``.
    The socket and exec root live in a short directory under /tmp because unix
    socket paths are limited to 107 bytes (containerd's socket sits in the exec root).
    """

    NAME = "dockerd"
    CONFIG = "daemon.json"
    PIDFILE = "docker.pid"
    SOCKET = "docker.sock"
    SHORT_PREFIX = "gcud-"
    ADDRESS = "host"

    def __init__(self, workdir: Union[str, Path], *, config: Optional[dict] = None,
                 storage_driver: Optional[str] = None, detach: bool = False, short_dir: Optional[Union[str, Path]] = None):
        super().__init__(workdir, find_binaries(), detach=detach, short_dir=short_dir)
        self.initial_config = dict(config or {})
        self.storage_driver = storage_driver
        self.data_root = self.workdir / "data"

    # ---- paths
    @property
    def exec_root(self) -> Path:
        return self._ensure_short_dir() / "exec"

    @property
    def host(self) -> str:
        return f"unix://{self.socket}"

    def env(self) -> dict:
        """os.environ + DOCKER_HOST for subprocesses (docker CLI, pulumi-docker)."""
        e = dict(os.environ)
        e["DOCKER_HOST"] = self.host
        return e

    def machine_roots(self) -> list[Path]:
        # its data root becomes a shared bind mount of itself; containers' shm and overlay mounts live below
        return [self.data_root]

    # ---- lifecycle
    def start(self, timeout: float = 60.0) -> "Dockerd":
        if self.pid and pid_alive(self.pid):
            return self
        self.data_root.mkdir(parents=True, exist_ok=True)
        self.exec_root.mkdir(parents=True, exist_ok=True)
        if not self.config_file.exists() or self.initial_config:
            self.write_config(self.initial_config)
        for stale in (self.socket, self.pidfile):
            if stale.exists():
                stale.unlink()
        if self.storage_driver is None:   # vfs copies the whole root filesystem for every layer and container
            self.storage_driver = "vfs" if overlay_mount_error(self.data_root) else "overlay2"
        argv = [self.bins["dockerd"], "--config-file", self.config_file,
                "--data-root", self.data_root, "--exec-root", self.exec_root,
                "--pidfile", self.pidfile, "-H", self.host,
                "--iptables=false", "--ip-masq=false", "--bridge=none",
                "--storage-driver", self.storage_driver]
        self._launch(argv, ready=self._answers, timeout=timeout, interval=0.1)
        self._write_state()
        return self

    def _answers(self) -> bool:
        if not self.socket.exists():
            return False
        r = self.docker("version", "--format", "{{.Server.Version}}", check=False, timeout=10)
        if r.returncode == 0:
            self.server_version = r.stdout.strip()
        return r.returncode == 0

    def stop(self, timeout: float = 20.0) -> None:
        """Stop dockerd (SIGTERM: it stops its containers and its containerd), clean the short dir.

        Containers are killed, not left running: dockerd's shutdown stops them."""
        if self.pid is not None and self.running():
            # busybox `sleep` as PID 1 ignores SIGTERM, so dockerd's own shutdown would wait
            # the 10s stop timeout per container: kill them first.
            r = self.docker("ps", "-q", check=False, timeout=10)
            ids = r.stdout.split() if r.returncode == 0 else []
            if ids:
                self.docker("kill", *ids, check=False, timeout=30)
        if self.pid is not None:
            kill_pid(self.pid, exe=None if self.proc else self.bins["dockerd"], proc=self.proc, timeout=timeout)
        self._kill_leftover_shims()
        self._forget()

    def _kill_leftover_shims(self) -> None:
        """containerd-shim processes of *our* containerd (matched by our exec root) if any survived."""
        if self.short_dir is None:
            return
        marker = str(self.exec_root)
        kill_matching(lambda cmd: "containerd" in cmd and marker in cmd)

    # ---- config / reload
    def read_config(self) -> dict:
        try:
            return json.loads(self.config_file.read_text() or "{}")
        except FileNotFoundError:
            return {}

    def write_config(self, cfg: dict) -> None:
        tmp = self.config_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(cfg, indent=2) + "\n")
        tmp.replace(self.config_file)

    def update_config(self, **keys: Any) -> dict:
        """Merge keys (use dashes via dict unpacking, e.g. **{"default-runtime": "enflame"})."""
        cfg = self.read_config()
        cfg.update(keys)
        self.write_config(cfg)
        return cfg

    def reload(self) -> None:
        """SIGHUP the daemon (reloads runtimes, default-runtime, ... from config_file)."""
        pid = self.daemon_pid()
        os.kill(pid, signal.SIGHUP)

    def daemon_pid(self) -> int:
        try:
            return int(self.pidfile.read_text().strip())
        except (OSError, ValueError):
            if self.pid is None:
                raise RuntimeError("dockerd is not running") from None
            return self.pid

    # ---- CLI helpers
    def docker(self, *args: str, check: bool = True, input: Optional[Union[str, bytes]] = None,
               timeout: float = 120.0) -> subprocess.CompletedProcess:
        """Run the docker CLI against this daemon."""
        text = not isinstance(input, bytes)
        r = subprocess.run([self.bins["docker"], "-H", self.host, *map(str, args)], input=input,
                           capture_output=True, text=text, timeout=timeout,
                           env={**os.environ, "DOCKER_CONFIG": str(self.workdir / "cli-config")})
        if check and r.returncode != 0:
            raise RuntimeError(f"docker {' '.join(map(str, args))} failed ({r.returncode}):\n{r.stderr}")
        return r

    def info(self) -> dict:
        return json.loads(self.docker("info", "--format", "{{json .}}").stdout)

    def ensure_base_image(self, name: str = BASE_IMAGE) -> str:
        """docker import a static-busybox rootfs as `name` (no-op if present)."""
        if self.docker("image", "inspect", name, check=False).returncode == 0:
            return name
        tar = busybox_rootfs_tar(self.bins["busybox"])
        self.docker("import", "--change", 'CMD ["/bin/sh"]',
                    "--change", "ENV PATH=/usr/sbin:/usr/bin:/sbin:/bin",
                    "--message", "gcu-stack test base (static busybox)", str(tar), name)
        return name

    def up_message(self) -> str:
        return (f"dockerd {getattr(self, 'server_version', '?')} up in {self.startup_seconds:.1f}s; "
                f"config {self.config_file}; pidfile {self.pidfile}\nexport DOCKER_HOST={self.host}")


@exit_codes
def main(argv: Optional[Sequence[str]] = None) -> int:
    return daemon_cli(
        Dockerd, argv, prog="python -m devtools.dockerd", description="Private real dockerd.",
        up_options=lambda up: up.add_argument("--no-base-image", action="store_true", help=f"do not import {BASE_IMAGE}"),
        after_up=lambda daemon, args: None if args.no_base_image else daemon.ensure_base_image(),
    )


if __name__ == "__main__":
    sys.exit(main())
