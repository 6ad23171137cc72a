"""The whole GcuResource: namespaces, GCU-node labels, then every deployed component in chain order."""

from __future__ import annotations

from typing import Optional

import pulumi

from . import catalog, manifests
from .chain import nearest_deployed
from .component import GcuComponent
from .hoststate.provider import DockerRuntime, GcuNodes
from .images import declare_images, use_built_images
from .k8s import declare
from .resolve import ResolvedComponent, resolve
from .settings import Options, StackSettings
from .spec import BaseFields, GcuResourceSpec, deployed

# Namespaces every cluster already has: never created, never deleted by the stack.
SYSTEM_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})
COMPONENTS: tuple[catalog.ComponentDef, ...] = catalog.ALL
POD_SECURITY_ORDER = ("restricted", "baseline", "privileged")
AFTER = {catalog.GCU_NODES: ("nfd",), **{d.key: d.after for d in COMPONENTS}}


def component_spec(spec: GcuResourceSpec, key: str) -> Optional[BaseFields]:
    name = next(n for n, f in GcuResourceSpec.model_fields.items() if (f.alias or n) == key)
    return getattr(spec, name)


def deployed_components(spec: GcuResourceSpec) -> list[ResolvedComponent]:
    """Resolved components this spec deploys, in chain order."""
    resolved = []
    for definition in COMPONENTS:
        part = component_spec(spec, definition.key)
        if deployed(part):
            resolved.append(resolve(definition, part, f"spec.{definition.key}"))
    return resolved


def pod_security_level(component: ResolvedComponent) -> str:
    """The Pod Security level a component's pods need: host access needs "privileged"."""
    host_access = any(w.definition.host_pid for w in component.workloads) or any(
        c.definition.privileged or c.definition.mounts for c in component.containers
    )
    return "privileged" if host_access else component.definition.pod_security or "restricted"


def cluster_access(options: Options) -> dict:
    # A kubeconfig given inline is a credential: keep it out of state in plain text.
    kubeconfig = options.kubeconfig
    if kubeconfig and "\n" in kubeconfig:
        kubeconfig = pulumi.Output.secret(kubeconfig)
    return {"kubeconfig": kubeconfig, "context": options.kube_context}


def docker_runtime_activation(options: Options, gcu_nodes: GcuNodes, host_provider: pulumi.ProviderResource):
    """The toolkit's activation step: docker's default runtime on every GCU node."""
    runtime = options.docker_runtime

    def activate(toolkit: GcuComponent, workloads: list) -> tuple[pulumi.Resource, pulumi.Output[bool]]:
        if runtime.mode == "none":
            pulumi.log.warn(
                "gcu-stack:dockerRuntime.mode is none: daemon.json is written but docker uses the "
                "enflame runtime only after its next restart; the device plugin may not work until then"
            )
        (container,) = toolkit.resolved.containers
        resource = DockerRuntime(
            "docker-runtime",
            {
                "nodes": gcu_nodes.nodes,
                "transport": runtime.transport,
                "mode": runtime.mode,
                "runtimePath": runtime.runtime_path,
                "daemonJson": runtime.daemon_json,
                "dockerHost": runtime.docker_host,
                "pidFile": runtime.pid_file,
                "restartCommand": list(runtime.restart_command),
                "podImage": container.image,
                "podNamespace": toolkit.namespace,
                "timeoutSeconds": runtime.timeout_seconds,
                "verifySeconds": runtime.verify_seconds,
                **cluster_access(options),
            },
            pulumi.ResourceOptions(parent=toolkit, depends_on=workloads, provider=host_provider),
        )
        done = resource.active.apply(lambda active: bool(active) or runtime.mode == "none")
        return resource, done

    return activate


