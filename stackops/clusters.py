"""The cluster a stack recorded (its ClusterGuard), checked from the command line before refresh and destroy.

The providers refuse another cluster themselves; this check comes first so that a `refresh`, whose reads
run all at once, reads nothing from another cluster, and so that the embedded stacks, whose cluster is new
after each `local-down`, start over with it instead of being refused.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Optional, Sequence

from stackops import pending

GUARD_TYPE = "pulumi-python:dynamic/gcu:ClusterGuard"


def recorded(state: dict) -> Optional[dict]:
    """The `cluster` guard's outputs (uid, server, kubeconfig, context), or None for a stack that recorded none."""
    for resource in (state.get("deployment") or {}).get("resources") or []:
        if resource.get("type") == GUARD_TYPE and resource.get("urn", "").endswith("::cluster"):
            return resource.get("outputs") or {}
    return None


def live(kubeconfig: Optional[str], context: Optional[str]) -> dict:
    from components.providers.cluster_guard import live_identity

    return live_identity({"kubeconfig": kubeconfig, "context": context})


def check(project_dir: Path, stack: str, env: Optional[dict] = None, pulumi: Sequence[str] = ("pulumi",)) -> Optional[str]:
    """None when the stack's pinned kubeconfig and context still reach its recorded cluster; else why not."""
    from components.providers.cluster import ClusterMismatch, verify

    try:
        found = recorded(pending.export(stack, project_dir, env, pulumi))
    except RuntimeError:
        return None  # no such stack: nothing recorded
    if not found or not found.get("uid") or not isinstance(found.get("kubeconfig"), (str, type(None))):
        return None  # nothing recorded yet, or an inline kubeconfig (a secret): the providers check it
    try:
        verify(live(found.get("kubeconfig"), found.get("context")), found, found.get("context"))
    except ClusterMismatch as error:
        return str(error)
    return None


def reset_if_rebuilt(project_dir: Path, stack: str, kubeconfig: str, env: Optional[dict] = None,
                     pulumi: Sequence[str] = ("pulumi",)) -> Optional[str]:
    """For an embedded stack: drop its state when its cluster was rebuilt since (what it held is gone with the old
    cluster); a message saying so, or None."""
    try:
        state = pending.export(stack, project_dir, env, pulumi)
    except RuntimeError:
        return None  # no such stack yet
    found = recorded(state)
    if not found or not found.get("uid"):
        return None
    now = live(kubeconfig, None)
    if now["uid"] == found["uid"]:
        return None
    done = subprocess.run([*pulumi, "stack", "rm", "--force", "--yes", "--preserve-config", "--stack", stack],
                          cwd=project_dir, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"pulumi stack rm --stack {stack} failed: {done.stderr.strip()[-2000:]}")
    return (f"stack {stack}: the embedded cluster was rebuilt since its last up (kube-system UID {found['uid']} is now "
            f"{now['uid']}); its state, which described the old cluster, was dropped and the stack starts over")
