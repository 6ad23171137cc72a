"""Every component image really built by a private dockerd, then run. Never skipped.

The base image is a Debian bookworm minbase root filesystem from debootstrap
(installed via apt when missing; the tarball is cached under
~/.cache/gcu-stack/rootfs-bookworm-<hash>/), imported as BASE_IMAGE. Enflame's
packages are replaced by stand-ins (devtools/imagebuild.py). Each build gets the
build arguments the pulumi-docker Image gets (components.images.BuildSpec).
"""

import json
import subprocess
import time

import pytest
from realservers import PROJECT_DIR, PYTHON

from components.catalog import BY_KEY
from components.images import DEFS
from components.node import HERE as NODE_CODE
from components.node import NODE_CODE_DIR, NODE_FILES, containerd_host
from components.providers.transports import BACKENDS
from devtools import imagebuild
from devtools.containerd import Containerd

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return tmp_path_factory.mktemp("project")


@pytest.fixture(scope="module")
def builds(dockerd, project):
    specs = imagebuild.prepare(dockerd, project)
    cold = imagebuild.build_all(dockerd, specs)
    warm = imagebuild.build_all(dockerd, specs)
    for spec in specs:
        print(f"{spec.key:18} cold {cold.per_image[spec.key]:6.2f}s  warm {warm.per_image[spec.key]:5.2f}s")
    print(f"{'all images':18} cold {cold.total:6.2f}s  warm {warm.total:5.2f}s  ratio {warm.total / cold.total:.2f}")
    return {spec.key: spec for spec in specs}, cold, warm


def run(dockerd, image, *args, entrypoint=None, check=True):
    options = ["--entrypoint", entrypoint] if entrypoint else []
    return dockerd.docker("run", "--rm", "--network", "none", *options, image, *args, check=check, timeout=60)


def inspect(dockerd, image):
    return json.loads(dockerd.docker("image", "inspect", image).stdout)[0]


def catalog_containers(key):
    return [c for w in BY_KEY[key].workloads for c in w.containers]


def test_every_component_image_is_built(builds):
    specs, _, _ = builds
    assert list(specs) == list(imagebuild.ENFLAME_IMAGES)
    assert set(DEFS) - set(specs) == {"upgradeManager"}   # its image has a module of its own, on its real package


@pytest.mark.parametrize("key", imagebuild.ENFLAME_IMAGES)
def test_the_workload_executable_is_where_the_workload_expects_it(builds, dockerd, key):
    image = builds[0][key].image_name
    assert inspect(dockerd, image)["Config"]["Entrypoint"] == [DEFS[key].entrypoint]
    for container in catalog_containers(key):
        # A container without a command runs the image's entrypoint; one with a command runs that.
        executable = container.command[0] if container.command else DEFS[key].entrypoint
        found = run(dockerd, image, "-c", 'command -v "$0"', executable, entrypoint="/bin/sh", check=False)
        assert found.returncode == 0, f"{container.name}: {executable} is not in {image}"
        assert run(dockerd, image, "-c", 'test -x "$(command -v "$0")"', executable, entrypoint="/bin/sh", check=False).returncode == 0
    answer = run(dockerd, image, "--help")
    assert "Usage" in answer.stdout, answer.stdout


@pytest.mark.parametrize("runtime", sorted(BACKENDS))
def test_runtime_pod_command_runs_in_the_toolkit_image(builds, dockerd, runtime):
    # components/providers/transports.py runs `python3 /opt/gcu-stack/<module> ...` from it, for each runtime.
    module = f"{NODE_CODE_DIR}/{BACKENDS[runtime].script}"
    answer = run(dockerd, builds[0]["toolkit"].image_name, module, "--help", entrypoint="python3")
    assert "activate" in answer.stdout and "inspect" in answer.stdout