class GcuStack(pulumi.ComponentResource):
    """gcu:stack:GcuResource — the stack's counterpart of one GcuResource object."""

    def __init__(self, settings: StackSettings, provider: pulumi.ProviderResource):
        resource = settings.resource
        options = settings.options
        instance = resource.metadata.name
        super().__init__("gcu:stack:GcuResource", instance, None, pulumi.ResourceOptions(providers=[provider]))

        resolved = deployed_components(resource.spec)
        # A component whose image is built here runs that build (by digest), not its spec's image.
        images = declare_images(
            options.images, options.registry_password, settings.project_dir,
            parent=self, deployed={c.definition.key for c in resolved},
        )
        resolved = use_built_images(resolved, images)
        namespaces = self._namespaces(resolved, instance)
        present = {c.definition.key for c in resolved}
        gates: dict[str, list[pulumi.Resource]] = {}
        built: list[GcuComponent] = []
        self.gcu_nodes: Optional[GcuNodes] = None
        if resolved:
            present.add(catalog.GCU_NODES)
            # An explicit provider for the bundled dynamic resources: the engine configures the
            # default `pulumi-python` provider with the whole stack config and keeps that in
            # state in plain text, secrets included (seen with gcu-stack:nightingaleDbPassword).
            self.host_provider = pulumi.ProviderResource("pulumi-python", "gcu-hoststate", {}, pulumi.ResourceOptions(parent=self))
        # Deploy labels only for the node agents whose scheduling honours them.
        self.node_agents = sorted(c.definition.key for c in resolved if c.definition.gcu_nodes_only)

        def waits_for(key: str) -> list[pulumi.Resource]:
            return [r for p in nearest_deployed(key, AFTER, present) for r in gates[p]]

        for component in resolved:
            key = component.definition.key
            if key != "nfd" and self.gcu_nodes is None:
                self.gcu_nodes = self._gcu_nodes(options, waits_for(catalog.GCU_NODES))
                gates[catalog.GCU_NODES] = [self.gcu_nodes]
            activation = docker_runtime_activation(options, self.gcu_nodes, self.host_provider) if key == "toolkit" else None
            instance_component = GcuComponent(
                component,
                instance=instance,
                options=options,
                peers={c.definition.key: c for c in resolved},
                project_dir=str(settings.project_dir),
                after=waits_for(key),
                namespace=namespaces.get(component.namespace),
                opts=pulumi.ResourceOptions(parent=self, providers=[provider]),
                activation=activation,
            )
            gates[key] = instance_component.gate
            built.append(instance_component)
        if resolved and self.gcu_nodes is None:  # only NFD is deployed
            self.gcu_nodes = self._gcu_nodes(options, waits_for(catalog.GCU_NODES))
        self.components = built
        self.register_outputs({"components": [c.key for c in built]})

    def component(self, key: str) -> Optional[GcuComponent]:
        return next((c for c in self.components if c.key == key), None)

    def _gcu_nodes(self, options: Options, after: list[pulumi.Resource]) -> GcuNodes:
        selection = options.gcu_nodes
        return GcuNodes(
            "gcu-nodes",
            components=self.node_agents,
            names=selection.names,
            selector=selection.selector,
            driver_label=selection.driver_label or None,
            # Without the driver in the spec, every GCU node must already have one (seed FAQ).
            require_driver="driver" not in self.node_agents,
            page_size=selection.page_size,
            opts=pulumi.ResourceOptions(parent=self, depends_on=after or None, provider=self.host_provider),
            **cluster_access(options),
        )

    def _namespaces(self, resolved: list[ResolvedComponent], instance: str) -> dict[str, pulumi.Resource]:
        levels: dict[str, str] = {}
        for component in resolved:
            if component.namespace not in SYSTEM_NAMESPACES:
                level = pod_security_level(component)
                current = levels.get(component.namespace, "restricted")
                levels[component.namespace] = max(current, level, key=POD_SECURITY_ORDER.index)
        return {
            name: declare(
                f"namespace-{name}",
                manifests.namespace(name, level, instance),
                pulumi.ResourceOptions(parent=self),
            )
            for name, level in sorted(levels.items())
        }
