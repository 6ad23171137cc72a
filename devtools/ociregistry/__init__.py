"""A container registry for the real-node tests to pull from: go-containerregistry's, built from its Go module.

Real nodes import their images (nothing is pulled from the internet here). Where a test must see a real pull — the
driver's pre-pull before a rollout's first cordon — the image is served instead: `Registry` listens on this machine
(every address, a free port), each real node's containerd reaches it through the node's veth (RealNode.mirror writes
the hosts.toml that sends the image's registry name there), and `push` fills it from a dockerd's image.

    with Registry(workdir) as registry:
        registry.push(dockerd, "gcu-e2e.local/gcu/gcu-driver:2.0")
        node.mirror("gcu-e2e.local", registry.port)
"""

from __future__ import annotations

import select
import subprocess
from pathlib import Path
from typing import Any, Optional

from devtools import gobuild

SOURCE_DIR = Path(__file__).resolve().parent
BINARY_NAME = "ociregistry"
START_SECONDS = 30.0


def binary(go: Optional[str] = None, timeout: float = 900) -> Path:
    return gobuild.binary(SOURCE_DIR, BINARY_NAME, "ociregistry", go, timeout)


def repository_path(ref: str) -> str:
    """`ref` without its registry name: `gcu-e2e.local/gcu/gcu-driver:2.0` → `gcu/gcu-driver:2.0`."""
    head, _, rest = ref.partition("/")
    return rest if rest and ("." in head or ":" in head or head == "localhost") else ref


class Registry:
    """The registry process while the block runs (its log: `<workdir>/ociregistry.log`); `port` once started."""

    def __init__(self, workdir: Path):
        self.workdir = Path(workdir)
        self.port = 0
        self._proc: Optional[subprocess.Popen] = None

    @property
    def log_path(self) -> Path:
        return self.workdir / "ociregistry.log"

    def __enter__(self) -> "Registry":
        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            # Every address: a real node reaches this machine through its own veth's address, not loopback.
            self._proc = subprocess.Popen([str(binary()), "serve", "-listen", "0.0.0.0:0"], stdout=subprocess.PIPE,
                                          stderr=log, start_new_session=True)
        assert self._proc.stdout is not None
        ready, _, _ = select.select([self._proc.stdout], [], [], START_SECONDS)
        line = self._proc.stdout.readline().decode().strip() if ready else ""
        if not line:
            self.__exit__()
            raise RuntimeError(f"the registry did not start in {START_SECONDS:.0f} s; its log: {self.log_path}")
        self.port = int(line.rsplit(":", 1)[1])
        return self

    def __exit__(self, *_exc: Any) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(10)

    def push(self, dockerd: Any, ref: str) -> str:
        """Push the dockerd's image `ref` here, under the same repository path; returns where it went."""
        archive = self.workdir / (repository_path(ref).replace("/", "_").replace(":", "_") + ".tar")
        dockerd.docker("save", "-o", str(archive), ref, timeout=600)
        target = f"127.0.0.1:{self.port}/{repository_path(ref)}"
        result = subprocess.run([str(binary()), "push", str(archive), target], capture_output=True, text=True, timeout=300)
        archive.unlink(missing_ok=True)
        if result.returncode != 0:
            raise RuntimeError(f"pushing {ref} to {target} failed: {result.stderr.strip()[-2000:]}")
        return target
