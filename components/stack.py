"""The whole GcuResource: namespaces, then every deployed component in chain order."""

from __future__ import annotations

from typing import Optional

import pulumi

from . import catalog, manifests
from .chain import nearest_deployed
from .component import GcuComponent
from .k8s import declare
from .resolve import ResolvedComponent, resolve
from .settings import StackSettings
from .spec import BaseFields, GcuResourceSpec, deployed

# Namespaces every cluster already has: never created, never deleted by the stack.
SYSTEM_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})
COMPONENTS: tuple[catalog.ComponentDef, ...] = catalog.CORE
AFTER = {d.key: d.after for d in COMPONENTS}


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


def needs_host_access(component: ResolvedComponent) -> bool:
    definition = component.definition
    return definition.host_pid or any(c.definition.privileged or c.definition.mounts for c in component.containers)


class GcuStack(pulumi.ComponentResource):
    """gcu:stack:GcuResource — the stack's counterpart of one GcuResource object."""

    def __init__(self, settings: StackSettings, provider: pulumi.ProviderResource):
        resource = settings.resource
        instance = resource.metadata.name
        super().__init__("gcu:stack:GcuResource", instance, None, pulumi.ResourceOptions(providers=[provider]))

        resolved = deployed_components(resource.spec)
        namespaces = self._namespaces(resolved, instance)
        present = {c.definition.key for c in resolved}
        built: dict[str, GcuComponent] = {}
        for component in resolved:
            key = component.definition.key
            after = [r for p in nearest_deployed(key, AFTER, present) for r in built[p].gate]
            built[key] = GcuComponent(
                component,
                instance=instance,
                service_monitor=settings.options.exporter_service_monitor,
                after=after,
                namespace=namespaces.get(component.namespace),
                opts=pulumi.ResourceOptions(parent=self, providers=[provider]),
            )
        self.components = list(built.values())
        self.register_outputs({"components": [c.key for c in self.components]})

    def _namespaces(self, resolved: list[ResolvedComponent], instance: str) -> dict[str, pulumi.Resource]:
        wanted: dict[str, bool] = {}
        for component in resolved:
            if component.namespace not in SYSTEM_NAMESPACES:
                wanted[component.namespace] = wanted.get(component.namespace, False) or needs_host_access(component)
        return {
            name: declare(
                f"namespace-{name}",
                manifests.namespace(name, privileged, instance),
                pulumi.ResourceOptions(parent=self),
            )
            for name, privileged in sorted(wanted.items())
        }
