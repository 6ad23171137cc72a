"""The stand-in programs written in Go (devtools/fakegcu, devtools/fakeextender): build, test and package them.

Each is a module of its own (committed go.sum) next to a Python package that names it. Its static binary
(``CGO_ENABLED=0``) is cached under ``~/.cache/gcu-stack/<cache name>-<hash>/<binary>`` (hash of go.mod, go.sum, the
non-test .go files and the Go version), built with the Go toolchain at ``/usr/local/go/bin/go`` (or ``GCU_GO``, or
``go`` on PATH), the shared module and build caches under ``~/.cache/gcu-stack/go/`` and
``GOTOOLCHAIN=local GOFLAGS=-mod=mod GONOSUMDB=k8s.io,sigs.k8s.io``.
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Optional

from devtools import CACHE_DIR, ToolchainMissing

GO_CANDIDATES = ("/usr/local/go/bin/go", "/usr/lib/go/bin/go")


class BuildFailed(RuntimeError):
    """`go build` or `go test` of a stand-in failed (the message carries go's output)."""


def find_go() -> str:
    for candidate in (os.environ.get("GCU_GO", ""), *GO_CANDIDATES, shutil.which("go") or ""):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise ToolchainMissing(
        "no Go toolchain for the stand-in programs (looked at $GCU_GO, "
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


def _sources(source_dir: Path) -> list[Path]:
    return sorted([source_dir / "go.mod", source_dir / "go.sum",
                   *(p for p in source_dir.glob("*.go") if not p.name.endswith("_test.go"))])


def source_hash(source_dir: Path, go: Optional[str] = None) -> str:
    go = go or find_go()
    h = hashlib.sha256()
    version = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, env=go_env(go)).stdout.strip()
    h.update(version.encode() + b"\0")
    for path in _sources(source_dir):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def binary(source_dir: Path, name: str, cache_name: str, go: Optional[str] = None, timeout: float = 900) -> Path:
    """The static binary of the module in `source_dir`, built on first use (a lock keeps concurrent builds apart)."""
    go = go or find_go()
    out_dir = CACHE_DIR / f"{cache_name}-{source_hash(source_dir, go)}"
    out = out_dir / name
    if out.is_file():
        return out
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if out.is_file():
            return out
        tmp = out_dir / f".{name}.tmp"
        started = time.monotonic()
        result = subprocess.run([go, "build", "-trimpath", "-ldflags=-s -w", "-o", str(tmp), "."], cwd=source_dir,
                                env=go_env(go), capture_output=True, text=True, timeout=timeout)
        if result.returncode != 0:
            raise BuildFailed(f"building {name} in {source_dir} failed "
                              f"({go} build, exit {result.returncode}):\n{result.stderr[-4000:]}")
        tmp.replace(out)
        (out_dir / "build-seconds").write_text(f"{time.monotonic() - started:.1f}\n")
    return out


def go_test(source_dir: Path, go: Optional[str] = None, timeout: float = 900) -> str:
    """`go test` of the module in `source_dir`: its output, or BuildFailed."""
    go = go or find_go()
    result = subprocess.run([go, "test", "-count=1", "-v", "."], cwd=source_dir, env=go_env(go),
                            capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise BuildFailed(f"go test in {source_dir} failed (exit {result.returncode}):\n"
                          f"{(result.stdout + result.stderr)[-6000:]}")
    return result.stdout


def module_dir(module: str, version: str, go: Optional[str] = None, timeout: float = 900) -> Path:
    """The files of Go module `module@version` (downloaded into the shared module cache on first use): upstream
    files a test reads as they were published, e.g. a CRD."""
    go = go or find_go()
    result = subprocess.run([go, "mod", "download", "-json", f"{module}@{version}"], cwd=CACHE_DIR, env=go_env(go),
                            capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise BuildFailed(f"go mod download {module}@{version} failed (exit {result.returncode}):\n"
                          f"{(result.stdout + result.stderr)[-3000:]}")
    return Path(json.loads(result.stdout)["Dir"])


def write_package(path: Path, program: Path, name: str) -> Path:
    """A topscloud-style ``<name>_*.tar.gz`` holding `program` as ``<top>/bin/<name>``.

    Laid out like the stand-ins of devtools/imagebuild.py, so the images' install step finds it. Reproducible bytes.
    """
    data = Path(program).read_bytes()
    top = path.name.split("_", 1)[0]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, compresslevel=1) as gz, \
            tarfile.open(fileobj=gz, mode="w") as archive:
        info = tarfile.TarInfo(f"{top}/bin/{name}")
        info.size, info.mode, info.mtime = len(data), 0o755, 0
        archive.addfile(info, io.BytesIO(data))
    return path
