"""The driver image, really built and run: it installs the version it carries, and only that.

The image is built by a private dockerd from images/driver as components/images.py stages
it (devtools/imagebuild.py), on the debootstrap bookworm base, but with a fake installer
package of this test's own: `enflame-x86_64-2.0.0.run` "loads" the module by writing a
fake sysfs, `<GCU_SYSFS_ROOT>/module/enflame/{version,refcnt}`. Each case runs the real
entrypoint in a real container against a fake node directory mounted at /node: its sysfs
(GCU_SYSFS_ROOT), device files (GCU_DEVICE_FILES), an rmmod that removes the fake module
(GCU_RMMOD) and the log directory. The container's own /proc is the process table scanned
for holders of a device file: a real `sleep` in the container holds /node/dev/gcu0 open.
One image serves every case. Never skipped.
"""

import dataclasses
import shutil
import time
from pathlib import Path

import pytest

from components.images import build_spec
from devtools import imagebuild
from devtools.rootfs import import_base_image, rootfs_tarball

pytestmark = pytest.mark.timeout(900)

OLD, NEW = "1.0.0", "2.0.0"
PACKAGE = f"enflame-x86_64-{NEW}.run"
ENTRYPOINT = "/usr/local/bin/gcu-driver-entrypoint"

# Test stand-in for Enflame's installer. FAKE_INSTALL_FAIL makes it fail with that
# message; FAKE_LOADS_VERSION is the version the "loaded" module reports ("" for none).
FAKE_INSTALLER = f"""#!/bin/sh
echo "fake installer ran: args [$*] WITH_REBOOT=${{WITH_REBOOT:-unset}}"
if [ -n "${{FAKE_INSTALL_FAIL:-}}" ]; then
    echo "fake installer: $FAKE_INSTALL_FAIL" >&2
    exit 1
fi
module=$GCU_SYSFS_ROOT/module/${{GCU_DRIVER_MODULE:-enflame}}
mkdir -p "$module/holders"
version=${{FAKE_LOADS_VERSION-{NEW}}}
[ -z "$version" ] || printf '%s\\n' "$version" >"$module/version"
echo 0 >"$module/refcnt"
"""

# Like rmmod: refuses a module in use, otherwise the module is gone.
FAKE_RMMOD = """#!/bin/sh
echo "rmmod $*" >>/node/rmmod.calls
module=$GCU_SYSFS_ROOT/module/$1
read -r refcnt <"$module/refcnt"
if [ "$refcnt" != 0 ]; then echo "rmmod: ERROR: Module $1 is in use" >&2; exit 1; fi
rm -rf "$module"
"""

NODE_ENV = {
    "GCU_SYSFS_ROOT": "/node/sys",
    "GCU_DEVICE_FILES": "/node/dev/gcu* /node/dev/gcuctl",
    "GCU_RMMOD": "/node/bin/rmmod",
    "GCU_LOG_DIR": "/node/log",
    "GCU_RETRY_SECONDS": "1",
}


@pytest.fixture(scope="module")
def spec(dockerd, tmp_path_factory):
    """The driver image's build, staged as components/images.py stages it, with the fake installer."""
    project = tmp_path_factory.mktemp("project")
    options = imagebuild.test_options()
    package = options.package_path(project) / PACKAGE
    package.parent.mkdir(parents=True)
    package.write_text(FAKE_INSTALLER)
    package.chmod(0o755)
    import_base_image(dockerd, rootfs_tarball(), imagebuild.BASE_IMAGE)
    return build_spec("driver", options, package, project)


@pytest.fixture(scope="module")
def image(dockerd, spec):
    took = imagebuild.docker_build(dockerd, spec)
    print(f"driver image built in {took:.1f}s")
    return spec.image_name


@pytest.fixture
def node(tmp_path):
    """A fake node: sysfs without the module, device files, rmmod, log directory."""
    root = tmp_path / "node"
    for directory in ("sys/module", "dev", "bin", "log"):
        (root / directory).mkdir(parents=True)
    (root / "dev" / "gcu0").touch()
    (root / "dev" / "gcuctl").touch()
    (root / "bin" / "rmmod").write_text(FAKE_RMMOD)
    (root / "bin" / "rmmod").chmod(0o755)
    return root


def load(node: Path, version: str, refcnt: int = 0, holders=()) -> Path:
    module = node / "sys" / "module" / "enflame"
    (module / "holders").mkdir(parents=True)
    (module / "version").write_text(version + "\n")
    (module / "refcnt").write_text(f"{refcnt}\n")
    for holder in holders:
        (module / "holders" / holder).mkdir()
    return module


def loaded_version(node: Path):
    version = node / "sys" / "module" / "enflame" / "version"
    return version.read_text().strip() if version.exists() else None


