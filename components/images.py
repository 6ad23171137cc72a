"""Component images built from `images/<component>/` with pulumi-docker.

gcu-operator shipped `build-component-image.sh` and a `config.json` saying which
component images to build and under which repository and tag. Stack config
`gcu-stack:images` is that file::

    gcu-stack:images:
      packageDir: packages            # the TopsRider/topscloud files, relative to the project
      registry: {server: registry.example.com, username: robot}   # password: gcu-stack:registryPassword (--secret)
      driver: {build: true, repository: registry.example.com/gcu, tag: "2.1", baseImage: "ubuntu:18.04", push: true}
      toolkit: {build: true}          # push false (default): loaded into the local docker daemon only

A component whose `build` is on runs the image built here instead of the one its
spec names; nothing is declared (and no docker daemon is needed) when every
`build` is off.

Each build context is staged under `<project>/.state/image-context/<component>/`:
the files of `images/<component>/` and `images/common/`, the one package file
found for the component (hard-linked when possible) under `packages/`, and for the
toolkit the node code (`components/node/`, NODE_FILES). A context per component keeps
pulumi-docker's context digest (what decides a rebuild) to the files that image is
made of, and lets the package directory live anywhere.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from pydantic import BaseModel, ConfigDict, Field, create_model

from .catalog import COMPONENTS
from .errors import BlueprintError
from .model import ImageDef
from .names import DEFAULT_REPOSITORY
from .spec import ImageName, ImageTag, Repository

if TYPE_CHECKING:
    import pulumi

    from .model import ResolvedComponent

CONFIG_KEY = "gcu-stack:images"
PASSWORD_KEY = "gcu-stack:registryPassword"
PROJECT_DIR = Path(__file__).resolve().parent.parent
IMAGES_DIR = PROJECT_DIR / "images"
COMMON_DIR = IMAGES_DIR / "common"
CONTEXT_ROOT = Path(".state") / "image-context"
PACKAGES_SUBDIR = "packages"
DEFAULT_TAG = "default"  # what build-component-image.sh tagged its images with
# pulumi-docker's default builder, named so `docker build` in tests matches it (DOCKER_BUILDKIT=1).
BUILDER = "BuilderBuildKit"

# The components whose image is built here, by spec key, in catalog order.
DEFS: dict[str, ImageDef] = {c.key: c.image for c in COMPONENTS if c.image is not None}
DEFAULT_IMAGES: dict[str, str] = {c.key: c.default_image for c in COMPONENTS if c.image is not None}


class ComponentImage(BaseModel):
    """One component's entry: gcu-operator config.json's build/repo/tag, plus base image and push."""

    model_config = ConfigDict(extra="forbid")

    build: bool = False
    # The same grammar as the blueprint's repository, image and version fields.
    repository: Repository = DEFAULT_REPOSITORY
    image: ImageName = None  # default: the component's image name (gcu-driver, gcu-runtime, ...)
    tag: ImageTag = DEFAULT_TAG
    base_image: Optional[str] = Field(None, alias="baseImage")  # default: per component (its ImageDef)
    push: bool = False  # false: loaded into the local docker daemon only


class RegistryOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    server: Optional[str] = None  # default: the host in each image's repository
    username: Optional[str] = None


class ImagesBase(BaseModel):
    """`gcu-stack:images`: which component images to build, from which packages, pushed where."""

    model_config = ConfigDict(extra="forbid")

    package_dir: str = Field("packages", alias="packageDir")
    # `docker build --network` for RUN steps (e.g. "none" or "host"); unset: docker's default.
    network: Optional[str] = None
    registry: RegistryOptions = Field(default_factory=RegistryOptions)

    def components(self) -> dict[str, ComponentImage]:
        """Entries by component key, in catalog order."""
        return {key: getattr(self, key) for key in DEFS}

    def to_build(self) -> dict[str, ComponentImage]:
        return {key: entry for key, entry in self.components().items() if entry.build}

    def package_path(self, project_dir: Path) -> Path:
        path = Path(self.package_dir).expanduser()
        return path if path.is_absolute() else project_dir / path


# One entry per component with an image definition, under its spec key.
ImagesOptions = create_model(
    "ImagesOptions",
    __base__=ImagesBase,
    __doc__=ImagesBase.__doc__,
    **{key: (ComponentImage, Field(default_factory=ComponentImage, alias=key)) for key in DEFS},
)


@dataclass(frozen=True)
class BuildSpec:
    """One image build as plain data: what the Pulumi resource gets and what `docker build` gets in tests."""

    key: str
    image_name: str
    context: Path
    dockerfile: Path
    args: dict[str, str]
    network: Optional[str]
    push: bool

    def docker_build_argv(self) -> list[str]:
        """`docker build` arguments equivalent to the pulumi-docker Image (run with DOCKER_BUILDKIT=1)."""
        argv = ["build", "-f", str(self.dockerfile), "-t", self.image_name]
        for name, value in self.args.items():
            argv += ["--build-arg", f"{name}={value}"]
        if self.network:
            argv += ["--network", self.network]
        return argv + [str(self.context)]


def find_packages(options: ImagesOptions, project_dir: Path) -> tuple[dict[str, Path], list[str]]:
    """The package file of every component to build, and one problem per component without exactly one."""
    directory = options.package_path(project_dir)
    found: dict[str, Path] = {}
    problems = []
    for key in options.to_build():
        definition = DEFS[key]
        matches = sorted(directory.glob(definition.package)) if directory.is_dir() else []
        where = f"{CONFIG_KEY}.{key}.build is true but"
        if len(matches) == 1:
            found[key] = matches[0]
        elif not directory.is_dir():
            problems.append(
                f"{where} the package directory {directory} ({CONFIG_KEY}.packageDir) does not exist; "
                f"it must hold {definition.package} for the {key} image: {definition.source}"
            )
        elif not matches:
            problems.append(
                f"{where} {directory} ({CONFIG_KEY}.packageDir) has no {definition.package} for the {key} image: "
                f"{definition.source}"
            )
        else:
            names = ", ".join(m.name for m in matches)
            problems.append(f"{where} {directory} has {len(matches)} files matching {definition.package} ({names}): keep one")
    return found, problems


def _registry_problems(options: ImagesOptions, password: Optional[str]) -> list[str]:
    # (A password stored in plain text is refused with every other secret setting: StackSettings.plain_text_secrets.)
    pushing = [key for key, entry in options.to_build().items() if entry.push]
    if pushing and options.registry.username and not password:
        return [
            f"{CONFIG_KEY}.registry.username is set to push {', '.join(pushing)} but {PASSWORD_KEY} is not: "
            f"set it with `pulumi config set --secret {PASSWORD_KEY} <password>`"
        ]
    return []


def check_images(options: ImagesOptions, password: Optional[str], project_dir: Path) -> dict[str, Path]:
    """Every package present and the registry password secret, or BlueprintError naming what is missing and where."""
    found, problems = find_packages(options, project_dir)
    problems += _registry_problems(options, password)
    if problems:
        raise BlueprintError(problems, "stack config")
    return found


def _sync_file(source: Path, target: Path, *, link: bool) -> None:
    """Make `target` a hard link to `source` (when `link` and the filesystem allows) or a copy.

    Left alone when it already is that file, or a copy of the same size and mtime
    (copy2 keeps mtimes), so a package is not copied again on every run.
    """
    if target.exists():
        have, want = target.stat(), source.stat()
        if (have.st_ino, have.st_dev) == (want.st_ino, want.st_dev) or (
            (have.st_size, have.st_mtime_ns) == (want.st_size, want.st_mtime_ns)
        ):
            return
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        if not link:
            raise OSError("copy")
        os.link(source, tmp)
    except OSError:
        shutil.copy2(source, tmp)
    tmp.replace(target)


def stage_context(key: str, definition: ImageDef, package: Path, root: Path) -> Path:
    """Lay out the build context of one image under `root/<key>/`; files nobody asked for are removed."""
    context = root / key
    wanted: dict[Path, tuple[Path, bool]] = {}
    for directory in (COMMON_DIR, IMAGES_DIR / definition.dockerfile):
        for source in directory.iterdir():
            if source.is_file():
                wanted[context / source.name] = (source, False)
    for name, source in definition.extra_files:
        wanted[context / name] = (source, False)
    wanted[context / PACKAGES_SUBDIR / package.name] = (package, True)
    for target, (source, link) in wanted.items():
        _sync_file(source, target, link=link)
        if not link:  # the same modes whatever the checkout did: COPY keeps them
            target.chmod(0o755 if target.suffix == ".sh" else 0o644)
    for existing in sorted(context.rglob("*"), reverse=True):
        if existing.is_file() and existing not in wanted:
            existing.unlink()
        elif existing.is_dir() and not any(existing.iterdir()):
            existing.rmdir()
    return context


def build_spec(key: str, options: ImagesOptions, package: Path, project_dir: Path) -> BuildSpec:
    """Stage the context of `key`'s image and describe its build."""
    definition, entry = DEFS[key], options.components()[key]
    context = stage_context(key, definition, package, project_dir / CONTEXT_ROOT)
    args = {"BASE_IMAGE": entry.base_image or definition.base_image, "PACKAGE": package.name}
    if definition.dockerfile == "agent":
        args["BINARY"] = definition.binary
    args.update(definition.build_args)
    return BuildSpec(
        key=key,
        image_name=f"{entry.repository}/{entry.image or DEFAULT_IMAGES[key]}:{entry.tag}",
        context=context,
        dockerfile=context / "Dockerfile",
        args=args,
        network=options.network,
        push=entry.push,
    )


