"""`gcu-stack:images`: pulumi-docker Images for the components to build, and workloads running them (mocks).

The real builds of the same Dockerfiles are in tests/test_image_builds.py.
"""

import hashlib
from pathlib import Path

import pulumi
import pytest
from harness import SEED_BLUEPRINT, ClusterMocks, run_program

from components.images import CONTEXT_ROOT, ImagesOptions, build_spec, check_images
from devtools.imagebuild import ENFLAME_IMAGES, standin_name, write_standins

IMAGE = "docker:index/image:Image"
SEED_REPO = "artifact.enflame.cn/galaxy_docker_hub/gcu"


class ImageMocks(ClusterMocks):
    """What pulumi-docker 4.11 reports: repoDigest is the manifest digest when pushed, the image ID when not."""

    def __init__(self):
        super().__init__()
        self.created: list[str] = []

    def new_resource(self, args):
        self.created.append(args.typ)
        resource_id, state = super().new_resource(args)
        if args.typ == IMAGE:
            digest = "sha256:" + hashlib.sha256(args.name.encode()).hexdigest()
            repository = args.inputs["imageName"].rsplit(":", 1)[0]
            state["repoDigest"] = digest if args.inputs.get("skipPush") else f"{repository}@{digest}"
        return resource_id, state


@pytest.fixture
def project(tmp_path):
    """A project directory with the stand-in packages in packages/ (contexts are staged under it)."""
    write_standins(tmp_path / "packages", padded=False)
    return tmp_path


def run(project, images, mocks=None, **config):
    return run_program(
        {"blueprint": str(SEED_BLUEPRINT), "images": images, **config},
        mocks=mocks or ImageMocks(),
        project_dir=project,
        secret_keys=tuple(k for k in config if k == "registryPassword"),
    )


def containers(registration):
    return registration.inputs["spec"]["template"]["spec"]["containers"]


def test_nothing_is_built_by_default(project):
    mocks = ImageMocks()
    result = run(project, {}, mocks)
    assert result.of_type(IMAGE) == []
    assert not any(t.startswith("docker:") or t == "pulumi:providers:docker" for t in mocks.created)
    assert not (project / CONTEXT_ROOT).exists()


def test_built_component_declares_an_image_and_its_workload_runs_it(project):
    result = run(project, {"exporter": {"build": True, "tag": "2.1"}})
    (image,) = result.of_type(IMAGE)
    context = project / CONTEXT_ROOT / "exporter"
    assert image.name == "exporter-image"
    assert image.parent == result.of_type("gcu:stack:GcuResource")[0].urn
    assert image.inputs["imageName"] == "artifact.enflame.cn/enflame_docker_images/enflame/gcu-exporter:2.1"
    assert image.inputs["skipPush"] is True
    assert "registry" not in image.inputs
    assert image.inputs["build"] == {
        "context": str(context),
        "dockerfile": str(context / "Dockerfile"),
        "args": {"BASE_IMAGE": "ubuntu:18.04", "PACKAGE": standin_name("exporter"), "BINARY": "gcu-exporter"},
        "builderVersion": "BuilderBuildKit",
    }
    staged = sorted(str(p.relative_to(context)) for p in context.rglob("*") if p.is_file())
    assert staged == ["Dockerfile", "install-package.sh", f"packages/{standin_name('exporter')}"]

    exporter = result.one("DaemonSet", "enflame-gcu-exporter")
    (container,) = containers(exporter)
    assert container["image"] == image.outputs["repoDigest"]
    assert container["image"].startswith("sha256:")  # local-only: the image ID
    assert image.urn in exporter.dependencies
    # Components not built keep their spec's image.
    (plugin,) = containers(result.one("DaemonSet", "enflame-gcu-k8s-plugin"))
    assert plugin["image"] == f"{SEED_REPO}/gcu-plugin:latest"


def test_toolkit_build_feeds_its_daemonset_and_the_activation_pod(project):
    result = run(project, {"toolkit": {"build": True, "baseImage": "python:3.11-slim"}})
    (image,) = result.of_type(IMAGE)
    assert image.inputs["build"]["args"]["BASE_IMAGE"] == "python:3.11-slim"
    context = Path(image.inputs["build"]["context"])
    # The node code, exactly as the provider runs it, goes into the image.
    from components.node import HERE, NODE_FILES

    for name in NODE_FILES:
        assert (context / "node-code" / name).read_bytes() == (HERE / name).read_bytes(), name
    (container,) = containers(result.one("DaemonSet", "enflame-gcu-docker-plugin"))
    assert container["image"] == image.outputs["repoDigest"]
    (runtime,) = [r for r in result.registrations if r.type.endswith(":ContainerRuntime")]
    assert runtime.inputs["podImage"] == image.outputs["repoDigest"]