def test_the_toolkit_image_carries_exactly_the_node_code(builds, dockerd):
    listed = run(dockerd, builds[0]["toolkit"].image_name, "-c", f"cd {NODE_CODE_DIR} && find . -name '*.py'", entrypoint="/bin/sh").stdout.split()
    assert sorted(n[2:] for n in listed) == sorted(NODE_FILES)
    # ...which is every module of components/node/ but the package's own and the code generator.
    modules = {str(p.relative_to(NODE_CODE)) for p in NODE_CODE.rglob("*.py")} - {"__init__.py", "runtime_api/regenerate.py"}
    assert modules == set(NODE_FILES)


def wait_for(predicate, seconds=30.0):
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def started(dockerd, image, *options):
    return dockerd.docker("run", "-d", "--network", "none", *options, image).stdout.strip()


def stops_promptly(dockerd, container):
    assert dockerd.docker("inspect", "-f", "{{.State.Running}}", container).stdout.strip() == "true"
    began = time.monotonic()
    dockerd.docker("stop", "-t", "10", container)
    took = time.monotonic() - began
    code = dockerd.docker("inspect", "-f", "{{.State.ExitCode}}", container).stdout.strip()
    dockerd.docker("rm", container)
    assert took < 5 and code == "0", f"stopped in {took:.1f}s with exit code {code}: SIGTERM not handled"


def test_toolkit_entrypoint_installs_the_runtime_activates_it_and_stays_up(builds, dockerd, tmp_path):
    # The node, as the DaemonSet mounts it: /usr/local/enflame and docker's directory under /host.
    host = tmp_path / "host"
    (host / "etc" / "docker").mkdir(parents=True)
    (host / "etc" / "docker" / "daemon.json").write_text('{"log-level": "warn"}\n')
    runtime = "/usr/local/enflame/bin/enflame-container-runtime"
    container = started(
        dockerd, builds[0]["toolkit"].image_name, "-v", f"{host}:/host",
        # (CONTAINER_RUNTIME auto asks the API server for the node's runtime: this container has none to ask.)
        "-e", "CONTAINER_RUNTIME=docker", "-e", "RUNTIME_ACTIVATION=none", "-e", f"ENFLAME_RUNTIME_PATH={runtime}",
        "-e", "DAEMON_JSON=/host/etc/docker/daemon.json", "-e", "NODE_NAME=gcu-node-1",
    )
    daemon_json = host / "etc" / "docker" / "daemon.json"
    wait_for(lambda: "enflame" in daemon_json.read_text())
    config = json.loads(daemon_json.read_text())
    assert config == {"log-level": "warn", "runtimes": {"enflame": {"path": runtime}}, "default-runtime": "enflame"}
    assert (host / runtime.lstrip("/")).stat().st_mode & 0o111
    assert (host / "usr/local/enflame/bin/enflame-container-runtime-hook").exists()
    time.sleep(1)  # past activation: still up
    stops_promptly(dockerd, container)


def test_driver_entrypoint_installs_and_stays_up(builds, dockerd, tmp_path):
    # A fake sysfs the stand-in installer "loads" the module into (tests/test_driver_image.py covers upgrades).
    sysfs = tmp_path / "sys"
    sysfs.mkdir()
    image = builds[0]["driver"].image_name
    container = started(dockerd, image, "-v", f"{sysfs}:/fake-sys", "-e", "GCU_SYSFS_ROOT=/fake-sys")
    wait_for(lambda: "gcu-driver: installed" in dockerd.docker("logs", container).stdout)
    assert (sysfs / "module" / "enflame" / "version").read_text().strip() == imagebuild.STANDIN_VERSION
    assert dockerd.docker("exec", container, "/usr/local/bin/gcu-driver-entrypoint", "--check", check=False).returncode == 0
    stops_promptly(dockerd, container)


def test_scheduler_extender_runs_as_a_numeric_non_root_user(builds, dockerd):
    # Its Deployment meets Pod Security "restricted" (runAsNonRoot needs a numeric user to check).
    assert all(c.restricted for c in catalog_containers("gcushareScheduler"))
    assert inspect(dockerd, builds[0]["gcushareScheduler"].image_name)["Config"]["User"] == "65534:65534"


