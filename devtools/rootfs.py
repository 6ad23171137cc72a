"""An offline base image for component-image builds: a Debian root filesystem made with debootstrap.

Nothing can be pulled here, so tests and benchmarks ``docker import`` a root filesystem
that ``debootstrap`` fetched from the Debian package archive (a package registry)::

    tar = rootfs_tarball()                      # cached: ~/.cache/gcu-stack/rootfs-<suite>-<hash>/rootfs.tar
    import_base_image(dockerd, tar, "gcu-test-debian:bookworm")

``debootstrap`` itself comes from apt when it is missing (``ensure_debootstrap``), so a
fresh CI runner needs nothing installed by hand beyond what ``scripts/toolchain/kube.sh``
provides. The tarball is built once per recipe (suite, variant, packages, mirror).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Sequence

from devtools import CACHE_DIR, ToolchainMissing

SUITE = "bookworm"
MIRROR = os.environ.get("GCU_DEBIAN_MIRROR", "http://deb.debian.org/debian")
# python3 and the libraries of the toolkit's node code (components/node/: tomlkit, grpcio with protobuf, the
# kubernetes client; the toolkit's Dockerfile installs the same packages on a base with network); the rest of
# minbase (sh, coreutils, tar, gzip, findutils) is what every component image's install step uses.
PACKAGES = ("python3-minimal", "libpython3.11-stdlib", "python3-tomlkit", "python3-grpcio", "python3-protobuf", "python3-kubernetes",
            "python3-cffi-backend")  # debootstrap does not resolve the virtual package python3-cryptography needs
# Trimmed after debootstrap: not needed to run anything, and every vfs layer copies the lot.
TRIM = ("usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale", "usr/share/zoneinfo",
        "var/cache/apt", "var/lib/apt/lists", "var/cache/debconf/templates.dat-old", "var/log")
RECIPE_VERSION = "3"


def _sudo() -> list[str]:
    return [] if os.geteuid() == 0 else ["sudo", "-n"]


def ensure_debootstrap() -> str:
    """Path of debootstrap, installing Debian's package with apt when it is missing."""
    found = shutil.which("debootstrap") or shutil.which("/usr/sbin/debootstrap")
    if found:
        return found
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = [*_sudo(), "apt-get", "install", "-y", "-qq", "--no-install-recommends", "debootstrap"]
    if subprocess.run(install, env=env, capture_output=True).returncode != 0:
        subprocess.run([*_sudo(), "apt-get", "update", "-qq"], env=env, capture_output=True)
        result = subprocess.run(install, env=env, capture_output=True, text=True)
        if result.returncode != 0:
            raise ToolchainMissing(f"debootstrap is missing and `apt-get install debootstrap` failed:\n{result.stderr[-2000:]}")
    found = shutil.which("debootstrap") or shutil.which("/usr/sbin/debootstrap")
    if not found:
        raise ToolchainMissing("debootstrap was installed but is not on PATH (expected /usr/sbin/debootstrap)")
    return found


def recipe_hash(suite: str, packages: Sequence[str], mirror: str) -> str:
    text = "\n".join([RECIPE_VERSION, suite, "minbase", mirror, *sorted(packages), *TRIM])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def rootfs_tarball(suite: str = SUITE, packages: Sequence[str] = PACKAGES, mirror: str = MIRROR) -> Path:
    """`debootstrap --variant=minbase` of `suite` plus `packages`, trimmed and tarred; cached."""
    out = CACHE_DIR / f"rootfs-{suite}-{recipe_hash(suite, packages, mirror)}" / "rootfs.tar"
    if out.exists():
        return out
    debootstrap = ensure_debootstrap()
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="rootfs-", dir=out.parent))
    target = work / "root"
    try:
        argv = [*_sudo(), debootstrap, "--variant=minbase", f"--include={','.join(packages)}", suite, str(target), mirror]
        result = subprocess.run(argv, capture_output=True, text=True)
        if result.returncode != 0:
            log = target / "debootstrap" / "debootstrap.log"
            detail = log.read_text(errors="replace")[-3000:] if log.exists() else result.stderr[-3000:]
            raise ToolchainMissing(f"debootstrap {suite} from {mirror} failed ({result.returncode}):\n{detail}")
        for relative in TRIM:
            shutil.rmtree(target / relative, ignore_errors=True)
        tmp = out.with_suffix(".tmp")
        subprocess.run([*_sudo(), "tar", "--numeric-owner", "-C", str(target), "-cf", str(tmp), "."], check=True)
        tmp.replace(out)
    finally:
        subprocess.run([*_sudo(), "rm", "-rf", str(work)], check=False)
    return out


def import_base_image(dockerd, tarball: Path, name: str) -> str:
    """`docker import` the tarball as `name` (no-op when the image exists); returns `name`."""
    if dockerd.docker("image", "inspect", name, check=False).returncode == 0:
        return name
    dockerd.docker("import", "--change", 'CMD ["/bin/sh"]',
                   "--change", "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                   "--message", f"gcu-stack test base ({tarball.parent.name})", str(tarball), name, timeout=600)
    return name
