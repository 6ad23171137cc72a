"""Prometheus' own configuration loader, as a small program (devtools/promconfig/main.go, its own module with a
committed go.sum): a test hands it the prometheus.yml the stack renders, as Prometheus would read it.

    result = check(path)   # CompletedProcess: exit 0 and "PATH: N scrape configs: job=path,..." when accepted
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Optional

from devtools import gobuild

SOURCE_DIR = Path(__file__).resolve().parent
BINARY_NAME = "promconfig"


def binary(go: Optional[str] = None, timeout: float = 1800) -> Path:
    return gobuild.binary(SOURCE_DIR, BINARY_NAME, "promconfig", go, timeout)


def check(*paths: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(binary()), *map(str, paths)], capture_output=True, text=True, timeout=60)