def test_a_rebuild_without_changes_takes_a_fraction_of_the_first_build(builds):
    _, cold, warm = builds
    assert warm.total < 0.5 * cold.total, f"cold {cold.total:.2f}s, warm {warm.total:.2f}s"


def test_image_id_changes_exactly_when_the_package_changes(builds, dockerd, project):
    # The image ID is what a local-only Image's repoDigest holds, hence what rolls the workload.
    specs = builds[0]
    before = {key: inspect(dockerd, spec.image_name)["Id"] for key, spec in specs.items()}
    imagebuild.write_standins(project / "packages", ["exporter"], revision=1)
    for spec in imagebuild.stage(project):
        imagebuild.docker_build(dockerd, spec)
    after = {key: inspect(dockerd, spec.image_name)["Id"] for key, spec in specs.items()}
    assert [key for key in specs if before[key] != after[key]] == ["exporter"]


# The node code in the image runs on its base's libraries (Debian bookworm: tomlkit 0.11, grpcio 1.51, protobuf 3.21),
# the engine on requirements.txt's:
# both must write the same bytes, or each would rewrite the other's drop-in and restart containerd.
IN_IMAGE = f"""
import json, sys
sys.path.insert(0, "{NODE_CODE_DIR}")
import containerd_host, google.protobuf, grpc, kubernetes, tomlkit
document, texts, entry = json.loads(sys.argv[1])
print(json.dumps({{
    "dropin": containerd_host.dumps(document),
    "edits": [[edited, containerd_host.remove_import_text(edited, entry, drop_key=True)[0]]
              for edited in (containerd_host.add_import_text(text, entry) for text in texts)],
    "versions": {{"python": sys.version.split()[0], "tomlkit": tomlkit.__version__, "grpcio": grpc.__version__,
                  "protobuf": google.protobuf.__version__, "kubernetes": kubernetes.__version__}},
}}))
"""
CRI = containerd_host.CRI_PLUGIN[2]
DOCUMENT = {"version": 2, "plugins": {CRI: {
    "sandbox_image": "registry.local/pause:3.9", "max_container_log_line_size": 8192, "enable_unprivileged_ports": False,
    "containerd": {"snapshotter": "overlayfs", "default_runtime_name": "enflame", "runtimes": {
        "runc": {"runtime_type": "io.containerd.runc.v2", "options": {"SystemdCgroup": True}},
        "enflame": {"runtime_type": "io.containerd.runc.v2", "options": {"BinaryName": "/usr/local/enflame/bin/enflame-container-runtime"}}}},
    "registry": {"mirrors": {"docker.io": {"endpoint": ["https://mirror.local", "https://registry-1.docker.io"]}},
                 "configs": {"registry.local:5000": {"tls": {"insecure_skip_verify": True}}}}}}}
TEXTS = [
    '# a node\nversion = 2\nroot = "/var/lib/containerd"\n\n[grpc]\n  address = "/run/containerd/containerd.sock"\n',
    'version = 2\nimports = ["/etc/containerd/site.toml"] # ours go last\n[plugins."io.containerd.grpc.v1.cri"]\n',
    'version = 2\r\nimports = [\r\n  "/a.toml",\r\n  "/b.toml"\r\n]\r\n[x]\r\n',
    "# settings come later\n",
    '[grpc]\naddress="x"\nversion=3\n',
]


def test_the_node_code_in_the_toolkit_image_writes_what_the_engine_writes(builds, dockerd):
    entry = "/etc/containerd/conf.d/99-enflame.toml"
    answer = run(dockerd, builds[0]["toolkit"].image_name, "-c", IN_IMAGE, json.dumps([DOCUMENT, TEXTS, entry]), entrypoint="python3")
    found = json.loads(answer.stdout)
    print("toolkit image:", found["versions"])
    assert found["dropin"] == containerd_host.dumps(DOCUMENT)
    expected = []
    for text in TEXTS:
        edited = containerd_host.add_import_text(text, entry)
        expected.append([edited, containerd_host.remove_import_text(edited, entry, drop_key=True)[0]])
    assert found["edits"] == expected


