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
(hash of go.mod, go.sum, the non-test .go files and the Go version). The build uses
the Go toolchain at ``/usr/local/go/bin/go`` (or ``GCU_GO``, or ``go`` on PATH) with
the shared module and build caches under ``~/.cache/gcu-stack/go/`` and
``GOTOOLCHAIN=local GOFLAGS=-mod=mod GONOSUMDB=k8s.io,sigs.k8s.io``.
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import io
import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Optional

from devtools import CACHE_DIR, ToolchainMissing

SOURCE_DIR = Path(__file__).resolve().parent
BINARY_NAME = "gcu-k8s-plugin"
GO_CANDIDATES = ("/usr/local/go/bin/go", "/usr/lib/go/bin/go")
GCU_RESOURCE = "enflame.com/gcu"


class BuildFailed(RuntimeError):
    """`go build` or `go test` of the stand-in plugin failed (message carries go's output)."""


def find_go() -> str:
    for candidate in (os.environ.get("GCU_GO", ""), *GO_CANDIDATES, shutil.which("go") or ""):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise ToolchainMissing(
        "no Go toolchain for the stand-in GCU device plugin (looked at $GCU_GO, "
        f"{', '.join(GO_CANDIDATES)} and PATH). Fix: install Go >= 1.24 at /usr/local/go "
        "(scripts/toolchain/kube.sh needs it too) or set GCU_GO=/path/to/go.")


def go_env(go: str) -> dict:
    go_cache = CACHE_DIR / "go"
    env = dict(os.environ)
    env.update({
        "GOMODCACHE": str(go_cache / "mod"), "GOCACHE": str(go_cache / "build"),
        "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod", "GONOSUMDB": "k8s.io,sigs.k8s.io",
        "CGO_ENABLED": "0", "PATH": f"{Path(go).parent}:{env.get('PATH', '')}",
    })
    return env


def _sources() -> list[Path]:
    return sorted([SOURCE_DIR / "go.mod", SOURCE_DIR / "go.sum",
                   *(p for p in SOURCE_DIR.glob("*.go") if not p.name.endswith("_test.go"))])


def source_hash(go: Optional[str] = None) -> str:
    go = go or find_go()
    h = hashlib.sha256()
    version = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, env=go_env(go)).stdout.strip()
    h.update(version.encode() + b"\0")
    for path in _sources():
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def binary(go: Optional[str] = None, timeout: float = 900) -> Path:
    """The static plugin binary, built on first use (a lock keeps concurrent builds apart)."""
    go = go or find_go()
    out_dir = CACHE_DIR / f"fake-gcu-plugin-{source_hash(go)}"
    out = out_dir / BINARY_NAME
    if out.is_file():
        return out
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if out.is_file():
            return out
        tmp = out_dir / f".{BINARY_NAME}.tmp"
        started = time.monotonic()
        result = subprocess.run([go, "build", "-trimpath", "-ldflags=-s -w", "-o", str(tmp), "."], cwd=SOURCE_DIR,
                                env=go_env(go), capture_output=True, text=True, timeout=timeout)
        if result.returncode != 0:
            raise BuildFailed(f"building the stand-in GCU device plugin in {SOURCE_DIR} failed "
                              f"({go} build, exit {result.returncode}):\n{result.stderr[-4000:]}")
        tmp.replace(out)
        (out_dir / "build-seconds").write_text(f"{time.monotonic() - started:.1f}\n")
    return out


def go_test(go: Optional[str] = None, timeout: float = 900) -> str:
    """`go test` of the plugin (needs root: it creates character devices); its output, or BuildFailed."""
    go = go or find_go()
    result = subprocess.run([go, "test", "-count=1", "-v", "."], cwd=SOURCE_DIR, env=go_env(go),
                            capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise BuildFailed(f"go test in {SOURCE_DIR} failed (exit {result.returncode}):\n"
                          f"{(result.stdout + result.stderr)[-6000:]}")
    return result.stdout


def write_package(path: Path, plugin: Optional[Path] = None) -> Path:
    """A topscloud-style ``gcu-k8s-plugin_*.tar.gz`` holding the stand-in as ``gcu-k8s-plugin``.

    Laid out like the stand-ins of devtools/imagebuild.py (``<name>/bin/<binary>``), so
    images/devicePlugin/Dockerfile's install step finds it. Reproducible bytes.
    """
    data = Path(plugin or binary()).read_bytes()
    top = path.name.split("_", 1)[0]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, compresslevel=1) as gz, \
            tarfile.open(fileobj=gz, mode="w") as archive:
        info = tarfile.TarInfo(f"{top}/bin/{BINARY_NAME}")
        info.size, info.mode, info.mtime = len(data), 0o755, 0
        archive.addfile(info, io.BytesIO(data))
    return path


def build_device_plugin_image(dockerd, workdir: Path, *, base_image: Optional[str] = None,
                              repository: Optional[str] = None, tag: str = "fake-gcu") -> str:
    """Build the project's devicePlugin image (images/devicePlugin/Dockerfile) around the stand-in.

    ``workdir`` plays the project directory (its packages/ and .state/image-context/);
    the base image defaults to the debootstrap bookworm base of devtools/imagebuild.py
    (imported into `dockerd` when missing). Returns the image reference, e.g.
    ``artifact.enflame.cn/enflame_docker_images/enflame/gcu-plugin:fake-gcu``.
    """
    from devtools import imagebuild
    from devtools.rootfs import import_base_image, rootfs_tarball

    workdir = Path(workdir)
    if base_image is None:
        base_image = import_base_image(dockerd, rootfs_tarball(), imagebuild.BASE_IMAGE)
    packages = workdir / "packages"
    write_package(packages / imagebuild.standin_name("devicePlugin"))
    entry = {"build": True, "baseImage": base_image, "tag": tag}
    if repository:   # else the project's default repository for component images
        entry["repository"] = repository
    return imagebuild.build_project_images(dockerd, workdir, packages, {"devicePlugin": entry})["devicePlugin"]


__all__ = ["BINARY_NAME", "GCU_RESOURCE", "BuildFailed", "binary", "build_device_plugin_image", "find_go",
           "go_test", "source_hash", "write_package"]
