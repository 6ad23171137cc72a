"""What killed runs left on this machine, removed before the next one uses it.

A session's processes are killed outright before CI runs, and a test run can be stopped midway: what they
made on the machine stays. The next run finds it by machine-wide names (the killed run worked in another
folder) and removes only what no live process owns:

* **real nodes** (network namespaces ``gcurn-*``, host links ``grn*``, the ``/run/netns`` mount, cgroups):
  :func:`devtools.realnode.sweep_stale`, by the owner record each node keeps while it starts and runs;
* **servers of devtools.daemon** (private dockerd and containerd): each keeps an owner record under
  ``CACHE_DIR/servers`` naming its process and the directories it mounts in (dockerd bind-mounts its data
  root onto itself and its network namespace into its exec root); a dead server's mounts are unmounted, the
  processes that still name its directories (shims) killed, its short directory under /tmp removed;
* **etcd data** in ``/dev/shm/gcu-etcd-*`` (about 124 MB of memory each) that no running etcd uses.

``scripts/test.sh`` runs it before the tests (``python -m devtools.sweep``), ``scripts/gcu-stack`` before it
starts an embedded cluster, and the fixtures that compare the machine before and after run it before they
take their "before".
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

from devtools import CACHE_DIR, exit_codes, kill_matching, mounts_under, owner, owner_alive, pid_cmdline, write_json

SERVERS = CACHE_DIR / "servers"      # <server>-<hash of its workdir>.json: its owner record and roots
ETCD_TMPFS_PREFIX = "/dev/shm/gcu-etcd-"
SHORT_DIR_ROOT = "/tmp/"             # the only place a server's short directory may be removed from


def _server_record(name: str, workdir: Path) -> Path:
    return SERVERS / f"{name}-{hashlib.sha1(str(workdir).encode()).hexdigest()[:12]}.json"


def claim_server(name: str, workdir: Path, pid: int, roots: Iterable[Path], short_dir: Optional[Path]) -> None:
    """Record that process `pid` (a server `name` working in `workdir`) mounts things under `roots`."""
    write_json(_server_record(name, workdir), {**owner(pid), "name": name, "workdir": str(workdir),
                                               "roots": [str(r) for r in roots],
                                               "short_dir": str(short_dir) if short_dir else None})


def release_server(name: str, workdir: Path) -> None:
    """The server stopped the usual way: nothing of it to sweep."""
    _server_record(name, workdir).unlink(missing_ok=True)


def _unmount_under(roots: Sequence[str]) -> list[str]:
    """Lazily unmount every mount under `roots`, deepest first; returns the mount points."""
    return [m for m in mounts_under(roots) if subprocess.run(["umount", "-l", m], capture_output=True).returncode == 0]


def sweep_servers(min_age: float, log: Callable[[str], None] = print) -> list[str]:
    """Mounts, processes and short directories of servers whose process is gone, recorded more than `min_age`
    seconds ago (a server being restarted records its new process within seconds); returns what was removed."""
    removed = []
    for path in sorted(SERVERS.glob("*.json")):
        try:
            record = json.loads(path.read_text())
            age = time.time() - path.stat().st_mtime
        except (OSError, ValueError):
            continue
        if owner_alive(record) or age < min_age:
            continue
        roots = [r for r in record.get("roots", []) if r]
        short = record.get("short_dir")
        if short:
            roots.append(short)
        mounts = _unmount_under(roots)
        # its containerd and shims, if they outlived it (they name the short directory on their command line)
        if short:
            kill_matching(lambda cmd, marker=short.rstrip("/") + "/": marker in cmd)
        if short and short.startswith(SHORT_DIR_ROOT) and os.path.isdir(short) \
                and not mounts_under([short]):
            shutil.rmtree(short, ignore_errors=True)
        path.unlink(missing_ok=True)
        what = f"{record.get('name')} of {record.get('workdir')} (pid {record.get('pid')} is gone)"
        log(f"sweep: removed what the killed {what} left: {len(mounts)} mount(s)" + (f", {short}" if short else ""))
        removed.append(what)
    return removed


def _etcd_data_dirs_in_use() -> set[str]:
    used = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            cmd = pid_cmdline(int(entry))
            if cmd and os.path.basename(cmd[0]) == "etcd" and "--data-dir" in cmd[:-1]:
                used.add(os.path.normpath(cmd[cmd.index("--data-dir") + 1]))
    return used


def sweep_etcd_tmpfs(min_age: float, log: Callable[[str], None] = print) -> list[str]:
    """etcd data directories in /dev/shm that no running etcd uses and older than `min_age` seconds (a cluster
    starting now makes its directory a moment before its etcd)."""
    removed = []
    parent, prefix = os.path.split(ETCD_TMPFS_PREFIX)
    try:
        names = [n for n in os.listdir(parent) if n.startswith(prefix)]
    except OSError:
        return removed
    used = _etcd_data_dirs_in_use()
    for name in names:
        path = os.path.join(parent, name)
        try:
            age = time.time() - os.stat(path).st_mtime
        except OSError:
            continue
        if path in used or age < min_age:
            continue
        shutil.rmtree(path, ignore_errors=True)
        log(f"sweep: removed {path} (etcd data no running etcd uses, {age:.0f}s old)")
        removed.append(path)
    return removed


def sweep_machine(min_age: float = 60.0, log: Callable[[str], None] = print) -> list[str]:
    """Everything above; returns what was removed. `min_age` protects what is being made right now by a process
    that has not recorded itself yet (0 when nothing of ours can be starting, e.g. before a test run)."""
    from devtools import realnode

    removed = [f"real node {n}" for n in realnode.sweep_stale(min_age, log=log)]
    removed += sweep_servers(min_age, log)
    removed += sweep_etcd_tmpfs(min_age, log)
    return removed


@exit_codes
def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m devtools.sweep",
                                 description="Remove what killed runs left on this machine (nothing a live process owns).")
    ap.add_argument("--min-age", type=float, default=60.0,
                    help="leave what is younger than this many seconds and not yet recorded (default 60)")
    a = ap.parse_args(argv)
    removed = sweep_machine(a.min_age, log=lambda m: print(m, file=sys.stderr))
    print(f"sweep: {len(removed)} leftover(s) of killed runs removed", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