def declare_images(
    options: ImagesOptions,
    password: Optional[str],
    project_dir: Path,
    *,
    parent: "pulumi.Resource",
    deployed: Collection[str],
) -> dict[str, "pulumi.Output[str]"]:
    """A pulumi-docker Image per component to build, as children of `parent`.

    Returns, per component key, the reference its workload must run: the Image's
    `repoDigest`. For a pushed image that is `repository@sha256:<manifest digest>`;
    for an image only loaded into the local daemon pulumi-docker 4.11 sets it to the
    image ID (`sha256:<config digest>`), which docker resolves locally while
    `name:tag@<image ID>` does not. Either way it changes exactly when the built
    image changes, so a rebuild rolls the workload and an unchanged build does not.
    """
    wanted = options.to_build()
    if not wanted:
        return {}
    import pulumi
    import pulumi_docker as docker

    # check_images ran with the settings; only a package removed since then fails here.
    packages, problems = find_packages(options, project_dir)
    if problems:
        raise BlueprintError(problems, "stack config")
    references = {}
    for key in wanted:
        if key not in deployed:
            pulumi.log.warn(f"{CONFIG_KEY}.{key}.build is true but spec.{key} is not deployed: the image is built, nothing runs it")
        spec = build_spec(key, options, packages[key], project_dir)
        registry = None
        if spec.push:
            registry = docker.RegistryArgs(
                server=options.registry.server,  # None: the host in image_name
                username=options.registry.username,
                password=pulumi.Output.secret(password) if password else None,
            )
        image = docker.Image(
            f"{key}-image",
            image_name=spec.image_name,
            build=docker.DockerBuildArgs(
                context=str(spec.context),
                dockerfile=str(spec.dockerfile),
                args=spec.args,
                builder_version=BUILDER,
                network=spec.network,
            ),
            skip_push=not spec.push,
            registry=registry,
            opts=pulumi.ResourceOptions(parent=parent),
        )
        references[key] = image.repo_digest
    return references


def with_built_image(component: "ResolvedComponent", reference: Any) -> "ResolvedComponent":
    """`component` with every container running `reference` (the built image)."""
    workloads = tuple(
        replace(w, containers=tuple(replace(c, image=reference) for c in w.containers)) for w in component.workloads
    )
    return replace(component, workloads=workloads)


def use_built_images(components: list["ResolvedComponent"], references: Mapping[str, Any]) -> list["ResolvedComponent"]:
    return [
        with_built_image(c, references[c.definition.key]) if c.definition.key in references else c for c in components
    ]
