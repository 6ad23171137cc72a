"""The gcu-stack service as an operator runs it (`python -m service serve`, a process of its own on loopback), and
real `curl` calls to it, written as gum's documentation writes them."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional

from pulumi import automation as auto
from realservers import PROJECT_DIR

from devtools import free_port, kill_pid

TOKEN = "e2e-token-0123456789abcdef"


@dataclass
class Service:
    url: str
    token: str
    log: Path
    process: subprocess.Popen
    oplog: Path
    blueprints: Path

    def curl(self, path: str, *args: str, token: Optional[str] = "default", data: Optional[str] = None,
             method: Optional[str] = None) -> tuple[int, Any]:
        """`curl http://<node-ip>:32765<path> [-X METHOD] [-d DATA]` with the bearer token; (status, JSON body)."""
        command = ["curl", "-sS", "--max-time", "600", "-o", "-", "-w", "\n%{http_code}"]
        if method:
            command += ["-X", method]
        if data is not None:
            command += ["-d", data]
        given = self.token if token == "default" else token
        if given is not None:
            command += ["-H", f"Authorization: Bearer {given}"]
        done = subprocess.run([*command, *args, self.url + path], capture_output=True, text=True, timeout=660)
        assert done.returncode == 0, f"curl failed: {done.stderr}\n{self.tail()}"
        body, _, status = done.stdout.rpartition("\n")
        try:
            parsed = json.loads(body) if body.strip() else None
        except ValueError:
            parsed = body
        return int(status), parsed

    def tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def oplog_records(self) -> list[dict]:
        path = self.oplog / "gcu-upgrade-manager.log"
        return [json.loads(line) for line in path.read_text().split("\n") if line] if path.exists() else []

    def wait_for(self, operation_id: str, timeout: float = 600) -> dict:
        """The operation once it has finished (its progress polled as a script would)."""
        deadline = time.monotonic() + timeout
        while True:
            status, body = self.curl(f"/gum/v1/operations/{operation_id}")
            assert status == 200, body
            if body["content"]["phase"] != "running":
                return body["content"]
            assert time.monotonic() < deadline, f"operation {operation_id} still running: {body}\n{self.tail()}"
            time.sleep(1)


def self_signed_certificate(directory: Path, ip: str) -> tuple[Path, Path]:
    """(certificate, key) for https://<ip>, made by openssl; the certificate is its own CA (curl --cacert)."""
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / "tls.crt", directory / "tls.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-keyout", str(key),
                    "-out", str(cert), "-subj", "/CN=gcu-upgrade-manager", "-addext", f"subjectAltName=IP:{ip}"],
                   check=True, capture_output=True, timeout=60)
    return cert, key


def new_stack(root: Path, name: str = "enflame-gcu-resource") -> tuple[auto.Stack, dict]:
    """A stack `name` of a fresh project copy in root/project, on the seed blueprint, in a file backend under `root`
    (no cluster: it is never deployed); the stack and the environment its Pulumi CLI needs."""
    from engine import copy_project, pulumi_env

    copy_project(root / "project")
    (root / "home").mkdir()
    (root / "backend").mkdir()
    env = pulumi_env(root / "home", root / "backend")
    workspace = auto.LocalWorkspace(work_dir=str(root / "project"), pulumi_home=str(root / "home"), env_vars=env)
    stack = auto.Stack.create(name, workspace)
    stack.set_config("gcu-stack:blueprint", auto.ConfigValue("blueprints/gcu-resource.json"))
    return stack, env


@contextmanager
def running_service(root: Path, project_dir: Path, env: dict, *extra: str, own_group: bool = False) -> Iterator[Service]:
    """The service on a free loopback port for the stacks of `project_dir` (`env`: its Pulumi CLI, backend and
    passphrase), with a token file, a blueprints directory and an operations log under `root`; stopped at the end.
    `own_group`: it leads a process group of its own, which a test may kill whole, as a pod's restart does."""
    root.mkdir(parents=True, exist_ok=True)
    token_file = root / "token"
    token_file.write_text(TOKEN + "\n")
    blueprints = root / "blueprints"
    blueprints.mkdir(exist_ok=True)
    oplog = root / "op-log"
    port = free_port()
    log = root / "service.log"
    command = [sys.executable, "-m", "service", "serve", "--listen", f"127.0.0.1:{port}", "--token-file", str(token_file),
               "--blueprints", str(blueprints), "--oplog", str(oplog), "--project-dir", str(project_dir),
               "--state-dir", str(root / "state"), *extra]
    with open(log, "wb") as out:
        process = subprocess.Popen(command, cwd=PROJECT_DIR, env=env, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=own_group)
    service = Service(f"http://127.0.0.1:{port}", TOKEN, log, process, oplog, blueprints)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, f"the service exited ({process.returncode}):\n{service.tail()}"
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                assert time.monotonic() < deadline, f"the service did not listen within 60 s:\n{service.tail()}"
                time.sleep(0.2)
        yield service
    finally:
        kill_pid(process.pid, proc=process, timeout=20)