def test_pushed_image_uses_the_registry_digest_and_a_secret_password(project):
    images = {
        "registry": {"server": "registry.example.com", "username": "robot"},
        "devicePlugin": {"build": True, "push": True, "repository": "registry.example.com/gcu", "tag": "v1"},
    }
    result = run(project, images, registryPassword="s3cret")
    (image,) = result.of_type(IMAGE)
    assert image.inputs["skipPush"] is False
    # The password makes the whole registry input a secret: it never reaches state in plain text.
    registry = image.inputs["registry"]
    assert registry[pulumi.runtime.rpc._special_sig_key] == pulumi.runtime.rpc._special_secret_sig
    assert registry["value"] == {"server": "registry.example.com", "username": "robot", "password": "s3cret"}
    (container,) = containers(result.one("DaemonSet", "enflame-gcu-k8s-plugin"))
    assert container["image"] == image.outputs["repoDigest"]
    assert container["image"].startswith("registry.example.com/gcu/gcu-plugin@sha256:")


def test_a_built_component_that_is_not_deployed_is_still_built(project):
    # gcushareScheduler is not in the seed blueprint: built on request, nothing runs it.
    result = run(project, {"gcushareScheduler": {"build": True}})
    assert [r.name for r in result.of_type(IMAGE)] == ["gcushareScheduler-image"]


def fails_before_any_resource(project, images, *fragments, **config):
    mocks = ImageMocks()
    with pytest.raises(pulumi.RunError) as caught:
        run(project, images, mocks, **config)
    assert mocks.created == [], "a resource was declared before the error"
    message = str(caught.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in:\n{message}"
    return message


def test_missing_driver_package_names_component_pattern_directory_and_source(project):
    (project / "packages" / standin_name("driver")).unlink()
    fails_before_any_resource(
        project,
        {"driver": {"build": True}, "exporter": {"build": True}},
        "gcu-stack:images.driver.build is true",
        "enflame-x86_64-*.run",
        str(project / "packages"),
        "TopsRider",
        "driver/*",
    )


def test_missing_package_directory_is_named(project):
    fails_before_any_resource(
        project, {"packageDir": "nowhere", "gfd": {"build": True}},
        f"{project / 'nowhere'}", "does not exist", "gcu-feature-discovery_*.tar.gz", "topscloud",
    )


def test_two_matching_packages_are_ambiguous(project):
    (project / "packages" / "gcu-exporter_9.9.tar.gz").write_bytes(b"")
    fails_before_any_resource(project, {"exporter": {"build": True}}, "2 files matching gcu-exporter_*.tar.gz", "keep one")


def test_plain_text_registry_password_is_refused(project):
    mocks = ImageMocks()
    with pytest.raises(pulumi.RunError, match="registryPassword: is stored in plain text"):
        run_program(
            {"blueprint": str(SEED_BLUEPRINT), "registryPassword": "s3cret"}, mocks=mocks, project_dir=project
        )
    assert mocks.created == []


def test_push_with_username_needs_the_password(project):
    images = {"registry": {"username": "robot"}, "driver": {"build": True, "push": True}}
    fails_before_any_resource(project, images, "gcu-stack:registryPassword is not", "--secret")


# Validation messages spell the path gcu-stack.<key> (components/errors.describe), as for every setting.
@pytest.mark.parametrize(
    "images, fragment",
    [
        ({"driver": {"bulid": True}}, "gcu-stack:images.driver.bulid: unknown field (did you mean build?)"),
        ({"nfd": {"build": True}}, "gcu-stack:images.nfd: unknown field"),
        ({"exporter": {"tag": "-bad"}}, "gcu-stack:images.exporter.tag"),
        ({"exporter": {"repository": "Not A Repo"}}, "gcu-stack:images.exporter.repository"),
    ],
)
def test_config_mistakes_are_named(project, images, fragment):
    fails_before_any_resource(project, images, fragment)


def test_build_spec_is_what_the_image_resource_gets(project):
    options = ImagesOptions.model_validate({key: {"build": True} for key in ENFLAME_IMAGES})
    packages = check_images(options, None, project)
    spec = build_spec("driver", options, packages["driver"], project)
    assert spec.docker_build_argv() == [
        "build", "-f", str(spec.context / "Dockerfile"), "-t", "artifact.enflame.cn/enflame_docker_images/enflame/gcu-driver:default",
        "--build-arg", "BASE_IMAGE=ubuntu:18.04", "--build-arg", f"PACKAGE={standin_name('driver')}", str(spec.context),
    ]
    # Staging again changes nothing, and drops files that no longer belong.
    stray = spec.context / "packages" / "old.run"
    stray.write_text("x")
    assert build_spec("driver", options, packages["driver"], project) == spec
    assert not stray.exists()
