"""A real S3 API for a Pulumi backend: moto's server (PyPI), that signs nothing for free.

Once set up it enforces AWS authentication: a request must be signed with the access key of the IAM user it made
(allowed s3:*), so a backend reached without those credentials, or with wrong ones, fails as it would on AWS. It
keeps everything in memory: nothing survives it, and a killed one leaves no state for a later run. moto runs from a
venv of its own, cached by version (its botocore pins python-dateutil below what the kubernetes client needs).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from devtools import CACHE_DIR

MOTO = "moto[server,s3,iam]==5.2.5"
MOTO_VENV = CACHE_DIR / "moto" / "5.2.5"
CLIENT = Path(__file__).with_name("s3_client.py")
REGION = "us-east-1"
# IAM's CreateUser, PutUserPolicy and CreateAccessKey go unsigned; every request after them is checked.
SETUP_ACTIONS = 3


def moto_python() -> Path:
    """moto's venv's python, installed from PyPI on first use (complete, or not there at all)."""
    python = MOTO_VENV / "bin" / "python"
    if (MOTO_VENV / ".complete").exists():
        return python
    MOTO_VENV.parent.mkdir(parents=True, exist_ok=True)
    with open(MOTO_VENV.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (MOTO_VENV / ".complete").exists():
            shutil.rmtree(MOTO_VENV, ignore_errors=True)  # what an interrupted install left
            subprocess.run([sys.executable, "-m", "venv", str(MOTO_VENV)], check=True)
            subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", MOTO],
                           check=True)
            (MOTO_VENV / ".complete").touch()
    return python


@dataclass(frozen=True)
class S3Server:
    port: int
    bucket: str
    access_key_id: str
    secret_access_key: str
    log: Path

    def backend_url(self, host: str) -> str:
        """The Pulumi backend URL of the bucket, reached at `host` (plain HTTP, path-style)."""
        return (f"s3://{self.bucket}?endpoint=http://{host}:{self.port}&region={REGION}"
                "&use_path_style=true&disable_https=true")

    def credentials(self) -> dict[str, str]:
        return {"AWS_ACCESS_KEY_ID": self.access_key_id, "AWS_SECRET_ACCESS_KEY": self.secret_access_key}

    def keys(self, secret: str = "") -> dict:
        """{"keys": [...]} of the bucket as the access key reads it (with `secret`, default its own), or {"error": code}."""
        return call(self.port, "keys", self.bucket, self.access_key_id, secret or self.secret_access_key)

    def tail(self, lines: int = 40) -> str:
        try:
            return "--- S3 server:\n" + "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError as error:
            return f"(no moto log: {error})"


def call(port: int, *args: str) -> dict:
    done = subprocess.run([str(moto_python()), str(CLIENT), f"http://127.0.0.1:{port}", *args],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"s3_client.py {args[0]}: {done.stderr}"
    return json.loads(done.stdout)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("0.0.0.0", 0))
        return probe.getsockname()[1]


@contextmanager
def s3_server(root: Path, bucket: str = "gcu-stack-state") -> Iterator[S3Server]:
    """moto's server on every address of this machine (so a real node's pods reach it at the node's host address),
    with `bucket` and the one access key allowed to use it."""
    python = moto_python()
    root.mkdir(parents=True, exist_ok=True)
    log = root / "moto.log"
    port = free_port()
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": str(SETUP_ACTIONS)}
    with log.open("w") as out:
        process = subprocess.Popen([str(python), "-m", "moto.server", "-H", "0.0.0.0", "-p", str(port)],
                                   env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.5).close()
                break
            except OSError:
                assert process.poll() is None, f"moto's server exited:\n{log.read_text()}"
                assert time.monotonic() < deadline, f"moto's server not listening on {port}:\n{log.read_text()}"
                time.sleep(0.2)
        key = call(port, "setup", bucket)
        yield S3Server(port, bucket, key["id"], key["secret"], log)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
