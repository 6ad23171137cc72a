"""Where stacks deployed by earlier releases find the bundled providers: keep this module.

Pulumi stores a dynamic resource's provider in state pickled by module path, and uses that
stored provider to read and delete the resource. Earlier releases pickled
`components.hoststate.provider.GcuNodesProvider` and `...DockerRuntimeProvider`; they live
on here, the latter as the ContainerRuntime provider, which reads an earlier release's
docker-only properties as docker nodes.
"""

from .container_runtime import ContainerRuntimeProvider as DockerRuntimeProvider  # noqa: F401
from .gcu_nodes import GcuNodesProvider  # noqa: F401
