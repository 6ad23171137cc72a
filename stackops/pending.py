"""Operations a killed Pulumi command left pending in the stack's state, and clearing them.

When `pulumi up` dies in the middle of a step, the engine's checkpoint keeps the step as a pending
operation (`pending_operations`: creating, updating, deleting…). The next `up` warns about them and
goes on; it drops pending updates and deletes once it has looked at those resources again, but keeps
pending creates until someone says whether they happened (`pulumi refresh --clear-pending-creates`,
or an export/import of the state: Pulumi's "interrupted updates" recovery).

For this program a pending create is safe to drop: the next `up` creates the resource again, and
every create here is idempotent — Kubernetes objects are applied server-side (an object that already
exists is taken over, not duplicated) and gcu-stack's bundled resources reconcile what they find on
the nodes (labels, a rollout that resumes from the node's recorded state). `clear()` does that through
`pulumi stack export` and `pulumi stack import` (which drops pending operations), keeping the export as
a backup, and says what it dropped.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence


@dataclass
class Pending:
    type: str  # creating, updating, deleting, reading, importing
    urn: str

    def describe(self) -> str:
        name = self.urn.split("::")[-1]
        kind = self.urn.split("::")[-2].split("$")[-1]
        return f"{kind} {name}, interrupted while {self.type}"


def _pulumi(pulumi: Sequence[str], args: Sequence[str], cwd: Path, env: Optional[dict]) -> subprocess.CompletedProcess:
    return subprocess.run([*pulumi, *args], cwd=cwd, env=env, capture_output=True, text=True)


def export(stack: str, cwd: Path, env: Optional[dict] = None, pulumi: Sequence[str] = ("pulumi",)) -> dict:
    done = _pulumi(pulumi, ["stack", "export", "--stack", stack], cwd, env)
    if done.returncode != 0:
        raise RuntimeError(f"pulumi stack export --stack {stack} failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout or "{}")


def pending_operations(state: dict) -> list[Pending]:
    deployment = state.get("deployment") or {}
    return [Pending(str(op.get("type")), str((op.get("resource") or {}).get("urn")))
            for op in deployment.get("pending_operations") or []]


def clear(stack: str, cwd: Path, backup_dir: Path, env: Optional[dict] = None,
          pulumi: Sequence[str] = ("pulumi",)) -> tuple[list[Pending], Path]:
    """Drop the stack's pending operations (export, import); (what was dropped, the backup of the state before)."""
    state = export(stack, cwd, env, pulumi)
    dropped = pending_operations(state)
    backup_dir.mkdir(parents=True, exist_ok=True)
    backup = backup_dir / f"{stack}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-before-clearing-pending.json"
    backup.write_text(json.dumps(state, indent=1))
    backup.chmod(0o600)
    if not dropped:
        return [], backup
    done = _pulumi(pulumi, ["stack", "import", "--stack", stack, "--file", str(backup)], cwd, env)
    if done.returncode != 0:
        raise RuntimeError(f"pulumi stack import --stack {stack} failed: {done.stderr.strip()[-2000:]}")
    left = pending_operations(export(stack, cwd, env, pulumi))
    if left:
        raise RuntimeError(f"pending operations still recorded after the import: {', '.join(p.describe() for p in left)}")
    return dropped, backup