@pytest.fixture(scope="module")
def containerd(tmp_path_factory):
    state_dir = tmp_path_factory.mktemp("containerd")
    subprocess.run([PYTHON, "-m", "devtools.containerd", "up", "--state-dir", str(state_dir)], check=True, cwd=PROJECT_DIR,
                   capture_output=True, timeout=120)
    yield Containerd.from_state_dir(state_dir)
    subprocess.run([PYTHON, "-m", "devtools.containerd", "down", "--state-dir", str(state_dir)], cwd=PROJECT_DIR,
                   capture_output=True, timeout=120)


CRI_IN_IMAGE = f"""
import json, sys
sys.path.insert(0, "{NODE_CODE_DIR}")
import cri_client
address = sys.argv[1]
print(json.dumps({{"runtimes": cri_client.runtimes(address), "version": cri_client.version(address),
                   "plugins": cri_client.plugins(address), "googleapis": "google.rpc" in sys.modules}}))
"""


def test_the_toolkit_image_activates_enflame_in_a_real_containerd(builds, dockerd, containerd):
    """The CLI the pods run, in the image, against containerd 1.6.20: the TOML edits and the CRI client (grpcio and the
    generated code on the image's protobuf) there. containerd itself is restarted from outside (`--mode none`)."""
    d = containerd
    image = builds[0]["toolkit"].image_name
    mounts = ["-v", f"{d.workdir}:{d.workdir}", "-v", f"{d.socket.parent}:{d.socket.parent}"]
    original = d.config_file.read_bytes()
    dropin = d.workdir / "conf.d" / "99-enflame.toml"
    common = ["--config-toml", str(d.config_file), "--dropin", str(dropin), "--address", d.address, "--node", "image-node",
              "--mode", "none"]

    def node_code(*argv):
        done = dockerd.docker("run", "--rm", "--network", "none", *mounts, "--entrypoint", "python3", image, *argv, check=False, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        return json.loads(done.stdout.splitlines()[-1])

    before = node_code("-c", CRI_IN_IMAGE, d.address)
    assert before["runtimes"]["default"] == "runc" and "enflame" not in before["runtimes"]["runtimes"]
    assert before["version"]["version"].startswith("1.6.20")
    plugins = {(p["type"], p["id"]): p["error"] for p in before["plugins"]}
    assert plugins[("io.containerd.grpc.v1", "cri")] is None and plugins[("io.containerd.snapshotter.v1", "devmapper")]
    assert before["googleapis"] is False  # google.rpc.Status from runtime_api/status_pb2.py: the image has no googleapis package

    state = node_code(f"{NODE_CODE_DIR}/containerd_host.py", "activate", "--runtime-path", d.runc_path, *common)
    assert state["changed"] and state["importAdded"] and state["active"] is None
    d.restart()
    inspected = node_code(f"{NODE_CODE_DIR}/containerd_host.py", "inspect", "--state-json", json.dumps(state), *common)
    assert inspected["drift"] == [] and inspected["active"] is True and inspected["defaultRuntime"] == "enflame"
    # The engine plans exactly what the image wrote: its next run (the provider's) changes nothing.
    host = containerd_host.ContainerdHost(containerd_host.ContainerdSettings(
        config_toml=str(d.config_file), dropin=str(dropin), address=d.address, label="image-node"))
    assert containerd_host.activate(host, d.runc_path, mode="none")["changed"] is False

    restored = node_code(f"{NODE_CODE_DIR}/containerd_host.py", "restore", "--state-json", json.dumps(state), *common)
    assert restored["exact"] is True
    d.restart()
    assert d.config_file.read_bytes() == original and not dropin.exists()
    after = node_code("-c", CRI_IN_IMAGE, d.address)
    assert after["runtimes"] == before["runtimes"]
