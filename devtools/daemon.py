"""What the private dockerd (:mod:`devtools.dockerd`) and containerd (:mod:`devtools.containerd`) share.

Each is one server process with its own work directory (config, pid file, log, ``state.json``)
and a short directory under /tmp for its socket (unix socket paths are limited to 107 bytes).
A subclass says which binary it runs (``NAME``, a key of ``bins`` and what messages call it),
the names of its config file, pid file (in the work directory) and socket (in the short
directory), the prefix of the short directory (``SHORT_PREFIX``), and the attribute clients
connect to (``ADDRESS``: what ``up`` prints and ``status`` reports); it starts its process
with ``_launch``. ``daemon_cli`` is their command line: ``up``, ``down``, ``status`` (and a
subclass's own commands) on ``--state-dir``, detached.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence, Union

from devtools import ComponentFailed, StartStop, log_tail, nothing_running, pid_matches, spawn, write_json
from devtools.sweep import claim_server, release_server


class Daemon(StartStop):
    NAME = ""
    CONFIG = ""
    PIDFILE = ""
    SOCKET = ""
    SHORT_PREFIX = ""
    ADDRESS = ""

    def __init__(self, workdir: Union[str, Path], bins: dict, *, detach: bool = False,
                 short_dir: Optional[Union[str, Path]] = None):
        self.workdir = Path(workdir).resolve()
        self.bins = bins
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.detach = detach
        self.config_file = self.workdir / self.CONFIG
        self.pidfile = self.workdir / self.PIDFILE
        self.log_file = self.workdir / f"{self.NAME}.log"
        self.short_dir = Path(short_dir) if short_dir else None
        self.proc = None
        self.pid: Optional[int] = None

    def _ensure_short_dir(self) -> Path:
        if self.short_dir is None:
            self.short_dir = Path(tempfile.mkdtemp(prefix=self.SHORT_PREFIX, dir="/tmp"))
        self.short_dir.mkdir(parents=True, exist_ok=True)
        return self.short_dir

    @property
    def socket(self) -> Path:
        return self._ensure_short_dir() / self.SOCKET

    @property
    def runc_path(self) -> str:
        return self.bins["runc"]

    # ---- lifecycle
    def _launch(self, argv: Sequence[Any], *, ready: Callable[[], bool], timeout: float, interval: float,
                cwd: Optional[Path] = None) -> None:
        """Spawn the server and wait until ready() (its socket answers); it is stopped again when it does
        not in `timeout` seconds, and ComponentFailed carries the tail of its log."""
        started = time.monotonic()
        # The system's directories first: the server finds its helpers there (containerd, runc, shims).
        env = {**os.environ, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin:" + os.environ.get("PATH", "")}
        self.proc = spawn(argv, self.log_file, detach=self.detach, env=env, cwd=cwd)
        self.pid = self.proc.pid
        # if this server is killed rather than stopped, the next run's sweep finds what it mounted by this record
        claim_server(self.NAME, self.workdir, self.pid, self.machine_roots(), self.short_dir)
        while True:
            if self.proc.poll() is not None:
                raise self._fail(f"exited during startup (exit code {self.proc.returncode})")
            if ready():
                break
            if time.monotonic() - started > timeout:
                error = self._fail("did not answer on its socket in time")
                self.stop()
                raise error
            time.sleep(interval)
        self.startup_seconds = time.monotonic() - started

    def machine_roots(self) -> list[Path]:
        """Directories the server makes mounts in, on this machine (devtools.sweep unmounts them if it is killed)."""
        return []

    def _fail(self, why: str) -> ComponentFailed:
        return ComponentFailed(f"{self.NAME} {why}\n--- last lines of {self.log_file} ---\n{log_tail(self.log_file, 40)}")

    def running(self) -> bool:
        if self.pid is None:
            return False
        if self.proc is not None:
            return self.proc.poll() is None
        return pid_matches(self.pid, self.bins[self.NAME])

    def _forget(self, *stale: Path) -> None:
        """After a stop: no process, no short directory of ours, no state file (nor the `stale` files)."""
        self.pid, self.proc = None, None
        release_server(self.NAME, self.workdir)
        if self.short_dir is not None and str(self.short_dir).startswith(f"/tmp/{self.SHORT_PREFIX}"):
            shutil.rmtree(self.short_dir, ignore_errors=True)
        for path in (self.workdir / "state.json", *stale):
            path.unlink(missing_ok=True)

    # ---- state (CLI)
    def _write_state(self) -> None:
        write_json(self.workdir / "state.json", {
            "workdir": str(self.workdir), self.ADDRESS: str(getattr(self, self.ADDRESS)), "pid": self.pid,
            "pidfile": str(self.pidfile), "config_file": str(self.config_file), "short_dir": str(self.short_dir),
            "log_file": str(self.log_file), self.NAME: self.bins[self.NAME],
        })

    @classmethod
    def from_state_dir(cls, state_dir: Union[str, Path]):
        state = json.loads((Path(state_dir) / "state.json").read_text())
        daemon = cls(state["workdir"], detach=True, short_dir=state["short_dir"])
        daemon.pid = int(state["pid"])
        return daemon

    def status(self) -> dict:
        return {"running": self.running(), self.ADDRESS: str(getattr(self, self.ADDRESS)), "pid": self.pid,
                "config_file": str(self.config_file)}

    def up_message(self) -> str:
        """What `up` says on stderr once the server answers (a subclass may say more)."""
        return f"{self.NAME} up in {self.startup_seconds:.1f}s; config {self.config_file}; pid {self.pid}"


def daemon_cli(cls: type, argv: Optional[Sequence[str]], *, prog: str, description: str,
               commands: Optional[Mapping[str, Callable[[Any], dict]]] = None,
               up_options: Callable[[argparse.ArgumentParser], Any] = lambda parser: None,
               after_up: Callable[[Any, argparse.Namespace], Any] = lambda daemon, args: None) -> int:
    """up (prints the address; a running one is kept), down, status (exit 3 when not running) and
    `commands` (each prints its result as JSON) of a Daemon subclass on --state-dir."""
    commands = commands or {}
    parser = argparse.ArgumentParser(prog=prog, description=description)
    sub = parser.add_subparsers(dest="cmd", required=True)
    for name in ("up", "down", "status", *commands):
        command = sub.add_parser(name)
        command.add_argument("--state-dir", required=True)
        if name == "up":
            up_options(command)
    args = parser.parse_args(argv)
    state_dir = Path(args.state_dir).resolve()
    has_state = (state_dir / "state.json").exists()
    if args.cmd == "up":
        if has_state:
            daemon = cls.from_state_dir(state_dir)
            if daemon.running():
                print(getattr(daemon, cls.ADDRESS))
                return 0
            daemon.stop()
        daemon = cls(state_dir, detach=True).start()
        after_up(daemon, args)
        print(daemon.up_message(), file=sys.stderr)
        print(getattr(daemon, cls.ADDRESS))
        return 0
    if not has_state:
        return nothing_running(args.cmd)
    daemon = cls.from_state_dir(state_dir)
    if args.cmd == "down":
        daemon.stop()
        return 0
    if args.cmd in commands:
        print(json.dumps(commands[args.cmd](daemon)))
        return 0
    status = daemon.status()
    print(json.dumps(status))
    return 0 if status["running"] else 3
