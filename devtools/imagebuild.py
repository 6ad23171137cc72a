"""Building every component image against a private dockerd, without Enflame's packages.

Enflame's TopsRider/topscloud packages are not available here, so ``write_standins``
puts small stand-ins in a package directory, one per pattern in
``components.images.IMAGE_DEFS``: a shell-script ``.run`` installer for the driver and
``.tar.gz`` archives holding shell scripts under each binary's name. Each stand-in
answers ``--help`` like the real program would.

``build_all`` then stages every context and runs ``docker build`` with exactly the
build arguments the pulumi-docker Image gets (``BuildSpec.docker_build_argv``, with
BuildKit like pulumi-docker's default builder), timing each build.
"""

from __future__ import annotations

import gzip
import io
import os
import random
import shutil
import subprocess
import tarfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

from components.images import DEFS, BuildSpec, ImagesOptions, build_spec, check_images
from devtools import ComponentFailed
from devtools.dockerd import Dockerd
from devtools.rootfs import import_base_image, rootfs_tarball

BASE_IMAGE = "gcu-test-debian:bookworm"
STANDIN_VERSION = "0.0.0-standin"
# Sizes in the range of the real files (the TopsRider driver installer is larger still),
# so that what the layer cache saves is measured, not just docker's per-build overhead.
DRIVER_SIZE = 64 << 20
BINARY_SIZE = 16 << 20


def _script(name: str, body: str, revision: int, size: int) -> bytes:
    """A shell script answering --help, padded to `size` bytes like a real binary or installer.

    The padding (random, hence incompressible, but the same for the same name and
    revision) follows the last line sh reads: `body` must exit or exec.
    """
    text = (
        "#!/bin/sh\n"
        f"# gcu-stack stand-in for Enflame's {name}, revision {revision}: not the real program.\n"
        'case "${1:-}" in -h|--help) '
        f'echo "Usage: {name} [flags] (gcu-stack stand-in {STANDIN_VERSION})"; exit 0 ;; esac\n'
        f"{body}\n__PAYLOAD__\n"
    ).encode()
    return text + random.Random(f"{name}-{revision}").randbytes(max(0, size - len(text)))


def tar_gz(path: Path, members: dict[str, bytes]) -> None:
    """Byte-for-byte reproducible: no timestamps, so equal stand-ins are equal files."""
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, compresslevel=1) as compressed, \
            tarfile.open(fileobj=compressed, mode="w") as archive:
        for name, content in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(content), 0o755, 0
            archive.addfile(info, io.BytesIO(content))


# The images built around Enflame's packages, which stand-ins replace here (the others' packages are made by this project).
ENFLAME_IMAGES = tuple(key for key, definition in DEFS.items() if not definition.made_here)


def standin_name(key: str) -> str:
    """The package file name for `key`: its pattern with the stand-in version for the `*`."""
    return DEFS[key].package.replace("*", STANDIN_VERSION)


def write_standins(
    package_dir: Path, keys: Sequence[str] = ENFLAME_IMAGES, revision: int = 0, padded: bool = True
) -> dict[str, Path]:
    """One stand-in package per key, as large as real ones get unless not `padded`; another `revision` makes different files."""
    package_dir.mkdir(parents=True, exist_ok=True)
    driver_size, binary_size = (DRIVER_SIZE, BINARY_SIZE) if padded else (0, 0)
    written = {}
    for key in keys:
        path = package_dir / standin_name(key)
        if key == "driver":
            # It "loads" the module the way the entrypoint checks it: a version under GCU_SYSFS_ROOT's module dir.
            installer = (
                'root=${GCU_SYSFS_ROOT:-/sys}; module=${GCU_DRIVER_MODULE:-enflame}; '
                'mkdir -p "$root/module/$module" && echo 0 > "$root/module/$module/refcnt" '
                f'&& echo {STANDIN_VERSION} > "$root/module/$module/version"; '
                'echo "stand-in driver installer: loaded $module $(cat "$root/module/$module/version")"; exit 0'
            )
            path.write_bytes(_script(path.name, installer, revision, driver_size))
            path.chmod(0o755)
        else:
            binary = DEFS[key].binary
            top = path.name.split("_", 1)[0]
            members = {f"{top}/bin/{binary}": _script(binary, 'echo "stand-in: $0 $*"; exec sleep 3600', revision, binary_size)}
            if key == "toolkit":
                members[f"{top}/bin/enflame-container-runtime-hook"] = _script("enflame-container-runtime-hook", "exit 0", revision, 0)
            tar_gz(path, members)
        written[key] = path
    return written


