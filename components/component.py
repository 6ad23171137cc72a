"""One ComponentResource class builds every GCU component from its catalog entry."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s

from . import manifests
from .extras import ExtraContext, extras_for
from .k8s import declare, resource_info
from .resolve import ResolvedComponent
from .settings import Options

RUNNING = "Running"
DEPLOYING = "Deploying"

# Builds a step that must follow the workloads before successors may start (the toolkit's
# docker-runtime activation): given the component and its workloads, returns that
# resource and whether it is done.
Activation = Callable[["GcuComponent", list], tuple[pulumi.Resource, pulumi.Output[bool]]]


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


def release_ready(status: Any) -> bool:
    return _field(status, "status", "status") == "deployed"


@dataclass
class Planned:
    """A manifest to declare, under a logical name stable across renames."""

    logical_name: str
    manifest: dict
    depends_on: list = field(default_factory=list)


class GcuComponent(pulumi.ComponentResource):
    """A GCU component: its workloads and every object they need, as children.

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
        peers: Optional[dict[str, ResolvedComponent]] = None,
        project_dir: Optional[str] = None,
        activation: Optional[Activation] = None,
    ):
        definition = component.definition
        super().__init__(f"gcu:components:{definition.type_name}", definition.key, None, opts)
        self.key = definition.key
        self.namespace = component.namespace
        self.resolved = component
        self.own_resources: list[dict] = []
        key = definition.key
        extras = extras_for(
            component, ExtraContext(instance=instance, options=options, peers=peers or {}, project_dir=project_dir)
        )
        base = [namespace] if namespace is not None else []

        support = [Planned(f"{key}-{m['kind'].lower()}", m, base) for m in manifests.rbac_objects(component, instance)]
        if extras.config_files:
            support.append(Planned(f"{key}-configmap", manifests.config_map(component, instance, extras.config_files), base))
        support += [Planned(f"{key}-{m['kind'].lower()}-{m['metadata']['name']}", m, base) for m in extras.objects]
        declared_support = [self._declare(p) for p in support]
        declared_crds = [self._declare(Planned(f"{key}-crd-{m['spec']['names']['plural']}", m)) for m in extras.crds]
        declared_custom = [
            self._declare(Planned(f"{key}-{m['kind'].lower()}-{m['metadata']['name']}", m, declared_crds + base))
            for m in extras.custom_resources
        ]
        first = list(after) + base + declared_support + declared_custom

        readiness: list[pulumi.Output[bool]] = []
        self.workloads: list[pulumi.CustomResource] = []
        for workload in component.workloads:
            suffix = f"-{workload.definition.part}" if workload.definition.part else ""
            kind = workload.definition.kind
            manifest = manifests.workload_manifest(component, workload, instance, extras.pod)
            resource = self._declare(Planned(f"{key}-{kind.lower()}{suffix}", manifest, first))
            self.workloads.append(resource)
            readiness.append(self._workload_ready(kind, resource))
            service = workload.definition.service
            if service is not None:
                node_port = service.node_port or (getattr(options, service.node_port_option) if service.node_port_option else None)
                # After its workload: a Service is ready once it has endpoints, which need ready pods.
                manifest = manifests.service_manifest(component, workload, instance, node_port)
                self._declare(Planned(f"{key}-service{suffix}", manifest, base + [resource]))

        for release in extras.releases:
            resource = self._release(key, release, first)
            self.workloads.append(resource)
            readiness.append(resource.status.apply(release_ready))

        self.gate: list[pulumi.Resource] = list(self.workloads)
        done = pulumi.Output.all(*readiness).apply(all)
        if activation is not None:
            step, activated = activation(self, self.workloads)
            self.gate = [step]
            done = pulumi.Output.all(done, activated).apply(all)
        self.status = done.apply(lambda ready: RUNNING if ready else DEPLOYING)
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

    def _release(self, key: str, release: dict, depends_on: list) -> k8s.helm.v3.Release:
        self.own_resources.append({"group": "helm.sh", "version": "v3", "kind": "Release", "name": release["name"]})
        repository = release.get("repository")
        return k8s.helm.v3.Release(
            f"{key}-release",
            name=release["name"],
            chart=release["chart"],
            version=release.get("version"),
            repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=repository) if repository else None,
            namespace=release["namespace"],
            create_namespace=False,  # the stack owns the namespace and its Pod Security labels
            values=release["values"],
            timeout=release["timeout"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=depends_on or None),
        )

    @staticmethod
    def _workload_ready(kind: str, resource: pulumi.CustomResource) -> pulumi.Output[bool]:
        replicas = resource.spec.apply(lambda s: _field(s, "replicas", "replicas")) if kind == "Deployment" else None
        return pulumi.Output.all(resource.status, replicas).apply(lambda args: workload_ready(kind, args[0], args[1]))
