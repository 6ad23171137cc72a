"""The gcu-upgrade-manager image (images/upgrade-manager), built from its real package, then run offline.

service.package writes the package (the Pulumi CLI and language host of the toolchain on PATH, the kubernetes plugin
of PULUMI_HOME, this program, the runtime pins for CPython 3.11); components.images stages its context and
devtools.imagebuild builds it as the pulumi-docker Image would, on the debootstrap Debian bookworm base
(tests/test_image_builds.py), RUN steps without network. Every container runs with `--network none`.
"""

import json
import subprocess
import time

import pytest
from realservers import PROJECT_DIR

from components.images import DEFS, ImagesOptions, build_spec, check_images
from devtools import imagebuild
from devtools.rootfs import import_base_image, rootfs_tarball
from service import package

pytestmark = pytest.mark.timeout(1200)
KEY = "upgradeManager"
PINS = package.runtime_pins(PROJECT_DIR / "requirements.txt")


@pytest.fixture(scope="module")
def image(dockerd, tmp_path_factory):
    """The image built twice (cold, then warm) from a package made twice (the site-packages cache: first, then hit)."""
    workdir = tmp_path_factory.mktemp("project")
    packages = workdir / "packages"
    timings = {}
    for run in ("first", "second"):
        started = time.monotonic()
        made = package.package(packages)
        timings[f"package ({run})"] = time.monotonic() - started
    base = import_base_image(dockerd, rootfs_tarball(), imagebuild.BASE_IMAGE)
    options = ImagesOptions.model_validate({"packageDir": str(packages), "network": "none",
                                            KEY: {"build": True, "baseImage": base, "tag": "test"}})
    found = check_images(options, None, workdir)
    assert found[KEY] == made
    spec = build_spec(KEY, options, found[KEY], workdir)
    timings["image build (cold)"] = imagebuild.docker_build(dockerd, spec)
    timings["image build (warm)"] = imagebuild.docker_build(dockerd, spec)
    size = json.loads(dockerd.docker("image", "inspect", spec.image_name).stdout)[0]["Size"]
    print(f"package {made.name}: {made.stat().st_size / 2**20:.0f} MiB; image {spec.image_name}: {size / 2**20:.0f} MiB")
    layers = dockerd.docker("history", "--format", "{{.Size}}\t{{.CreatedBy}}", spec.image_name).stdout
    print("".join(f"  {line[:110]}\n" for line in layers.splitlines()), end="")
    for what, seconds in timings.items():
        print(f"{what:20} {seconds:6.1f}s")
    return spec.image_name


def run(dockerd, image, *args, entrypoint=None, env=(), check=True, timeout=120):
    options = ["--entrypoint", entrypoint] if entrypoint else []
    for item in env:
        options += ["-e", item]
    return dockerd.docker("run", "--rm", "--network", "none", *options, image, *args, check=check, timeout=timeout)


def host_pulumi_version() -> str:
    return subprocess.run(["pulumi", "version"], capture_output=True, text=True, check=True).stdout.strip()


def test_the_entrypoint_is_the_components(image, dockerd):
    config = json.loads(dockerd.docker("image", "inspect", image).stdout)[0]["Config"]
    assert config["Entrypoint"] == [DEFS[KEY].entrypoint]


def test_the_cli_is_the_toolchains(image, dockerd):
    assert run(dockerd, image, "version", entrypoint="pulumi").stdout.strip() == host_pulumi_version()


def test_the_kubernetes_plugin_is_installed_and_starts_offline(image, dockerd):
    version = package.pinned_version(PINS, "pulumi-kubernetes")
    listed = json.loads(run(dockerd, image, "plugin", "ls", "--json", entrypoint="pulumi").stdout)
    assert [(p["kind"], p["name"], p["version"]) for p in listed] == [("resource", "kubernetes", version)]
    # The engine resolves kubernetes@<pin> from PULUMI_HOME and runs it (GetSchema), with no network and no plugin on
    # PATH (an ambient plugin would be used without a version check, and warned about on every run).
    schema = json.loads(run(dockerd, image, "package", "get-schema", f"kubernetes@{version}", entrypoint="pulumi").stdout)
    assert schema["name"] == "kubernetes" and schema["version"].split("+")[0] == version
    ambient = run(dockerd, image, "-c", "command -v pulumi-resource-kubernetes", entrypoint="/bin/sh", check=False)
    assert ambient.returncode != 0, ambient.stdout