def installer_runs(node: Path) -> int:
    log = node / "log" / "install.log"
    return log.read_text().count("fake installer ran") if log.exists() else 0


def rmmod_calls(node: Path) -> list:
    calls = node / "rmmod.calls"
    return calls.read_text().splitlines() if calls.exists() else []


def env_args(env: dict) -> list:
    """docker run -e options; a None value leaves the variable unset."""
    return [argument for name, value in env.items() if value is not None for argument in ("-e", f"{name}={value}")]


def start(dockerd, image, node, *args, env=None, shell=None):
    """The entrypoint in a detached container on `node`; with `shell`, run through sh -c first."""
    options = ["-v", f"{node}:/node", *env_args({**NODE_ENV, **(env or {})})]
    if shell:
        options += ["--entrypoint", "/bin/sh"]
        args = ("-c", f'{shell}; exec {ENTRYPOINT} "$@"', "sh", *args)
    return dockerd.docker("run", "-d", "--network", "none", *options, image, *args).stdout.strip()


def logs(dockerd, container) -> str:
    result = dockerd.docker("logs", container)
    return result.stdout + result.stderr


def wait_for_log(dockerd, container, text, seconds=60.0) -> str:
    deadline = time.monotonic() + seconds
    while True:
        output = logs(dockerd, container)
        if text in output:
            return output
        state = dockerd.docker("inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", container).stdout.strip()
        assert not state.startswith("exited"), f"container {state} before logging {text!r}:\n{output}"
        assert time.monotonic() < deadline, f"no {text!r} within {seconds}s:\n{output}"
        time.sleep(0.2)


def exit_code(dockerd, container, seconds=60.0) -> int:
    return int(dockerd.docker("wait", container, timeout=seconds).stdout.strip())


def check(dockerd, container):
    """The readiness probe, as the kubelet runs it: exec in the running container."""
    return dockerd.docker("exec", container, ENTRYPOINT, "--check", check=False)


def running(dockerd, container) -> bool:
    return dockerd.docker("inspect", "-f", "{{.State.Running}}", container).stdout.strip() == "true"


def stops_promptly(dockerd, container):
    assert running(dockerd, container), logs(dockerd, container)
    began = time.monotonic()
    dockerd.docker("stop", "-t", "10", container)
    took = time.monotonic() - began
    code = dockerd.docker("inspect", "-f", "{{.State.ExitCode}}", container).stdout.strip()
    assert took < 5 and code == "0", f"stopped in {took:.1f}s with exit code {code}: SIGTERM not handled"


@pytest.fixture
def containers(dockerd):
    started = []
    yield started
    for container in started:
        dockerd.docker("rm", "-f", container, check=False)


@pytest.fixture
def run(dockerd, image, node, containers):
    def run(*args, **options):
        container = start(dockerd, image, node, *args, **options)
        containers.append(container)
        return container
    return run


def test_help_documents_the_contract(dockerd, image):
    answer = dockerd.docker("run", "--rm", "--network", "none", image, "--help").stdout
    for word in ("Usage", "--check", "--version", "WITH_REBOOT", "GCU_DRIVER_MODULE", "GCU_SYSFS_ROOT",
                 "GCU_PROC_ROOT", "GCU_DEVICE_FILES", "GCU_RMMOD", "GCU_RETRY_SECONDS", "GCU_LOG_DIR",
                 "GCU_STATUS_FILE", "Exit codes"):
        assert word in answer, f"--help does not mention {word}:\n{answer}"


def test_the_image_carries_the_version_of_its_package(dockerd, image):
    version = dockerd.docker("run", "--rm", "--network", "none", image, "--version").stdout.strip()
    assert version == NEW
    carried = dockerd.docker("run", "--rm", "--network", "none", "--entrypoint", "cat", image,
                             "/opt/enflame/driver/VERSION").stdout
    assert carried == f"{NEW}\n"


def test_not_loaded_installs_then_ready_and_stays_up(dockerd, image, node, run):
    before = dockerd.docker("run", "--rm", "--network", "none", "-v", f"{node}:/node", *env_args(NODE_ENV),
                            image, "--check", check=False)
    assert before.returncode == 1 and "not loaded" in before.stdout, before.stdout + before.stderr
    container = run("--installer-flag", env={"WITH_REBOOT": "true"})
    output = wait_for_log(dockerd, container, "gcu-driver: ready")
    assert "kernel module enflame is not loaded" in output
    assert installer_runs(node) == 1
    assert "fake installer ran: args [--installer-flag] WITH_REBOOT=true" in (node / "log" / "install.log").read_text()
    assert loaded_version(node) == NEW and rmmod_calls(node) == []
    probe = check(dockerd, container)
    assert probe.returncode == 0, probe.stdout + probe.stderr
    time.sleep(1)  # past the install: still up
    stops_promptly(dockerd, container)


