"""Real servers for tests: they start their own and fail loudly, never skip, when a binary is missing."""

from __future__ import annotations

import sys
from pathlib import Path

PYTHON = sys.executable
PROJECT_DIR = Path(__file__).resolve().parent.parent


def runtime_props(dockerd, mode: str = "reload", nodes=("gcu-node-1", "gcu-node-2"), runtime: str = "docker", **docker) -> dict:
    """ContainerRuntime inputs for docker nodes through the local transport, against a test dockerd."""
    from components.steps.runtime_activation import ContainerdOptions

    options = {
        "transport": "local",
        "mode": mode,
        # The real runc under another name: containers still start with `enflame` as default.
        "runtimePath": dockerd.runc_path,
        "daemonJson": str(dockerd.config_file),
        "dockerHost": dockerd.host,
        "pidFile": str(dockerd.pidfile),
        "restartCommand": ["env", f"PYTHONPATH={PROJECT_DIR}", PYTHON, str(PROJECT_DIR / "tests" / "dockerd_restart.py"), str(dockerd.workdir)],
        "timeoutSeconds": 60,
        "verifySeconds": 10,
        **docker,
    }
    return {
        "nodes": list(nodes),
        "runtime": runtime,
        "docker": options,
        "containerd": {**ContainerdOptions().model_dump(by_alias=True), "transport": "local"},
        "podImage": "unused",
        "podNamespace": "kube-system",
        "timeoutSeconds": 60,
        "kubeconfig": None,
        "context": None,
    }


def reload_count(dockerd) -> int:
    """How many SIGHUP reloads dockerd has logged."""
    text = Path(dockerd.log_file).read_text(errors="replace")
    return text.count("Got signal to reload configuration")


def write_raw(path, text: str) -> bytes:
    data = text.encode()
    Path(path).write_bytes(data)
    return data


def start_dockerd(state_dir: Path):
    """A detached real dockerd (so a restart command can stop and start it) and its handle."""
    import subprocess

    from devtools.dockerd import Dockerd

    subprocess.run([PYTHON, "-m", "devtools.dockerd", "up", "--state-dir", str(state_dir)], check=True,
                   cwd=PROJECT_DIR, capture_output=True, timeout=300)
    return Dockerd.from_state_dir(state_dir)


def stop_dockerd(state_dir: Path) -> None:
    import subprocess

    subprocess.run([PYTHON, "-m", "devtools.dockerd", "down", "--state-dir", str(state_dir)], cwd=PROJECT_DIR,
                   capture_output=True, timeout=120)


class AuditLog:
    """Requests to one resource in a LocalCluster's audit log (write verbs, one event each) since a mark.

    The API server logs a request's last stage after it has answered, so under load a request made
    before mark() can land after it and one just answered may not be there yet: mark() and events()
    first wait for the log to stop growing, and events() keeps only requests received after the mark."""

    WRITES = ("create", "update", "patch", "delete")

    def __init__(self, cluster):
        self.cluster = cluster
        self.offset = 0
        self.since = ""

    def _settle(self, quiet: float = 0.2, timeout: float = 5.0) -> int:
        import time

        size, deadline = self.cluster.audit_offset(), time.monotonic() + timeout
        while time.monotonic() < deadline:
            time.sleep(quiet)
            now = self.cluster.audit_offset()
            if now == size:
                break
            size = now
        return size

    def mark(self) -> None:
        from datetime import datetime, timezone

        self.offset = self._settle()
        # RFC 3339 with microseconds, as the audit log writes it: later requests compare greater.
        self.since = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    def events(self, resource: str = "nodes", user: str = None) -> list[dict]:
        """`user`: only that user's requests (e.g. "admin", the kubeconfig gcu-stack uses); None: everyone's."""
        self._settle()
        return [
            e for e in self.cluster.audit_events(since=self.offset, user=user)
            if (e.get("objectRef") or {}).get("resource") == resource and e.get("requestReceivedTimestamp", "") >= self.since
        ]

    def writes(self, resource: str = "nodes", user: str = None) -> int:
        return sum(1 for e in self.events(resource, user) if e.get("verb") in self.WRITES)

    def conflicts(self, resource: str = "nodes", user: str = None) -> int:
        return sum(1 for e in self.events(resource, user) if (e.get("responseStatus") or {}).get("code") == 409)
