"""The toolkit's step: the enflame runtime on every GCU node, through the runtime each node runs.

It runs after the toolkit's DaemonSet (which installs the runtime binary on the nodes)
and before the device plugin, whose pods need the runtime. docker nodes get it as
docker's default runtime (daemon.json); containerd nodes as a runtime handler in a
drop-in (and containerd's default runtime unless turned off).
"""

from __future__ import annotations

from typing import Literal, Optional

import pulumi
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..model import StepContext, StepDef, StepResult
from ..node import containerd_host, runtime_host
from ..node.node_runtime import SUPPORTED, runtime_of
from .gcu_nodes import KEY as GCU_NODES

DOCKER = runtime_host.HostSettings()  # docker's paths on a node: the defaults live with the node code
CONTAINERD = containerd_host.ContainerdSettings()
# An earlier release declared this resource as DockerRuntime "docker-runtime": same resource, no replacement.
EARLIER = pulumi.Alias(name="docker-runtime", type_="pulumi-python:dynamic/gcu:DockerRuntime")


def _absolute(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError(f"{value!r} must be an absolute path")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValueError(f"{value!r} contains a control character, which no file on a node can be named by")
    return value


def _command(value: list[str]) -> list[str]:
    if not value or not all(value):
        raise ValueError(f"a command is a non-empty list of non-empty words (got {value!r}), e.g. [\"systemctl\", \"restart\", \"containerd\"]")
    return value


class _RuntimeOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # pod: a short privileged pod per node; local: this machine is the node (single-node clusters, tests).
    transport: Literal["pod", "local"] = "pod"
    runtime_path: str = Field(runtime_host.DEFAULT_RUNTIME_PATH, alias="runtimePath")
    timeout_seconds: int = Field(300, alias="timeoutSeconds", ge=10)
    # Where a pod on the node runs restartCommand: host (the host's namespaces through PID 1, for systemd);
    # container (in the pod itself, which has hostPID and the runtime's directories under /host).
    restart_in: Literal["host", "container"] = Field("host", alias="restartIn")


class DockerRuntimeOptions(_RuntimeOptions):
    """`gcu-stack:dockerRuntime`: making `enflame` docker's default runtime on docker nodes."""

    # reload: SIGHUP, running containers untouched (default); restart: gcu-operator's
    # --restart-docker true; none: write only (--restart-docker false).
    mode: Literal[runtime_host.MODES] = "reload"
    daemon_json: str = Field(DOCKER.daemon_json, alias="daemonJson")
    docker_host: str = Field(DOCKER.docker_host, alias="dockerHost")
    pid_file: str = Field(DOCKER.pid_file, alias="pidFile")
    restart_command: list[str] = Field(default_factory=lambda: list(DOCKER.restart_command), alias="restartCommand")
    verify_seconds: float = Field(DOCKER.verify_seconds, alias="verifySeconds", gt=0)

    _paths = field_validator("runtime_path", "daemon_json", "pid_file")(_absolute)
    _restart = field_validator("restart_command")(_command)

    @field_validator("docker_host")
    @classmethod
    def _unix_socket(cls, value: str) -> str:
        if not value.startswith("unix:///"):
            raise ValueError(f"{value!r}: only unix:///path sockets are supported")
        _absolute(value.removeprefix("unix://"))
        return value


class ContainerdOptions(_RuntimeOptions):
    """`gcu-stack:containerd`: the enflame runtime handler on containerd nodes."""

    # restart: restart containerd when its effective config changed (1.x has no reload: it exits on
    # SIGHUP); none: write only, containerd uses the runtime after its next restart.
    mode: Literal[containerd_host.MODES] = "restart"
    config_toml: str = Field(CONTAINERD.config_toml, alias="configToml")
    dropin: str = Field(CONTAINERD.dropin, alias="dropin")
    address: str = Field(CONTAINERD.address, alias="address")
    restart_command: list[str] = Field(default_factory=lambda: list(CONTAINERD.restart_command), alias="restartCommand")
    # gcu-operator made enflame the default runtime; false: only the `enflame` RuntimeClass selects it.
    set_default_runtime: bool = Field(CONTAINERD.set_default, alias="setDefaultRuntime")
    verify_seconds: float = Field(CONTAINERD.verify_seconds, alias="verifySeconds", gt=0)
    # For a node without config.toml: the config version its containerd reads (2: 1.x, 3: 2.x, 4: 2.2 and later);
    # unset: ask it (3 for any 2.x: every 2.x reads it).
    config_version: Optional[Literal[2, 3, 4]] = Field(None, alias="configVersion")

    _paths = field_validator("runtime_path", "config_toml", "dropin", "address")(_absolute)
    _restart = field_validator("restart_command")(_command)


class RuntimeSettings(BaseModel):
    """The toolkit's stack settings: which runtime GCU nodes use, and each runtime's."""

    model_config = ConfigDict(extra="forbid")

    # auto: per node, from status.nodeInfo.containerRuntimeVersion; docker / containerd: every GCU node.
    container_runtime: Literal["auto", "docker", "containerd"] = Field("auto", alias="containerRuntime")
    docker_runtime: DockerRuntimeOptions = Field(default_factory=DockerRuntimeOptions, alias="dockerRuntime")
    containerd: ContainerdOptions = Field(default_factory=ContainerdOptions, alias="containerd")

    def runtimes(self) -> tuple[str, ...]:
        """The runtimes this stack may meet on its nodes."""
        return ("docker", "containerd") if self.container_runtime == "auto" else (self.container_runtime,)


def _report_unsupported(context: StepContext, settings: "RuntimeSettings", kubeconfig) -> None:
    """In the preview too: which GCU nodes run a runtime gcu-stack leaves alone (or that it cannot tell)."""
    if settings.container_runtime != "auto":
        return
    from ..providers import live_nodes

    try:
        nodes = live_nodes.gcu_nodes(kubeconfig, context.cluster.context, context.results[GCU_NODES].facts["selection"])
    except Exception as error:  # noqa: BLE001 - a preview without cluster access still previews
        pulumi.log.info(f"the container runtime of each GCU node was not read ({error}); it is read when the runtime is activated")
        return
    for node in nodes:
        if runtime_of(node.runtime_version) not in SUPPORTED:
            pulumi.log.warn(
                f"GCU node {node.name} runs {node.runtime_version or 'no reported runtime'}: gcu-stack supports docker "
                "and containerd, so the enflame runtime is not activated there (the node is left alone); "
                "set gcu-stack:containerRuntime to force one"
            )


def declare(context: StepContext) -> StepResult:
    from ..providers.container_runtime import ContainerRuntime, ContainerRuntimeInputs  # engine code: only when declaring

    settings: RuntimeSettings = context.settings
    toolkit = context.owner
    for runtime, mode in (("docker", settings.docker_runtime.mode), ("containerd", settings.containerd.mode)):
        if runtime in settings.runtimes() and mode == "none":
            pulumi.log.warn(
                f"the {runtime} mode is none: its config is written but {runtime} uses the enflame runtime "
                "only after its next restart; the device plugin may not work until then"
            )
    (container,) = toolkit.resolved.containers
    nodes = context.results[GCU_NODES].resource.nodes
    inputs = ContainerRuntimeInputs(
        nodes=nodes,
        runtime=settings.container_runtime,
        docker=settings.docker_runtime.model_dump(by_alias=True),
        containerd=settings.containerd.model_dump(by_alias=True),
        podImage=container.image,
        podNamespace=toolkit.namespace,
        timeoutSeconds=max(settings.docker_runtime.timeout_seconds, settings.containerd.timeout_seconds),
        kubeconfig=context.cluster.kubeconfig,
        context=context.cluster.context,
        clusterUid=context.cluster.uid,
    )
    pulumi.Output.from_input(context.cluster.kubeconfig).apply(lambda kubeconfig: _report_unsupported(context, settings, kubeconfig))
    resource = ContainerRuntime(
        "container-runtime",
        inputs,
        pulumi.ResourceOptions(parent=toolkit, depends_on=context.after, provider=context.host_provider, aliases=[EARLIER]),
    )
    modes = {"docker": settings.docker_runtime.mode, "containerd": settings.containerd.mode}
    done = resource.active.apply(lambda active: bool(active) or all(modes[r] == "none" for r in settings.runtimes()))
    return StepResult(resource=resource, done=done, outputs={})


# Owned by the toolkit (its `then`): after the toolkit's workloads; the node list comes from the GCU-node step.
RUNTIME_ACTIVATION = StepDef(key="containerRuntime", after=(), declare=declare, settings=RuntimeSettings)
