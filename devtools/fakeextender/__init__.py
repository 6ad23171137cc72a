"""The stand-in GCU-share scheduler extender: build it, package it, put it in the project's extender image.

The Go sources next to this file (``main.go``, its own module with a committed ``go.sum``) make a static binary that
acts as Enflame's ``gcushare-scheduler-extender``: kube-scheduler's filter and bind calls for
``enflame.com/gcu-memory``, binding through the API server (see main.go).

    image = build_image(dockerd, workdir)   # images/agent with the binary as the gcushareScheduler package
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from devtools import gobuild

SOURCE_DIR = Path(__file__).resolve().parent
BINARY_NAME = "gcushare-scheduler-extender"
BOUND_BY_ANNOTATION = "gcushare.enflame.com/bound-by"   # main.go's BoundByAnnotation
GCU_INDEX_ANNOTATION = "gcushare.enflame.com/gcu-index"  # main.go's GcuIndexAnnotation


def binary(go: Optional[str] = None, timeout: float = 900) -> Path:
    return gobuild.binary(SOURCE_DIR, BINARY_NAME, "fake-gcushare-extender", go, timeout)


def go_test(go: Optional[str] = None, timeout: float = 900) -> str:
    return gobuild.go_test(SOURCE_DIR, go, timeout)


def write_package(path: Path) -> Path:
    return gobuild.write_package(path, binary(), BINARY_NAME)


def build_image(dockerd, workdir: Path, *, base_image: Optional[str] = None, repository: Optional[str] = None,
                tag: str = "stand-in") -> str:
    """Build the project's gcushareScheduler image around the stand-in; returns its reference."""
    from devtools import imagebuild

    return imagebuild.build_program_image(dockerd, workdir, "gcushareScheduler", write_package, base_image=base_image,
                                          repository=repository, tag=tag)
