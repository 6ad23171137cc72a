"""Operations on gcu-stack's Pulumi stacks from outside the program: what `scripts/gcu-stack` runs around
`pulumi`, and what a service driving stacks can import.

- `holders.run(root, stack, argv)`: run a pulumi command with a holder record (pid, start time, boot id,
  machine id, pid namespace), which is what proves a lock stale once the command is gone.
- `locks.inspect(root, project, stack)` / `locks.clear(lock, root)` / `locks.how_to_proceed(lock, stack)`: the
  stack's backend locks, each "gone" (cleared), "running", "elsewhere" or "unknown" (reported);
  `locks.run_lock_path(...)`: the file of gcu-stack's own exclusive lock on a stack for a whole command.
- `pending.export / pending_operations / clear`: pending operations a killed command left in the state, dropped
  through export/import with a backup.
- `sidecars.unreadable / set_aside`: the file backend's `.attrs` metadata files a killed command left empty.
- `recover(...)`: all of the above before a command, as `python -m stackops preflight` runs it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from stackops import locks, pending


@dataclass
class Recovery:
    cleared: list = field(default_factory=list)  # messages: locks cleared, pending operations dropped
    blocked: list = field(default_factory=list)  # messages: locks that stop the command, with how to proceed

    @property
    def ok(self) -> bool:
        return not self.blocked


def recover(project_dir: Path, stack: str, backend_url: str, state_dir: Path, env: Optional[dict] = None,
            pulumi: Sequence[str] = ("pulumi",)) -> Recovery:
    """Before a command on `stack`: clear the backend locks whose holders are provably gone, report the others;
    then drop the pending operations a killed command left (only when no lock is left)."""
    result = Recovery()
    root = locks.file_backend_root(backend_url)
    if root is None:
        return result
    project = locks.project_name(project_dir)
    from stackops import holders

    for lock in locks.inspect(root, project, stack):
        if lock.verdict == "gone":
            # Its plugins outlive a killed CLI (own process groups): stopped first, so they act no more.
            left = holders.leftovers(lock.holder) if lock.holder is not None else []
            if left:
                holders.stop(left)
                result.cleared.append(
                    f"stack {stack}: stopped {len(left)} process(es) the killed command left running (its plugins, which "
                    "would have gone on acting on the cluster with no one to report to): "
                    + "; ".join(f"pid {pid} {command.split(' ')[0].rsplit('/', 1)[-1]}" for pid, command in left)
                )
            locks.clear(lock, root)
            result.cleared.append(
                f"stack {stack}: removed the lock left by {lock.describe()}: {lock.why}. What it was doing is resumed below."
            )
        else:
            result.blocked.append(locks.how_to_proceed(lock, stack))
    if result.blocked or not (root / ".pulumi").exists():
        return result
    holders.sweep(root)
    from stackops import sidecars

    for where, went in sidecars.set_aside(sidecars.unreadable(root), root, Path(state_dir) / "state-backups"):
        result.cleared.append(
            f"stack {stack}: the file backend's metadata file {where} was left unreadable by an interrupted command "
            f"(it is written in place; pulumi then fails with \"failed to load checkpoint: EOF\"). Moved to {went}; "
            "the stack's state itself is intact and is read without it."
        )
    state = pending.export(stack, project_dir, env, pulumi) if _has_state(root, project, stack) else {}
    if pending.pending_operations(state):
        dropped, backup = pending.clear(stack, project_dir, Path(state_dir) / "state-backups", env, pulumi)
        result.cleared.append(
            f"stack {stack}: an interrupted command left {len(dropped)} operation(s) pending: "
            + "; ".join(p.describe() for p in dropped)
            + f". Dropped from the state (backup: {backup}); the up that follows looks at each again and creates "
            "what is missing: applying a Kubernetes object that exists takes it over, and gcu-stack's own resources "
            "resume from what they find on the nodes."
        )
    return result


def _has_state(root: Path, project: str, stack: str) -> bool:
    base = root / ".pulumi" / "stacks"
    return any((base / p).exists() for p in (f"{project}/{stack}.json", f"{project}/{stack}.json.gz", f"{stack}.json"))