def test_the_entrypoint_prepares_a_fresh_pulumi_home(image, dockerd):
    # PULUMI_HOME on a volume (a read-only root's emptyDir): the entrypoint links the plugins into it.
    answer = run(dockerd, image, "-c", "gcu-upgrade-manager --prepare && pulumi plugin ls --json",
                 entrypoint="/bin/sh", env=["PULUMI_HOME=/tmp/fresh-home"])
    assert [p["name"] for p in json.loads(answer.stdout)] == ["kubernetes"]


def test_help_shows_the_serve_options(image, dockerd):
    answer = run(dockerd, image, "--help").stdout
    for option in ("--listen", "--token-file", "--blueprints", "--oplog", "--state-dir", "--project-dir"):
        assert option in answer, answer


def test_the_program_imports_from_its_venv(image, dockerd):
    code = ("import sys; sys.path.insert(0, '/opt/gcu-stack/policies'); "
            "import components.program, service.app, pulumi, pulumi_kubernetes, gcu_policies; "
            "print(sys.prefix, pulumi.__file__, gcu_policies.__file__)")
    prefix, sdk, policies = run(dockerd, image, "-c", code, entrypoint="/opt/gcu-stack/.venv/bin/python").stdout.split()
    assert prefix == "/opt/gcu-stack/.venv" and sdk.startswith("/opt/gcu-stack/.venv/lib/python3.11/site-packages/")
    assert policies.startswith("/opt/gcu-stack/policies/")
    # The policy pack runs with its own .venv, the program's.
    linked = run(dockerd, image, "-c", "readlink -f /opt/gcu-stack/policies/.venv", entrypoint="/bin/sh").stdout.strip()
    assert linked == "/opt/gcu-stack/.venv"


def test_a_file_backend_stack_is_made_offline(image, dockerd):
    script = ("mkdir /tmp/backend && pulumi login file:///tmp/backend && pulumi stack init t && pulumi stack ls --json "
              "&& pulumi config set gcu-stack:spec '{}' && pulumi config get gcu-stack:spec")
    answer = run(dockerd, image, "-c", script, entrypoint="/bin/sh", env=["PULUMI_CONFIG_PASSPHRASE="])
    assert "Created stack 't'" in answer.stdout + answer.stderr
    assert answer.stdout.strip().endswith("{}")


def test_the_service_answers_offline(image, dockerd):
    container = dockerd.docker(
        "run", "-d", "--network", "none", "-e", "PULUMI_CONFIG_PASSPHRASE=", image,
        "--no-auth", "--listen", "127.0.0.1:32765", "--blueprints", "/tmp", "--oplog", "/tmp/op-log",
    ).stdout.strip()
    try:
        get = ("import sys, urllib.request; "
               "print(urllib.request.urlopen('http://127.0.0.1:32765' + sys.argv[1], timeout=60).read().decode())")
        deadline = time.monotonic() + 60
        while True:
            health = dockerd.docker("exec", container, "/opt/gcu-stack/.venv/bin/python", "-c", get, "/healthz", check=False)
            if health.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert json.loads(health.stdout) == {"status": "ok"}, dockerd.docker("logs", container, check=False).stderr
        # Listing the stacks runs the Pulumi CLI (through the service's holder shim) against the default file backend.
        listed = dockerd.docker("exec", container, "/opt/gcu-stack/.venv/bin/python", "-c", get, "/gum/v1/gr", check=False)
        assert listed.returncode == 0, listed.stderr + dockerd.docker("logs", container, check=False).stderr
        assert json.loads(listed.stdout)["content"] == {"apiVersion": "topsops.enflame.com/v1", "kind": "GcuResourceList",
                                                        "items": []}, listed.stdout
        # ...the backend the entrypoint defaults to, in GCU_STATE_DIR.
        backend = dockerd.docker("exec", container, "ls", "-A", "/var/lib/gcu-upgrade-manager/state/backend").stdout.split()
        assert ".pulumi" in backend, backend
    finally:
        dockerd.docker("rm", "-f", container, check=False)
