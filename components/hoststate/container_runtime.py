"""Old path of the ContainerRuntime provider (components/providers/container_runtime.py)."""

from components.providers.container_runtime import ContainerRuntimeProvider  # noqa: F401
