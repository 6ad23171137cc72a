"""The package the gcu-upgrade-manager image is built from (images/upgrade-manager/Dockerfile).

    python -m service.package OUT_DIR        (scripts/gcu-stack package-service [DIR], default packages/)

writes OUT_DIR/gcu-upgrade-manager_<version>.tar.gz (the component's ImageDef.package pattern; other files of that
pattern in OUT_DIR are removed, as exactly one must match) holding:

    program/        this project as the service and the Pulumi program need it: Pulumi.yaml, __main__.py,
                    requirements.txt, components/, policies/ (its own PulumiPolicy.yaml and requirements.txt; the
                    image links its .venv to the program's, as scripts/setup.sh does), service/, stackops/
    pulumi/bin/     the Pulumi CLI and its Python language host, from the directory of the `pulumi` on PATH
    pulumi/plugins/resource-kubernetes-v<pin>/pulumi-resource-kubernetes
                    the provider plugin the pinned SDK asks for (pulumi-kubernetes in requirements.txt), from
                    PULUMI_HOME, laid out as in PULUMI_HOME/plugins: the image links it into its PULUMI_HOME. Not in
                    pulumi/bin/, which is on the image's PATH: a plugin found on PATH is an "ambient" one, which the
                    CLI would warn about on every run.
    site-packages/  requirements.txt's runtime pins (the lines above "# Tests and benchmarks") installed by pip for
                    CPython 3.11 manylinux x86_64, their dependencies held to the versions this interpreter has (what
                    the tests ran), compiled (unchecked-hash .pyc: the image's copy is never edited). Cached under
                    $GCU_CACHE_DIR/upgrade-manager-site-<hash>/ (default ~/.cache/gcu-stack).

<version>: the git short commit of the project (with -dirty when its packaged files have changes), else "dev".
The archive is reproducible (sorted, owner root, mtime 0): the same inputs make the same bytes, so a rebuilt
package does not rebuild the image; and when its files are unchanged (name, size, mtime) since this wrote it, it is
not written again (stamps under $GCU_CACHE_DIR/upgrade-manager-packages/).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Optional

PROJECT_DIR = Path(__file__).resolve().parent.parent
CACHE_DIR = Path(os.environ.get("GCU_CACHE_DIR") or Path.home() / ".cache" / "gcu-stack")
NAME = "gcu-upgrade-manager"
PATTERN = f"{NAME}_*.tar.gz"  # components/catalog/upgrade_manager.py's ImageDef.package
PROGRAM_FILES = ("Pulumi.yaml", "__main__.py", "requirements.txt")
PROGRAM_DIRS = ("components", "policies", "service", "stackops")
EXCLUDED = {"__pycache__", ".venv", "tests", ".state", ".pytest_cache"}
CLI_FILES = ("pulumi", "pulumi-language-python", "pulumi-language-python-exec", "pulumi-resource-pulumi-python")
PLUGINS = ("kubernetes",)  # resource plugins, at the version requirements.txt pins pulumi-<name> to
RUNTIME_END = "# Tests and benchmarks"
# What the wheels must run on: the image's python (3.11, both default bases) on x86_64 glibc (manylinux2014: >= 2.17).
TARGET = ("--python-version", "3.11", "--implementation", "cp", "--abi", "cp311", "--platform", "manylinux2014_x86_64")
SITE_FORMAT = "3"  # bump when the cached tree's making changes
SITE_IN_IMAGE = "/opt/gcu-stack/.venv/lib/python3.11/site-packages"  # images/upgrade-manager/Dockerfile puts it there


def log(message: str) -> None:
    print(f"package-service: {message}", file=sys.stderr, flush=True)


def runtime_pins(requirements: Path) -> list[str]:
    """requirements.txt's requirement lines above the tests' section."""
    pins = []
    for line in requirements.read_text().splitlines():
        if line.strip() == RUNTIME_END:
            break
        if line.strip() and not line.lstrip().startswith("#"):
            pins.append(line.strip())
    return pins


def pinned_version(pins: list[str], name: str) -> str:
    for pin in pins:
        found = re.fullmatch(rf"{re.escape(name)}==(\S+)", pin, re.IGNORECASE)
        if found:
            return found.group(1)
    raise SystemExit(f"package-service: requirements.txt pins no {name}==<version> above {RUNTIME_END!r}")


def installed_versions() -> list[str]:
    """name==version of every distribution this interpreter has (the project venv): pip's constraints."""
    found = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name and name.lower() != "pip":
            found[name.lower()] = f"{name}=={dist.version}"
    return sorted(found.values())