def test_same_version_loaded_runs_nothing(dockerd, image, node, run):
    load(node, NEW, refcnt=3)  # in use, and that is fine: nothing to change
    container = run()
    output = wait_for_log(dockerd, container, "gcu-driver: ready")
    assert f"kernel module enflame {NEW} is loaded, the version this image installs; nothing to do" in output
    assert installer_runs(node) == 0 and rmmod_calls(node) == []
    assert check(dockerd, container).returncode == 0
    stops_promptly(dockerd, container)


def test_other_version_not_in_use_is_unloaded_and_replaced(dockerd, image, node, run):
    load(node, OLD)
    container = run()
    output = wait_for_log(dockerd, container, "gcu-driver: ready")
    assert output.index(f"unloading kernel module enflame {OLD}") < output.index(f"installing {PACKAGE}")
    assert rmmod_calls(node) == ["rmmod enflame"]
    assert installer_runs(node) == 1 and loaded_version(node) == NEW
    assert check(dockerd, container).returncode == 0
    stops_promptly(dockerd, container)


def test_without_rmmod_in_the_image_the_hosts_is_used(dockerd, image, node, run):
    # The Debian base has no kmod: with GCU_RMMOD unset, the host's rmmod is run in the
    # host's root, /proc/1/root under hostPID. Here a fake host root with a static busybox.
    host = node / "hostroot"
    (host / "bin").mkdir(parents=True)
    shutil.copy(shutil.which("busybox") or "/usr/bin/busybox", host / "bin" / "busybox")
    for applet in ("sh", "rm"):
        (host / "bin" / applet).symlink_to("busybox")
    (host / "usr" / "sbin").mkdir(parents=True)
    (host / "usr" / "sbin" / "rmmod").write_text('#!/bin/sh\necho "host rmmod $*" >>/rmmod.calls\nrm -rf "/sys/module/$1"\n')
    (host / "usr" / "sbin" / "rmmod").chmod(0o755)
    (node / "proc" / "1").mkdir(parents=True)
    (node / "proc" / "1" / "root").symlink_to("/node/hostroot")
    load(host, OLD)
    container = run(env={"GCU_RMMOD": None, "GCU_PROC_ROOT": "/node/proc", "GCU_SYSFS_ROOT": "/node/hostroot/sys"})
    output = wait_for_log(dockerd, container, "gcu-driver: ready")
    assert f"unloading kernel module enflame {OLD} with: chroot /node/proc/1/root rmmod enflame" in output, output
    assert (host / "rmmod.calls").read_text() == "host rmmod enflame\n"
    assert loaded_version(host) == NEW and check(dockerd, container).returncode == 0


def test_other_version_held_by_modules_is_left_alone_and_named(dockerd, image, node, run):
    module = load(node, OLD, refcnt=2, holders=("enflame_peermem",))
    container = run()
    output = wait_for_log(dockerd, container, "looking again every 1s")
    assert f"kernel module enflame {OLD} is loaded but this image installs {NEW}, and the device is in use" in output
    assert "module refcount 2 (/node/sys/module/enflame/refcnt)" in output
    assert "holder modules: enflame_peermem" in output
    time.sleep(2.5)  # a few retries: still holding off, still not Ready
    assert running(dockerd, container)
    output = logs(dockerd, container)
    assert output.count("Held by:") == 1 and "still in use by the same holders; looking again in 1s" in output
    assert rmmod_calls(node) == [] and installer_runs(node) == 0 and loaded_version(node) == OLD
    assert (module / "holders" / "enflame_peermem").is_dir()
    # The probe's output (shown in the pod's events) says why, naming the holders, whenever it runs: the status
    # file is rewritten every retry, and a probe once read it between truncation and write (CI, stop 32).
    for _ in range(8):
        probe = check(dockerd, container)
        print(output, probe.stdout, sep="")
        assert probe.returncode == 1
        assert f"kernel module enflame {OLD} is loaded; this image installs {NEW}" in probe.stdout
        assert "module refcount 2" in probe.stdout and "enflame_peermem" in probe.stdout, probe.stdout
    stops_promptly(dockerd, container)  # the retry wait does not delay SIGTERM
    assert loaded_version(node) == OLD


