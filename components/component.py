"""One ComponentResource class builds every GCU component from its catalog entry."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Optional

import pulumi
import pulumi_kubernetes as k8s

from . import manifests
from .k8s import declare, resource_info
from .model import BuildContext, Extras, NodePort, StepContext, StepResult
from .names import FRONTS_ANNOTATION
from .resolve import ResolvedComponent
from .status import DEPLOYING, RUNNING, is_ready, last_applied, workload_ready


@dataclass
class ComponentArgs:
    """Everything a component is built from."""

    resolved: ResolvedComponent
    context: BuildContext  # what its own builders (extras) may read
    after: list = field(default_factory=list)  # the predecessors' gate resources
    namespace: Optional[pulumi.Resource] = None  # the Namespace object, when the stack creates it
    # For the component's own step (`then`): the stack-wide parts of the step's context.
    step: Optional[StepContext] = None


@dataclass
class Planned:
    """A manifest to declare, under a logical name stable across renames."""

    logical_name: str
    manifest: dict
    depends_on: list = field(default_factory=list)


def node_port(port: Optional[NodePort], settings: Any) -> Optional[int]:
    """The node port of a Service: the component's setting when it has one, else the fixed port."""
    if port is None:
        return None
    if port.setting is None:
        return port.default
    return settings.model_dump(by_alias=True)[port.setting]


class GcuComponent(pulumi.ComponentResource):
    """A GCU component: its workloads and every object they need, as children.

    `gate` lists the child resources a successor must wait for (the workloads, or the
    component's step); successors take a dependency on these objects directly.
    `status` is the component's status entry, registered as its output and read by
    the stack's status.
    """

    def __init__(self, name: str, args: ComponentArgs, opts: Optional[pulumi.ResourceOptions] = None):
        resolved = args.resolved
        definition = resolved.definition
        super().__init__(f"gcu:components:{definition.type_name}", name, None, opts)
        self.key = definition.key
        self.namespace = resolved.namespace
        self.resolved = resolved
        self.own_resources: list[dict] = []
        self._declared: list[pulumi.CustomResource] = []
        # The manifests declared, by logical name (the component's step reads its workload's).
        self.manifests: dict[str, dict] = {}
        extras = definition.extras(resolved, args.context) if definition.extras else Extras()
        base = [args.namespace] if args.namespace is not None else []
        first = list(args.after) + base + self._support(extras, args.context.instance, base)

        readiness: list[pulumi.Output[bool]] = []
        self.workloads: list[pulumi.CustomResource] = []
        for workload in resolved.workloads:
            suffix = f"-{workload.definition.part}" if workload.definition.part else ""
            kind = workload.definition.kind
            manifest = manifests.workload_manifest(resolved, workload, args.context.instance, extras.pod)
            resource = self._declare(Planned(f"{self.key}-{kind.lower()}{suffix}", manifest, first))
            self.workloads.append(resource)
            if not (workload.definition.on_delete and definition.then is not None):
                # (A workload its step replaces is ready when the step says so: pulumi does not wait for it.)
                readiness.append(workload_ready(kind, resource))
            service = workload.definition.service
            if service is not None:
                # After its workload: a Service is ready once it has endpoints, which need ready pods.
                port = node_port(service.node_port, args.context.settings)
                manifest = manifests.service_manifest(resolved, workload, args.context.instance, port)
                if port is not None:
                    # The workload's ID is unknown in a preview exactly when the workload is renamed (replaced).
                    # An unknown input makes pulumi-kubernetes skip the dry-run create of the renamed Service,
                    # which the API server would refuse: the node port is still the old Service's until the
                    # delete-before-replace runs.
                    manifest["metadata"]["annotations"] = {FRONTS_ANNOTATION: resource.id}
                self._declare(Planned(f"{self.key}-service{suffix}", manifest, base + [resource]))
        for release in extras.releases:
            resource = self._release(release, first)
            self.workloads.append(resource)
            readiness.append(resource.status.apply(lambda status: is_ready("Release", status)))

        self.gate: list[pulumi.Resource] = list(self.workloads)
        done = pulumi.Output.all(*readiness).apply(all)
        self.step: Optional[StepResult] = None
        if definition.then is not None and args.step is not None:
            self.step = definition.then.declare(replace(args.step, parent=self, after=self.workloads, owner=self))
            self.gate = [self.step.resource]
            done = pulumi.Output.all(done, self.step.done).apply(all)
        self.status: pulumi.Output[dict] = pulumi.Output.all(done, last_applied(self._declared)).apply(
            lambda values: {
                "name": self.key,
                "namespace": self.namespace,
                "status": RUNNING if values[0] else DEPLOYING,
                "ownResources": self.own_resources,
                "lastUpdateTime": values[1],
            }
        )
        self.register_outputs({"status": self.status})

    def _support(self, extras: Extras, instance: str, base: list) -> list[pulumi.CustomResource]:
        """RBAC, config, CRDs and the objects the workloads need first; returns what workloads wait for."""
        key, resolved = self.key, self.resolved
        support = [Planned(f"{key}-{m['kind'].lower()}", m, base) for m in manifests.rbac_objects(resolved, instance)]
        if extras.config_files:
            support.append(Planned(f"{key}-configmap", manifests.config_map(resolved, instance, extras.config_files), base))
        support += [Planned(f"{key}-{m['kind'].lower()}-{m['metadata']['name']}", m, base) for m in extras.objects]
        declared_support = [self._declare(p) for p in support]
        declared_crds = [self._declare(Planned(f"{key}-crd-{m['spec']['names']['plural']}", m)) for m in extras.crds]
        declared_custom = [
            self._declare(Planned(f"{key}-{m['kind'].lower()}-{m['metadata']['name']}", m, declared_crds + base))
            for m in extras.custom_resources
        ]
        return declared_support + declared_custom

    def _declare(self, planned: Planned) -> pulumi.CustomResource:
        self.own_resources.append(resource_info(planned.manifest))
        self.manifests[planned.logical_name] = planned.manifest
        opts = pulumi.ResourceOptions(
            parent=self,
            depends_on=planned.depends_on or None,
            # A renamed agent, Deployment or NodePort Service: the old one (and its pods) is gone
            # before the new one is created (pulumi-kubernetes deletes with foreground propagation).
            delete_before_replace=manifests.replaced_delete_first(planned.manifest) or None,
        )
        resource = declare(planned.logical_name, planned.manifest, opts)
        self._declared.append(resource)
        return resource

    def _release(self, release: dict, depends_on: list) -> k8s.helm.v3.Release:
        self.own_resources.append({"group": "helm.sh", "version": "v3", "kind": "Release", "name": release["name"]})
        repository = release.get("repository")
        return k8s.helm.v3.Release(
            f"{self.key}-release",
            name=release["name"],
            chart=release["chart"],
            version=release.get("version"),
            repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=repository) if repository else None,
            namespace=release["namespace"],
            create_namespace=False,  # the stack owns the namespace and its Pod Security labels
            values=release["values"],
            timeout=release["timeout"],
            # A renamed release is uninstalled first: a chart's fixed names (Volcano's admission
            # Secret, its scheduler name) cannot be held by two releases at once.
            opts=pulumi.ResourceOptions(parent=self, depends_on=depends_on or None, delete_before_replace=True),
        )
