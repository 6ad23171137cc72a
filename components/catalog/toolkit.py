"""The GCU container runtime (toolkit): installs the enflame runtime on every GCU node.

Its step (`then`) makes that runtime docker's default on each node
(components/steps/runtime_activation.py); the device plugin waits for the step.
"""

from __future__ import annotations

from pathlib import Path

from ..hoststate import runtime_host
from ..model import BuildContext, ComponentDef, ContainerDef, Extras, HostMount, ImageDef, PodAdditions, Resources
from ..resolve import ResolvedComponent
from ..steps.runtime_activation import RUNTIME_ACTIVATION
from .common import GCU_LOGS, TOPSCLOUD_HINT, one

RUNTIME_HOST = Path(runtime_host.__file__).resolve()


def extras(component: ResolvedComponent, context: BuildContext) -> Extras:
    # The image's entrypoint (runtime_host.py) activates the runtime on its node at start, so
    # nodes that join later need no `pulumi up`. Host paths are mounted under /host.
    runtime = context.settings.docker_runtime
    inside = runtime_host.in_container
    directories = runtime_host.host_directories(runtime.daemon_json, runtime.docker_host, runtime.pid_file)
    return Extras(
        pod=PodAdditions(
            env={
                "RUNTIME_ACTIVATION": runtime.mode,
                "ENFLAME_RUNTIME_PATH": runtime.runtime_path,
                "DAEMON_JSON": inside(runtime.daemon_json),
                "DOCKER_HOST": "unix://" + inside(runtime.docker_host[len("unix://"):]),
                "DOCKER_PID_FILE": inside(runtime.pid_file),
            },
            mounts=tuple(
                HostMount(f"docker-host-{i}", d, inside(d), read_only=False, type="DirectoryOrCreate")
                for i, d in enumerate(directories)
            ),
        )
    )


TOOLKIT = ComponentDef(
    key="toolkit",
    type_name="Toolkit",
    default_name="enflame-gcu-docker-plugin",
    default_image="gcu-runtime",
    after=("driver",),
    workloads=one(
        ContainerDef(
            name="gcu-runtime",
            # Privileged: it installs the enflame runtime on the host and rewrites docker's daemon.json.
            privileged=True,
            # Plus the directories of daemon.json, docker.sock and docker.pid (extras, from the settings).
            mounts=(
                HostMount("runtime-install", "/usr/local/enflame", "/host/usr/local/enflame", read_only=False, type="DirectoryOrCreate"),
                GCU_LOGS,
            ),
            resources=Resources("50m", "64Mi", "500m", "256Mi"),
        ),
        host_pid=True,  # to signal the host's dockerd after changing its runtime config
    ),
    settings=RUNTIME_ACTIVATION.settings,
    extras=extras,
    then=RUNTIME_ACTIVATION,
    image=ImageDef(
        package="enflame-container-toolkit_*.tar.gz",
        source=TOPSCLOUD_HINT,
        binary="enflame-container-runtime",
        dockerfile="toolkit",
        entrypoint="/usr/local/bin/gcu-runtime-entrypoint",
        # runtime_host.py needs Python >= 3.7: ubuntu:18.04 has 3.6.
        base_image="ubuntu:20.04",
        extra_files=(("runtime_host.py", RUNTIME_HOST),),
    ),
)