def site_packages(pins: list[str], constraints: list[str]) -> Path:
    """The pins installed for the image's python, from the cache or by pip (then cached)."""
    recipe = json.dumps([SITE_FORMAT, TARGET, pins, constraints])
    cached = CACHE_DIR / f"upgrade-manager-site-{hashlib.sha256(recipe.encode()).hexdigest()[:16]}"
    if cached.is_dir():
        log(f"site-packages: cached {cached}")
        return cached
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".upgrade-manager-site-", dir=CACHE_DIR))
    try:
        (work / "requirements.txt").write_text("\n".join(pins) + "\n")
        (work / "constraints.txt").write_text("\n".join(constraints) + "\n")
        target = work / "site-packages"
        started = time.monotonic()
        command = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile",
                   "--target", str(target), "--only-binary=:all:", *TARGET,
                   "-r", str(work / "requirements.txt"), "-c", str(work / "constraints.txt")]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise SystemExit(f"package-service: pip could not install the runtime pins for CPython 3.11 manylinux "
                             f"x86_64 (exit {result.returncode}):\n{result.stderr[-4000:]}")
        shutil.rmtree(target / "bin", ignore_errors=True)  # console scripts, their #! naming this machine's python
        if sys.version_info[:2] == (3, 11):  # the image's python: .pyc are per minor version
            # Named by their path in the image (tracebacks say where the file is; no trace of this run's temporary
            # directory) and with a fixed hash seed (set constants in a fixed order): the same .pyc every time.
            compiled = subprocess.run(
                [sys.executable, "-m", "compileall", "-q", "-j", "0", "-s", str(target), "-p", SITE_IN_IMAGE,
                 "--invalidation-mode", "unchecked-hash", str(target)],
                capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"})
            if compiled.returncode != 0:
                raise SystemExit(f"package-service: compileall failed:\n{compiled.stdout[-2000:]}{compiled.stderr[-2000:]}")
        log(f"site-packages: installed by pip in {time.monotonic() - started:.1f}s")
        (work / "recipe.json").write_text(recipe + "\n")
        try:
            work.rename(cached)
        except OSError:  # another run made it meanwhile
            if not cached.is_dir():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return cached


def toolchain(pins: list[str]) -> list[tuple[str, Path]]:
    """(name in the archive, file) of the Pulumi CLI, its language host and the plugins, from PATH and PULUMI_HOME."""
    cli = shutil.which("pulumi")
    if not cli:
        raise SystemExit("package-service: no pulumi on PATH (scripts/gcu-stack package-service puts the toolchain's there)")
    bin_dir = Path(cli).resolve().parent
    files = []
    for name in CLI_FILES:
        if not (bin_dir / name).is_file():
            raise SystemExit(f"package-service: {bin_dir} has no {name} (the Python language host the image runs the "
                             "program with)")
        files.append((f"pulumi/bin/{name}", bin_dir / name))
    home = Path(os.environ.get("PULUMI_HOME") or Path.home() / ".pulumi")
    for plugin in PLUGINS:
        version = pinned_version(pins, f"pulumi-{plugin}")
        directory = f"resource-{plugin}-v{version}"
        binary = home / "plugins" / directory / f"pulumi-resource-{plugin}"
        if not binary.is_file() or (home / "plugins" / f"{directory}.partial").exists():
            raise SystemExit(f"package-service: the {plugin} provider plugin {version} is not installed in {home} "
                             f"(PULUMI_HOME): `pulumi plugin install resource {plugin} {version}`, or "
                             "scripts/toolchain/pulumi.sh")
        files.append((f"pulumi/plugins/{directory}/{binary.name}", binary.resolve()))
    return files


def program_files(project: Path) -> Iterator[tuple[str, Path]]:
    for name in PROGRAM_FILES:
        yield f"program/{name}", project / name
    for top in PROGRAM_DIRS:
        for directory, subdirs, files in os.walk(project / top):
            subdirs[:] = sorted(d for d in subdirs if d not in EXCLUDED)
            for name in sorted(files):
                if not name.endswith(".pyc"):
                    path = Path(directory) / name
                    yield f"program/{path.relative_to(project)}", path


def tree_files(root: Path, prefix: str) -> Iterator[tuple[str, Path]]:
    for directory, subdirs, files in os.walk(root):
        subdirs.sort()
        for name in sorted(files):
            path = Path(directory) / name
            yield f"{prefix}/{path.relative_to(root)}", path


def version(project: Path) -> str:
    """The project's git short commit, -dirty when the packaged files have changes; "dev" outside git."""
    def git(*args: str) -> Optional[str]:
        try:
            result = subprocess.run(["git", "-C", str(project), *args], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return result.stdout.strip() if result.returncode == 0 else None

    commit = git("rev-parse", "--short", "HEAD")
    if not commit:
        return "dev"
    changed = git("status", "--porcelain", "--", *PROGRAM_FILES, *PROGRAM_DIRS)
    return f"{commit}-dirty" if changed else commit


def _normalized(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mtime = 0
    info.mode = 0o755 if info.mode & 0o111 or info.isdir() else 0o644
    return info


def write_archive(target: Path, members: list[tuple[str, Path]], level: int) -> None:
    """A reproducible tar.gz of `members` (archive name, file), written next to `target` and renamed into place."""
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        # (filename="": no temporary name in the gzip header; mtime 0: the same bytes for the same files.)
        with open(tmp, "wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0, compresslevel=level) as gz, \
                tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as archive:
            for name, path in sorted(members):
                archive.add(path, arcname=name, recursive=False, filter=_normalized)
        tmp.replace(target)
    finally:
        tmp.unlink(missing_ok=True)


def inputs_digest(members: list[tuple[str, Path]], level: int) -> str:
    """What the archive is made of, by name, size and mtime of each file (as make judges), and the gzip level."""
    digest = hashlib.sha256(f"{SITE_FORMAT} {level}".encode())
    for name, path in sorted(members):
        info = path.stat()
        digest.update(f"\0{name}\0{info.st_size}\0{info.st_mtime_ns}\0{info.st_mode & 0o111}".encode())
    return digest.hexdigest()


def _stamp_file(target: Path) -> Path:
    return CACHE_DIR / "upgrade-manager-packages" / f"{hashlib.sha256(str(target).encode()).hexdigest()[:16]}.json"


def up_to_date(target: Path, digest: str) -> bool:
    """`target` is the archive a run with these inputs wrote (then left alone), so writing it again makes the same bytes."""
    try:
        stamp = json.loads(_stamp_file(target).read_text())
        info = target.stat()
    except (OSError, ValueError):
        return False
    return stamp == {"target": str(target), "inputs": digest, "size": info.st_size, "mtime_ns": info.st_mtime_ns}


def record(target: Path, digest: str) -> None:
    stamp = _stamp_file(target)
    stamp.parent.mkdir(parents=True, exist_ok=True)
    info = target.stat()
    spare = stamp.with_suffix(".tmp")
    spare.write_text(json.dumps({"target": str(target), "inputs": digest, "size": info.st_size, "mtime_ns": info.st_mtime_ns}))
    spare.replace(stamp)


def package(out_dir: Path, project: Path = PROJECT_DIR, level: int = 6) -> Path:
    """Write the package into `out_dir` (other files of its pattern removed), unless it is there already; its path."""
    started = time.monotonic()
    pins = runtime_pins(project / "requirements.txt")
    site = site_packages(pins, installed_versions())
    members = [*program_files(project), *toolchain(pins), *tree_files(site / "site-packages", "site-packages")]
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{NAME}_{version(project)}.tar.gz"
    digest = inputs_digest(members, level)
    if up_to_date(target, digest):
        log(f"{target} is up to date ({len(members)} files unchanged since it was written)")
    else:
        write_archive(target, members, level)
        record(target, digest)
        log(f"wrote {target} ({target.stat().st_size / 2**20:.0f} MiB, {len(members)} files) in "
            f"{time.monotonic() - started:.1f}s")
    for other in out_dir.glob(PATTERN):
        if other != target:
            log(f"removed the earlier {other.name} (exactly one {PATTERN} may be in {out_dir})")
            other.unlink()
    return target


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m service.package", description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path, metavar="OUT_DIR", help="where to write the package (e.g. packages/)")
    parser.add_argument("--compress-level", type=int, default=6, choices=range(1, 10), metavar="1-9",
                        help="gzip level (default 6)")
    args = parser.parse_args(argv)
    print(package(args.out_dir.resolve(), level=args.compress_level))
    return 0


if __name__ == "__main__":
    sys.exit(main())