def test_options(package_dir: str = "packages", base_image: str = BASE_IMAGE) -> ImagesOptions:
    """Every component built around an Enflame package from `package_dir` on `base_image`, RUN steps without network."""
    return ImagesOptions.model_validate(
        {"packageDir": package_dir, "network": "none",
         **{key: {"build": True, "baseImage": base_image} for key in ENFLAME_IMAGES}}
    )


def stage(project_dir: Path) -> list[BuildSpec]:
    """Contexts staged under `project_dir` from its packages/: one spec per image."""
    options = test_options()
    packages = check_images(options, None, project_dir)
    return [build_spec(key, options, packages[key], project_dir) for key in options.to_build()]


def prepare(dockerd: Dockerd, project_dir: Path) -> list[BuildSpec]:
    """Base image imported, stand-ins written to `project_dir`/packages, contexts staged."""
    import_base_image(dockerd, rootfs_tarball(), BASE_IMAGE)
    write_standins(test_options().package_path(project_dir))
    return stage(project_dir)


@contextmanager
def build_daemon(workdir: Path) -> Iterator[Dockerd]:
    """A private dockerd for image builds, removed with its layers afterwards.

    overlay2 where the filesystem allows it (what nodes run, and fast to build on and
    to delete), else vfs, which works anywhere but copies the whole root filesystem
    for every layer.
    """
    failure = None
    for driver in ("overlay2", "vfs"):
        daemon = Dockerd(workdir / driver, storage_driver=driver)
        try:
            daemon.start()
        except ComponentFailed as error:
            daemon.stop()
            failure = error
            continue
        try:
            yield daemon
        finally:
            daemon.stop()
            shutil.rmtree(daemon.workdir, ignore_errors=True)
        return
    raise failure


def docker_build(dockerd: Dockerd, spec: BuildSpec, timeout: float = 600) -> float:
    """`docker build` of one spec with BuildKit; seconds taken."""
    env = {**os.environ, "DOCKER_BUILDKIT": "1", "DOCKER_CONFIG": str(dockerd.workdir / "cli-config")}
    started = time.monotonic()
    result = subprocess.run([dockerd.bins["docker"], "-H", dockerd.host, *spec.docker_build_argv()],
                            capture_output=True, text=True, env=env, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"docker build of {spec.key} ({spec.image_name}) failed:\n{result.stderr[-4000:]}")
    return time.monotonic() - started


@dataclass
class Timings:
    per_image: dict[str, float]

    @property
    def total(self) -> float:
        return sum(self.per_image.values())


def build_project_images(dockerd: Dockerd, workdir: Path, packages: Path, entries: dict[str, dict]) -> dict[str, str]:
    """Build the project's images (images/<key>) of `entries` ({component key: its gcu-stack:images entry})
    from the packages in `packages`, offline, with `workdir` as the project directory; {key: image reference}."""
    options = ImagesOptions.model_validate({"packageDir": str(packages), "network": "none", **entries})
    found = check_images(options, None, workdir)
    refs = {}
    for key in entries:
        spec = build_spec(key, options, found[key], workdir)
        docker_build(dockerd, spec)
        refs[key] = spec.image_name
    return refs


def build_program_image(dockerd: Dockerd, workdir: Path, key: str, write_package: Callable[[Path], Path], *,
                        base_image: Optional[str] = None, repository: Optional[str] = None, tag: str) -> str:
    """Build the project's image of component `key` (images/agent) around a stand-in program that
    `write_package(path)` packages as the component's topscloud archive.

    ``workdir`` plays the project directory (its packages/ and .state/image-context/); the base image defaults to the
    debootstrap bookworm base (imported into `dockerd` when missing). Returns the image reference.
    """
    workdir = Path(workdir)
    if base_image is None:
        base_image = import_base_image(dockerd, rootfs_tarball(), BASE_IMAGE)
    packages = workdir / "packages"
    write_package(packages / standin_name(key))
    entry = {"build": True, "baseImage": base_image, "tag": tag}
    if repository:   # else the project's default repository for component images
        entry["repository"] = repository
    return build_project_images(dockerd, workdir, packages, {key: entry})[key]


def build_all(dockerd: Dockerd, specs: Sequence[BuildSpec]) -> Timings:
    return Timings({spec.key: docker_build(dockerd, spec) for spec in specs})
