"""One ComponentResource class builds every GCU component from its catalog entry."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import pulumi

from . import manifests
from .extras import ExtraContext, extras_for
from .k8s import declare, resource_info
from .resolve import ResolvedComponent
from .settings import Options

# Builds a step that must follow the workload before successors may start (the toolkit's
# docker-runtime activation): given the component and its workloads, returns that
# resource and whether it is done.
Activation = Callable[["GcuComponent", list], tuple[pulumi.Resource, pulumi.Output[bool]]]

RUNNING = "Running"
DEPLOYING = "Deploying"


def _field(obj: Any, camel: str, snake: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(camel, obj.get(snake))
    return getattr(obj, snake, None)


def workload_ready(kind: str, status: Any, replicas: Optional[int] = None) -> bool:
    """Ready from the object's own status: every desired pod updated and ready."""
    if kind == "DaemonSet":
        desired = _field(status, "desiredNumberScheduled", "desired_number_scheduled") or 0
        ready = _field(status, "numberReady", "number_ready") or 0
        updated = _field(status, "updatedNumberScheduled", "updated_number_scheduled") or 0
        return ready >= desired and updated >= desired
    wanted = 1 if replicas is None else replicas
    ready = _field(status, "readyReplicas", "ready_replicas") or 0
    updated = _field(status, "updatedReplicas", "updated_replicas") or 0
    return ready >= wanted and updated >= wanted


@dataclass
class Planned:
    """A manifest to declare, under a logical name stable across renames."""

    logical_name: str
    manifest: dict
    depends_on: list = field(default_factory=list)


class GcuComponent(pulumi.ComponentResource):
    """A GCU component: its workload(s) and every object they need, as children.

    `gate` lists the child resources a successor must wait for; successors take a
    dependency on these objects directly, not on this component.
    """

    def __init__(
        self,
        component: ResolvedComponent,
        *,
        instance: str,
        options: Options,
        after: Sequence[pulumi.Resource],
        namespace: Optional[pulumi.Resource],
        opts: pulumi.ResourceOptions,
        activation: Optional[Activation] = None,
    ):
        definition = component.definition
        super().__init__(f"gcu:components:{definition.type_name}", definition.key, None, opts)
        self.key = definition.key
        self.namespace = component.namespace
        self.resolved = component
        key = definition.key
        extras = extras_for(component, ExtraContext(instance=instance, options=options))
        base = [namespace] if namespace is not None else []

        support = [Planned(f"{key}-{m['kind'].lower()}", m, base) for m in manifests.rbac_objects(component, instance)]
        if extras.config_files:
            support.append(Planned(f"{key}-configmap", manifests.config_map(component, instance, extras.config_files), base))
        crds = [Planned(f"{key}-crd-{m['spec']['names']['plural']}", m) for m in extras.crds]

        self.own_resources: list[dict] = []
        declared_support = [self._declare(p) for p in support]
        declared_crds = [self._declare(p) for p in crds]
        declared_custom = [
            self._declare(Planned(f"{key}-{m['kind'].lower()}-{m['metadata']['name']}", m, declared_crds + base))
            for m in extras.custom_resources
        ]

        workload_manifest = manifests.workload(component, instance, extras.env)
        self.workloads = [
            self._declare(
                Planned(
                    f"{key}-{definition.kind.lower()}",
                    workload_manifest,
                    list(after) + base + declared_support + declared_custom,
                )
            )
        ]
        service = manifests.node_port_service(component, instance)
        if service is not None:
            self._declare(Planned(f"{key}-service", service, base))

        self.gate: list[pulumi.Resource] = list(self.workloads)
        self.status = self._status([(definition.kind, w) for w in self.workloads])
        if activation is not None:
            step, done = activation(self, self.workloads)
            self.gate = [step]
            self.status = pulumi.Output.all(self.status, done).apply(
                lambda args: args[0] if args[1] else DEPLOYING
            )
        self.register_outputs(
            {
                "name": component.name,
                "namespace": component.namespace,
                "status": self.status,
                "ownResources": self.own_resources,
            }
        )

    def _declare(self, planned: Planned) -> pulumi.CustomResource:
        self.own_resources.append(resource_info(planned.manifest))
        opts = pulumi.ResourceOptions(parent=self, depends_on=planned.depends_on or None)
        return declare(planned.logical_name, planned.manifest, opts)

    @staticmethod
    def _status(workloads: list[tuple[str, pulumi.CustomResource]]) -> pulumi.Output[str]:
        def readiness(kind: str, resource: pulumi.CustomResource) -> pulumi.Output[bool]:
            replicas = resource.spec.apply(lambda s: _field(s, "replicas", "replicas")) if kind == "Deployment" else None
            return pulumi.Output.all(resource.status, replicas).apply(lambda args: workload_ready(kind, args[0], args[1]))

        return pulumi.Output.all(*[readiness(k, r) for k, r in workloads]).apply(
            lambda ready: RUNNING if all(ready) else DEPLOYING
        )
