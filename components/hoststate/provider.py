"""Old path of the first releases' providers (GcuNodes; DockerRuntime, now ContainerRuntime, which reads an
earlier release's docker-only properties as docker nodes)."""

from components.providers.container_runtime import ContainerRuntimeProvider as DockerRuntimeProvider  # noqa: F401
from components.providers.node_labels import GcuNodesProvider  # noqa: F401
