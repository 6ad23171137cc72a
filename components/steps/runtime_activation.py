"""The toolkit's step: the enflame runtime as docker's default on every GCU node.

It runs after the toolkit's DaemonSet (which installs the runtime binary on the nodes)
and before the device plugin, whose pods need the runtime.
"""

from __future__ import annotations

from typing import Literal

import pulumi
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..config import one_setting
from ..hoststate import runtime_host
from ..hoststate.provider import DockerRuntime, DockerRuntimeInputs
from ..model import StepContext, StepDef, StepResult
from .gcu_nodes import KEY as GCU_NODES

HOST = runtime_host.HostSettings()  # docker's paths on a node: the defaults live with the node code


def _absolute(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError(f"{value!r} must be an absolute path")
    return value


class DockerRuntimeOptions(BaseModel):
    """`gcu-stack:dockerRuntime`: making `enflame` docker's default runtime on GCU nodes."""

    model_config = ConfigDict(extra="forbid")

    # reload: SIGHUP, running containers untouched (default); restart: gcu-operator's
    # --restart-docker true; none: write only (--restart-docker false).
    mode: Literal[runtime_host.MODES] = "reload"
    # pod: a short privileged pod per node; local: this machine is the node (single-node clusters, tests).
    transport: Literal["pod", "local"] = "pod"
    runtime_path: str = Field(runtime_host.DEFAULT_RUNTIME_PATH, alias="runtimePath")
    daemon_json: str = Field(HOST.daemon_json, alias="daemonJson")
    docker_host: str = Field(HOST.docker_host, alias="dockerHost")
    pid_file: str = Field(HOST.pid_file, alias="pidFile")
    restart_command: list[str] = Field(default_factory=lambda: list(HOST.restart_command), alias="restartCommand")
    timeout_seconds: int = Field(300, alias="timeoutSeconds", ge=10)
    verify_seconds: float = Field(HOST.verify_seconds, alias="verifySeconds", gt=0)

    _paths = field_validator("runtime_path", "daemon_json", "pid_file")(_absolute)

    @field_validator("docker_host")
    @classmethod
    def _unix_socket(cls, value: str) -> str:
        if not value.startswith("unix:///"):
            raise ValueError(f"{value!r}: only unix:///path sockets are supported")
        return value


RuntimeSettings = one_setting("RuntimeSettings", "docker_runtime", "dockerRuntime", DockerRuntimeOptions)


def declare(context: StepContext) -> StepResult:
    runtime = context.settings.docker_runtime
    toolkit = context.owner
    if runtime.mode == "none":
        pulumi.log.warn(
            "gcu-stack:dockerRuntime.mode is none: daemon.json is written but docker uses the "
            "enflame runtime only after its next restart; the device plugin may not work until then"
        )
    (container,) = toolkit.resolved.containers
    resource = DockerRuntime(
        "docker-runtime",
        DockerRuntimeInputs(
            nodes=context.results[GCU_NODES].resource.nodes,
            transport=runtime.transport,
            mode=runtime.mode,
            runtimePath=runtime.runtime_path,
            daemonJson=runtime.daemon_json,
            dockerHost=runtime.docker_host,
            pidFile=runtime.pid_file,
            restartCommand=list(runtime.restart_command),
            podImage=container.image,
            podNamespace=toolkit.namespace,
            timeoutSeconds=runtime.timeout_seconds,
            verifySeconds=runtime.verify_seconds,
            kubeconfig=context.cluster.kubeconfig,
            context=context.cluster.context,
        ),
        pulumi.ResourceOptions(parent=toolkit, depends_on=context.after, provider=context.host_provider),
    )
    done = resource.active.apply(lambda active: bool(active) or runtime.mode == "none")
    return StepResult(resource=resource, done=done)


# Owned by the toolkit (its `then`): after the toolkit's workloads; the node list comes from the GCU-node step.
RUNTIME_ACTIVATION = StepDef(key="dockerRuntime", after=(), declare=declare, settings=RuntimeSettings)
