"""The stand-ins for Nightingale's six parts: build them and their images.

The Go sources next to this file (``main.go``, its own module with a committed ``go.sum``) make one static binary,
``fakenightingale <role>``, that plays each part the stack deploys: it listens where the part's Deployment says and
reaches the other parts through the addresses, Secret and volume the stack gives them (see main.go).

    refs = build_images(dockerd, workdir, base_image, repository, tag)   # <repository>/<part>:<tag>, one a part

Each image is the base image with the binary and ``ENTRYPOINT ["/usr/local/bin/fakenightingale", "<part>"]``, so the
Deployment's args (Prometheus' ``--config.file=...``) reach the stand-in as they would reach the real program.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from devtools import gobuild

SOURCE_DIR = Path(__file__).resolve().parent
BINARY_NAME = "fakenightingale"
PARTS = ("agentd", "mysql", "redis", "prometheus", "nserver", "nwebapi")   # components/catalog/nightingale.py
MYSQL_STATE_FILE = "standin-mysql.json"   # main.go's MysqlStateFile: what the database keeps on its volume


def binary(go: Optional[str] = None, timeout: float = 900) -> Path:
    return gobuild.binary(SOURCE_DIR, BINARY_NAME, "fake-nightingale", go, timeout)


def go_test(go: Optional[str] = None, timeout: float = 900) -> str:
    return gobuild.go_test(SOURCE_DIR, go, timeout)


def build_images(dockerd: Any, workdir: Path, base_image: str, repository: str, tag: str) -> list[str]:
    """Build one image a part into `dockerd`; returns their references."""
    context = Path(workdir) / "nightingale"
    context.mkdir(parents=True, exist_ok=True)
    (context / BINARY_NAME).write_bytes(binary().read_bytes())
    (context / BINARY_NAME).chmod(0o755)
    refs = []
    for part in PARTS:
        (context / f"{part}.Dockerfile").write_text(
            f"FROM {base_image}\nCOPY {BINARY_NAME} /usr/local/bin/{BINARY_NAME}\n"
            f'ENTRYPOINT ["/usr/local/bin/{BINARY_NAME}", "{part}"]\n')
        ref = f"{repository}/{part}:{tag}"
        dockerd.docker("build", "-t", ref, "-f", str(context / f"{part}.Dockerfile"), str(context))
        refs.append(ref)
    return refs
