"""The GCU container runtime (toolkit): installs the enflame runtime on every GCU node.

Its step (`then`) activates that runtime through each node's container runtime, docker or
containerd (components/steps/runtime_activation.py); the device plugin waits for the step.
The toolkit's own pods do the same at start, so nodes that join later get the runtime too.
"""

from __future__ import annotations

import shlex

from ..manifests import labels, metadata
from ..model import BuildContext, ComponentDef, ContainerDef, Extras, HostMount, ImageDef, PodAdditions, RbacDef, ResolvedComponent, Resources
from ..node import HERE as NODE_CODE
from ..node import NODE_FILES, runtime_host
from ..steps.runtime_activation import RUNTIME_ACTIVATION, RuntimeSettings
from .common import GCU_LOGS, TOPSCLOUD_HINT, one

RUNTIME_CLASS = runtime_host.RUNTIME_NAME  # pods may ask for it by name: runtimeClassName: enflame


def _backends(settings: RuntimeSettings) -> list:
    """The runtimes this stack may meet on its nodes, each with its options."""
    from ..providers.transports import BACKENDS  # how the engine reaches each runtime: only when the plan is built

    options = {"docker": settings.docker_runtime, "containerd": settings.containerd}
    return [BACKENDS[runtime](options[runtime].model_dump(by_alias=True)) for runtime in settings.runtimes()]


def _environment(settings: RuntimeSettings) -> dict[str, str]:
    """What the image's entrypoint (node_runtime.py) reads, for each runtime this stack may meet: each
    backend's settings as a pod on the node sees them (paths under /host, restarts through the host's init)."""
    env = {"CONTAINER_RUNTIME": settings.container_runtime}
    for backend in _backends(settings):
        o, s = backend.options, backend.settings("", inside=True)
        if backend.runtime == "docker":
            env.update(
                {
                    "RUNTIME_ACTIVATION": o["mode"],
                    "ENFLAME_RUNTIME_PATH": o["runtimePath"],
                    "DAEMON_JSON": s.daemon_json,
                    "DOCKER_HOST": s.docker_host,
                    "DOCKER_PID_FILE": s.pid_file,
                    "DOCKER_RESTART_COMMAND": shlex.join(s.restart_command),
                }
            )
        else:
            env.update(
                {
                    "CONTAINERD_ACTIVATION": o["mode"],
                    "CONTAINERD_CONFIG": s.config_toml,
                    "CONTAINERD_DROPIN": s.dropin,
                    "CONTAINERD_ADDRESS": s.address,
                    "CONTAINERD_RESTART_COMMAND": shlex.join(s.restart_command),
                    "CONTAINERD_SET_DEFAULT": "true" if s.set_default else "false",
                    "HOST_ROOT": s.host_root,
                }
            )
            env.setdefault("ENFLAME_RUNTIME_PATH", o["runtimePath"])
    return env


def _directories(settings: RuntimeSettings) -> list[str]:
    """The host directories of the runtimes' files this stack may change: mounted under /host, nothing more."""
    return sorted({directory for backend in _backends(settings) for directory in backend.directories()})


def runtime_class(component: ResolvedComponent, instance: str) -> dict:
    """RuntimeClass `enflame`: pods can ask for the runtime explicitly, whatever the nodes' default."""
    return {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": metadata(RUNTIME_CLASS, None, labels(component, instance)),
        "handler": RUNTIME_CLASS,
    }


def extras(component: ResolvedComponent, context: BuildContext) -> Extras:
    settings: RuntimeSettings = context.settings
    inside = runtime_host.in_container
    return Extras(
        objects=[runtime_class(component, context.instance)],
        pod=PodAdditions(
            env=_environment(settings),
            mounts=tuple(
                HostMount(f"runtime-host-{i}", d, inside(d), read_only=False, type="DirectoryOrCreate")
                for i, d in enumerate(_directories(settings))
            ),
        ),
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
            # Privileged: it installs the enflame runtime on the host and rewrites the container runtime's config.
            privileged=True,
            # Plus the directories of the runtimes' config files and sockets (extras, from the settings).
            mounts=(
                HostMount("runtime-install", "/usr/local/enflame", "/host/usr/local/enflame", read_only=False, type="DirectoryOrCreate"),
                GCU_LOGS,
            ),
            resources=Resources("50m", "64Mi", "500m", "256Mi"),
        ),
        host_pid=True,  # to restart or signal the host's container runtime after changing its config
    ),
    # Its node's container runtime, when gcu-stack:containerRuntime is auto: nodes/get, nothing else.
    rbac=RbacDef(rules=({"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},)),
    settings=RuntimeSettings,
    extras=extras,
    then=RUNTIME_ACTIVATION,
    image=ImageDef(
        package="enflame-container-toolkit_*.tar.gz",
        source=TOPSCLOUD_HINT,
        binary="enflame-container-runtime",
        dockerfile="toolkit",
        entrypoint="/usr/local/bin/gcu-runtime-entrypoint",
        # The node code needs Python >= 3.11 (tomllib, for containerd's config).
        base_image="ubuntu:24.04",
        extra_files=tuple((f"node-code/{name}", NODE_CODE / name) for name in NODE_FILES),
    ),
)
