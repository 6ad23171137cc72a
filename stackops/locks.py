"""The locks a stack can be held by, and which of them may be cleared.

Two locks guard a stack:

- the run lock (gcu-stack's own): an exclusive flock(2) on `run_lock_path()` that `scripts/gcu-stack`
  holds (flock(1)) for a whole command (preview then up, refresh, destroy), so a second command on the
  same stack is refused at once instead of after a minutes-long preview. The kernel releases it when
  its holder dies, so it is never stale;
- the backend lock (Pulumi's): a file `.pulumi/locks/<org>/<project>/<stack>/<id>.json` of a file
  backend, written by `pulumi up`, `refresh`, `destroy` and `stack import` and removed when they end.
  A command killed outright leaves it behind, and every later command is refused.

`inspect()` sorts each backend lock: cleared when its holder is provably gone (holders.verdict), else
reported with how to proceed. Only file backends are handled (the embedded and default ones); others
report their own locks.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional
from urllib.parse import unquote, urlparse

from stackops import holders


@dataclass
class BackendLock:
    path: Path
    pid: int
    username: str
    hostname: str
    timestamp: str
    verdict: str = "unknown"
    why: str = ""
    holder: Optional[holders.Holder] = None

    def describe(self) -> str:
        who = self.holder.describe() if self.holder else f"pid {self.pid} on {self.hostname} (user {self.username})"
        return f"{who}, locked at {self.timestamp}"


def file_backend_root(url: str) -> Optional[Path]:
    """The directory of a file:// backend URL, or None for any other backend."""
    if not url or not url.startswith("file://"):
        return None
    parsed = urlparse(url)
    path = unquote(parsed.path)
    if path.startswith("/~"):
        path = os.path.expanduser(path[1:])
    return Path(path)


def project_name(project_dir: Path) -> str:
    import yaml

    return str(yaml.safe_load((Path(project_dir) / "Pulumi.yaml").read_text())["name"])


def lock_dirs(root: Path, project: str, stack: str) -> list[Path]:
    """Where Pulumi keeps this stack's lock files: project-scoped backends, and legacy ones."""
    base = root / ".pulumi" / "locks"
    return [base / "organization" / project / stack, base / stack]


def backend_locks(root: Path, project: str, stack: str) -> list[BackendLock]:
    found = []
    for directory in lock_dirs(root, project, stack):
        for path in sorted(directory.glob("*.json")) if directory.is_dir() else ():
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            found.append(BackendLock(path, int(data.get("pid") or 0), str(data.get("username") or "?"),
                                     str(data.get("hostname") or "?"), str(data.get("timestamp") or "?")))
    return found


def inspect(root: Path, project: str, stack: str) -> list[BackendLock]:
    """Each backend lock of the stack with its verdict (see holders.verdict)."""
    host = holders.Host.here()
    locks = backend_locks(root, project, stack)
    for lock in locks:
        lock.holder = holders.read(root, lock.hostname, lock.pid)
        lock.verdict, lock.why = holders.verdict(lock.holder, host)
    return locks


def clear(lock: BackendLock, root: Path) -> None:
    """Remove one stale lock (and its holder record); only ever called for a provably gone holder."""
    if lock.verdict != "gone":
        raise ValueError(f"refusing to clear a lock whose holder is not provably gone ({lock.why})")
    lock.path.unlink(missing_ok=True)
    if lock.holder is not None:
        holders.remove(root, lock.holder)


def how_to_proceed(lock: BackendLock, stack: str) -> str:
    if lock.verdict == "running":
        return (f"stack {stack} is being changed right now by {lock.describe()}: wait for it to finish, or stop it "
                "(Ctrl-C, or kill -TERM, lets Pulumi release its lock); nothing was started")
    lines = [f"stack {stack} is locked by {lock.describe()}: {lock.why}."]
    lines.append(
        "  If that command is still running, wait for it. If you know it is gone (its machine or container was "
        f"lost), remove its lock: `rm {lock.path}` (or `scripts/gcu-stack pulumi cancel --yes`, which removes every "
        "lock of the stack), then run the command again: gcu-stack resumes what was interrupted."
    )
    return "\n".join(lines)


# ---------------------------------------------------------------------------- the run lock


def run_lock_path(root: Path, project: str, stack: str) -> Path:
    return root / ".gcu-stack" / "run-locks" / f"{project}.{stack}.lock"
