"""A private, real dockerd (Debian ``docker.io`` 20.10) for tests.

    dockerd --config-file F --data-root D --exec-root E --pidfile P -H unix://SOCK
            --iptables=false --bridge=none --storage-driver=vfs

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

import argparse
import hashlib
import io
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

from devtools import (CACHE_DIR, TOOLCHAIN_HINT, ComponentFailed, ToolchainMissing, kill_pid, log_tail,
                      pid_alive, pid_matches, spawn)

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


class Dockerd:
    """A private dockerd with its own config file, socket, pidfile, data and exec roots.

    Attributes: ``config_file`` (daemon.json), ``host`` ("unix://.../docker.sock"),
    ``socket``, ``pidfile``, ``data_root``, ``exec_root``, ``log_file``, ``pid``.
    The socket and exec root live in a short directory under /tmp because unix
    socket paths are limited to 107 bytes (containerd's socket sits in the exec root).
    """

    def __init__(self, workdir: Union[str, Path], *, config: Optional[dict] = None,
                 storage_driver: str = "vfs", detach: bool = False, short_dir: Optional[Union[str, Path]] = None):
        self.workdir = Path(workdir).resolve()
        self.initial_config = dict(config or {})
        self.storage_driver = storage_driver
        self.detach = detach
        self.bins = find_binaries()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_file = self.workdir / "daemon.json"
        self.pidfile = self.workdir / "docker.pid"
        self.data_root = self.workdir / "data"
        self.log_file = self.workdir / "dockerd.log"
        self.short_dir = Path(short_dir) if short_dir else None
        self.proc: Optional[subprocess.Popen] = None
        self.pid: Optional[int] = None

    # ---- paths
    def _ensure_short_dir(self) -> Path:
        if self.short_dir is None:
            self.short_dir = Path(tempfile.mkdtemp(prefix="gcud-", dir="/tmp"))
        self.short_dir.mkdir(parents=True, exist_ok=True)
        return self.short_dir

    @property
    def socket(self) -> Path:
        return self._ensure_short_dir() / "docker.sock"

    @property
    def exec_root(self) -> Path:
        return self._ensure_short_dir() / "exec"

    @property
    def host(self) -> str:
        return f"unix://{self.socket}"

    @property
    def runc_path(self) -> str:
        return self.bins["runc"]

    def env(self) -> dict:
        """os.environ + DOCKER_HOST for subprocesses (docker CLI, pulumi-docker)."""
        e = dict(os.environ)
        e["DOCKER_HOST"] = self.host
        return e

    # ---- lifecycle
    def __enter__(self) -> "Dockerd":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

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
        argv = [self.bins["dockerd"], "--config-file", self.config_file,
                "--data-root", self.data_root, "--exec-root", self.exec_root,
                "--pidfile", self.pidfile, "-H", self.host,
                "--iptables=false", "--ip-masq=false", "--bridge=none",
                "--storage-driver", self.storage_driver]
        env = dict(os.environ)
        # dockerd finds containerd/runc via PATH
        env["PATH"] = "/usr/sbin:/usr/bin:/sbin:/bin:" + env.get("PATH", "")
        t0 = time.monotonic()
        self.proc = spawn(argv, self.log_file, detach=self.detach, env=env)
        self.pid = self.proc.pid
        deadline = t0 + timeout
        while True:
            if self.proc.poll() is not None:
                raise self._fail(f"exited during startup (exit code {self.proc.returncode})")
            if self.socket.exists():
                r = self.docker("version", "--format", "{{.Server.Version}}", check=False, timeout=10)
                if r.returncode == 0:
                    self.server_version = r.stdout.strip()
                    break
            if time.monotonic() > deadline:
                err = self._fail("did not answer on its socket in time")
                self.stop()
                raise err
            time.sleep(0.1)
        self.startup_seconds = time.monotonic() - t0
        self._write_state()
        return self

    def _fail(self, why: str) -> ComponentFailed:
        return ComponentFailed(f"dockerd {why}\n--- last lines of {self.log_file} ---\n{log_tail(self.log_file, 40)}")

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
        self.pid, self.proc = None, None
        if self.short_dir is not None and str(self.short_dir).startswith("/tmp/gcud-"):
            shutil.rmtree(self.short_dir, ignore_errors=True)
        st = self.workdir / "state.json"
        if st.exists():
            st.unlink()

    def _kill_leftover_shims(self) -> None:
        """containerd-shim processes of *our* containerd (matched by our exec root) if any survived."""
        if self.short_dir is None:
            return
        marker = str(self.exec_root)
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                cmd = Path(f"/proc/{d}/cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if "containerd" in cmd and marker in cmd:
                try:
                    os.kill(int(d), signal.SIGKILL)
                except OSError:
                    pass

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
                raise RuntimeError("dockerd is not running")
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

    # ---- state (CLI)
    def _write_state(self) -> None:
        st = {"workdir": str(self.workdir), "host": self.host, "pid": self.pid, "pidfile": str(self.pidfile),
              "config_file": str(self.config_file), "short_dir": str(self.short_dir),
              "log_file": str(self.log_file), "dockerd": self.bins["dockerd"]}
        p = self.workdir / "state.json"
        p.with_suffix(".tmp").write_text(json.dumps(st, indent=2))
        p.with_suffix(".tmp").replace(p)

    @classmethod
    def from_state_dir(cls, state_dir: Union[str, Path]) -> "Dockerd":
        st = json.loads((Path(state_dir) / "state.json").read_text())
        d = cls(st["workdir"], detach=True, short_dir=st["short_dir"])
        d.pid = int(st["pid"])
        return d

    def running(self) -> bool:
        if self.pid is None:
            return False
        if self.proc is not None:
            return self.proc.poll() is None
        return pid_matches(self.pid, self.bins["dockerd"])


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m devtools.dockerd", description="Private real dockerd.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("up", "down", "status"):
        p = sub.add_parser(name)
        p.add_argument("--state-dir", required=True)
        if name == "up":
            p.add_argument("--no-base-image", action="store_true", help=f"do not import {BASE_IMAGE}")
    a = ap.parse_args(argv)
    state_dir = Path(a.state_dir).resolve()
    has_state = (state_dir / "state.json").exists()
    try:
        if a.cmd == "up":
            if has_state:
                d = Dockerd.from_state_dir(state_dir)
                if d.running():
                    print(d.host)
                    return 0
                d.stop()
            d = Dockerd(state_dir, detach=True)
            d.start()
            if not a.no_base_image:
                d.ensure_base_image()
            print(f"dockerd {getattr(d, 'server_version', '?')} up in {d.startup_seconds:.1f}s; "
                  f"config {d.config_file}; pidfile {d.pidfile}", file=sys.stderr)
            print(f"export DOCKER_HOST={d.host}", file=sys.stderr)
            print(d.host)
            return 0
        if not has_state:
            if a.cmd == "status":
                print(json.dumps({"running": False}))
                return 3
            return 0
        d = Dockerd.from_state_dir(state_dir)
        if a.cmd == "down":
            d.stop()
            return 0
        ok = d.running()
        print(json.dumps({"running": ok, "host": d.host, "pid": d.pid, "config_file": str(d.config_file)}))
        return 0 if ok else 3
    except (ToolchainMissing, ComponentFailed) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2 if isinstance(e, ToolchainMissing) else 1


if __name__ == "__main__":
    sys.exit(main())