def test_other_version_held_by_a_process_waits_until_it_is_gone(dockerd, image, node, run):
    load(node, OLD)
    # A real process holding a device file open, as a GCU workload does (hostPID on a node).
    # The entrypoint starts once the holder has the device open as `sleep` (it scans /proc once before it waits: a
    # loaded machine once let it start before the backgrounded child had opened the file, and unload the module).
    container = run(shell="sleep 600 3</node/dev/gcu0 & h=$!; echo $h >/node/holder.pid; "
                          'until [ -e /proc/$h/fd/3 ] && [ "$(cat /proc/$h/comm)" = sleep ]; do sleep 0.05; done')
    output = wait_for_log(dockerd, container, "looking again every 1s")
    print(output)
    holder = (node / "holder.pid").read_text().strip()
    assert f"pid {holder} (sleep) has /node/dev/gcu0 open" in output, output
    assert "module refcount" not in output and "holder modules" not in output
    assert rmmod_calls(node) == [] and installer_runs(node) == 0 and loaded_version(node) == OLD
    probe = check(dockerd, container)
    assert probe.returncode == 1 and f"pid {holder} (sleep) has /node/dev/gcu0 open" in probe.stdout, probe.stdout

    began = time.monotonic()
    dockerd.docker("exec", container, "sh", "-c", f"kill {holder}")  # the job finishes
    output = wait_for_log(dockerd, container, "gcu-driver: ready", seconds=30)
    print(f"held by a process: Ready {time.monotonic() - began:.1f}s after it exited")
    assert rmmod_calls(node) == ["rmmod enflame"] and installer_runs(node) == 1 and loaded_version(node) == NEW
    assert check(dockerd, container).returncode == 0
    stops_promptly(dockerd, container)


def test_held_with_retries_off_exits_3_naming_the_holder(dockerd, image, node, run):
    load(node, OLD, refcnt=1)
    container = run(env={"GCU_RETRY_SECONDS": "0"})
    assert exit_code(dockerd, container) == 3
    output = logs(dockerd, container)
    assert "module refcount 1" in output and "giving up" in output, output
    assert rmmod_calls(node) == [] and loaded_version(node) == OLD


def test_installer_failure_is_reported_with_its_log(dockerd, image, node, run):
    container = run(env={"FAKE_INSTALL_FAIL": "no kernel headers for 6.1.0-test"})
    assert exit_code(dockerd, container) == 1
    output = logs(dockerd, container)
    assert "fake installer: no kernel headers for 6.1.0-test" in output  # the log's tail
    assert f"gcu-driver: {PACKAGE} failed; full log in /node/log/install.log on the node" in output
    assert "gcu-driver: ready" not in output and loaded_version(node) is None


@pytest.mark.parametrize("loads, expected", [
    ("1.9.9", "kernel module enflame 1.9.9 is loaded, not 2.0.0 (this image's version)"),
    ("", "kernel module enflame is loaded but reports no version (/node/sys/module/enflame/version), not 2.0.0"),
])
def test_a_wrong_version_loaded_by_the_installer_fails(dockerd, image, node, run, loads, expected):
    container = run(env={"FAKE_LOADS_VERSION": loads})
    assert exit_code(dockerd, container) == 1
    output = logs(dockerd, container)
    assert f"after installing {PACKAGE}, {expected}" in output, output


def test_an_explicit_driver_version_build_argument_wins(dockerd, spec, node, containers):
    # The version the module reports may not be the one in the package name: DRIVER_VERSION says it.
    explicit = dataclasses.replace(spec, image_name=f"{spec.image_name}-explicit",
                                   args={**spec.args, "DRIVER_VERSION": f"{NEW}-rc1"})
    imagebuild.docker_build(dockerd, explicit)
    assert dockerd.docker("run", "--rm", "--network", "none", explicit.image_name, "--version").stdout == f"{NEW}-rc1\n"
    load(node, f"{NEW}-rc1")
    container = start(dockerd, explicit.image_name, node)
    containers.append(container)
    wait_for_log(dockerd, container, "nothing to do")
    assert check(dockerd, container).returncode == 0 and installer_runs(node) == 0


@pytest.mark.parametrize("package, args, message", [
    ("driver.run", {}, "cannot read a driver version from the package name 'driver.run'"),
    (PACKAGE, {"DRIVER_VERSION": "2.0 beta"}, "driver version '2.0 beta' may hold only"),
])
def test_an_image_without_a_usable_version_is_not_built(dockerd, spec, tmp_path, package, args, message):
    path = tmp_path / "packages" / package
    path.parent.mkdir()
    path.write_text(FAKE_INSTALLER)
    staged = build_spec("driver", imagebuild.test_options(), path, tmp_path)
    broken = dataclasses.replace(staged, image_name=f"{spec.image_name}-broken", args={**staged.args, **args})
    with pytest.raises(RuntimeError, match="docker build of driver") as failure:
        imagebuild.docker_build(dockerd, broken)
    assert message in str(failure.value)
