"""The stand-in GCU device plugin: build it, package it, put it in the project's device-plugin image.

The Go sources next to this file (``main.go``, its own module with a committed
``go.sum``) make a static binary (``CGO_ENABLED=0``) that acts as Enflame's
``gcu-k8s-plugin``: it advertises the GCUs it finds as ``/dev/gcu<N>`` (on a test node,
character devices cloned from /dev/null that devtools/realnode.py puts in the node's own
/dev) under ``--resource-name`` and allocates them to containers as ``/dev/gcu<N>``.
``gcu-k8s-plugin --help`` lists its flags and GCU_FAKE_* variables (e.g.
``GCU_FAKE_DEVICE_DIR``: look there instead, creating fake devices when there are none).

    path = binary()                                  # built once per source hash, cached
    image = build_device_plugin_image(dockerd, workdir)   # images/devicePlugin/Dockerfile, that binary inside

The binary is cached under ``~/.cache/gcu-stack/fake-gcu-plugin-<hash>/gcu-k8s-plugin``
(devtools/gobuild.py builds it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from devtools import gobuild
from devtools.gobuild import BuildFailed, find_go

SOURCE_DIR = Path(__file__).resolve().parent
BINARY_NAME = "gcu-k8s-plugin"
GCUSHARE_BINARY_NAME = "gcushare-device-plugin"   # components/catalog/gcushare_plugin.py's ImageDef binary
GCU_RESOURCE = "enflame.com/gcu"


def source_hash(go: Optional[str] = None) -> str:
    return gobuild.source_hash(SOURCE_DIR, go)


def binary(go: Optional[str] = None, timeout: float = 900) -> Path:
    """The static plugin binary, built on first use and cached (devtools/gobuild.py)."""
    return gobuild.binary(SOURCE_DIR, BINARY_NAME, "fake-gcu-plugin", go, timeout)


def go_test(go: Optional[str] = None, timeout: float = 900) -> str:
    """`go test` of the plugin (needs root: it creates character devices); its output, or BuildFailed."""
    return gobuild.go_test(SOURCE_DIR, go, timeout)


def write_package(path: Path, plugin: Optional[Path] = None) -> Path:
    """A topscloud-style ``gcu-k8s-plugin_*.tar.gz`` holding the stand-in as ``gcu-k8s-plugin``
    (images/devicePlugin/Dockerfile's install step finds it)."""
    return gobuild.write_package(path, plugin or binary(), BINARY_NAME)


def build_device_plugin_image(dockerd, workdir: Path, *, base_image: Optional[str] = None,
                              repository: Optional[str] = None, tag: str = "fake-gcu") -> str:
    """Build the project's devicePlugin image around the stand-in (devtools/imagebuild.py build_program_image).
    Returns the image reference, e.g. ``artifact.enflame.cn/enflame_docker_images/enflame/gcu-plugin:fake-gcu``."""
    from devtools import imagebuild

    return imagebuild.build_program_image(dockerd, workdir, "devicePlugin", write_package, base_image=base_image,
                                          repository=repository, tag=tag)


def build_gcushare_plugin_image(dockerd, workdir: Path, *, base_image: Optional[str] = None,
                                repository: Optional[str] = None, tag: str = "fake-gcu") -> str:
    """The project's gcusharePlugin image around the same stand-in, installed as ``gcushare-device-plugin``: the
    DaemonSet's ``--memory-unit`` makes it advertise each GCU's memory in shares (see main.go)."""
    from devtools import imagebuild

    return imagebuild.build_program_image(
        dockerd, workdir, "gcusharePlugin", lambda path: gobuild.write_package(path, binary(), GCUSHARE_BINARY_NAME),
        base_image=base_image, repository=repository, tag=tag)


__all__ = ["BINARY_NAME", "GCU_RESOURCE", "GCUSHARE_BINARY_NAME", "BuildFailed", "binary", "build_device_plugin_image",
           "build_gcushare_plugin_image", "find_go",
           "go_test", "source_hash", "write_package"]
