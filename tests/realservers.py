"""Real servers for tests: they start their own and fail loudly, never skip, when a binary is missing."""

from __future__ import annotations

import json
import sys
from pathlib import Path

PYTHON = sys.executable
PROJECT_DIR = Path(__file__).resolve().parent.parent


def runtime_props(dockerd, mode: str = "reload", nodes=("gcu-node-1", "gcu-node-2"), **overrides) -> dict:
    """DockerRuntime inputs for the local transport against a test dockerd."""
    props = {
        "nodes": list(nodes),
        "transport": "local",
        "mode": mode,
        # The real runc under another name: containers still start with `enflame` as default.
        "runtimePath": dockerd.runc_path,
        "daemonJson": str(dockerd.config_file),
        "dockerHost": dockerd.host,
        "pidFile": str(dockerd.pidfile),
        "restartCommand": ["env", f"PYTHONPATH={PROJECT_DIR}", PYTHON, str(PROJECT_DIR / "tests" / "dockerd_restart.py"), str(dockerd.workdir)],
        "podImage": "unused",
        "podNamespace": "kube-system",
        "kubeconfig": None,
        "context": None,
        "timeoutSeconds": 60,
        "verifySeconds": 10,
    }
    props.update(overrides)
    return props


def reload_count(dockerd) -> int:
    """How many SIGHUP reloads dockerd has logged."""
    text = Path(dockerd.log_file).read_text(errors="replace")
    return text.count("Got signal to reload configuration")


def write_raw(path, text: str) -> bytes:
    data = text.encode()
    Path(path).write_bytes(data)
    return data


def pretty(value) -> str:
    return json.dumps(value, indent=2)


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
    """Counts requests the API server logged (write verbs, Metadata level) since a mark."""

    WRITES = ("create", "update", "patch", "delete")

    def __init__(self, path: str):
        self.path = Path(path)
        self.offset = 0

    def mark(self) -> None:
        self.offset = self.path.stat().st_size if self.path.exists() else 0

    def events(self, resource: str = "nodes", user: str = None) -> list[dict]:
        with open(self.path, "rb") as handle:
            handle.seek(self.offset)
            lines = handle.read().decode(errors="replace").splitlines()
        found = []
        for line in lines:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if event.get("stage") != "ResponseComplete" or (event.get("objectRef") or {}).get("resource") != resource:
                continue
            if user is None or (event.get("user") or {}).get("username") == user:
                found.append(event)
        return found

    def writes(self, resource: str = "nodes", user: str = None) -> int:
        """Write requests; `user`: only those of that user (e.g. the admin kubeconfig gcu-stack uses)."""
        return sum(1 for e in self.events(resource, user) if e.get("verb") in self.WRITES)

    def conflicts(self, resource: str = "nodes", user: str = None) -> int:
        return sum(1 for e in self.events(resource, user) if (e.get("responseStatus") or {}).get("code") == 409)
