"""One ComponentResource class declares every GCU component from its part of the plan."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

from .. import manifests
from ..model import StepContext, StepResult
from ..names import FRONTS_ANNOTATION
from ..plan.objects import CRD, CUSTOM, SERVICE, SUPPORT, WORKLOAD, ComponentPlan, PlannedObject
from .k8s import declare, resource_info
from .status import DEPLOYING, RUNNING, is_ready, last_applied, workload_ready


@dataclass
class ComponentArgs:
    """Everything a component is declared from."""

    plan: ComponentPlan  # its objects and releases, built and checked before anything is declared
    after: list = field(default_factory=list)  # the predecessors' gate resources
    namespace: Optional[pulumi.Resource] = None  # the Namespace object, when the stack creates it
    # For the component's own step (`then`): the stack-wide parts of the step's context.
    step: Optional[StepContext] = None


class GcuComponent(pulumi.ComponentResource):
    """A GCU component: its workloads and every object they need, as children.

    `gate` lists the child resources a successor must wait for (the workloads, or the
    component's step); successors take a dependency on these objects directly.
    `status` is the component's status entry, registered as its output and read by
    the stack's status.
    """

    def __init__(self, name: str, args: ComponentArgs, opts: Optional[pulumi.ResourceOptions] = None):
        plan = args.plan
        resolved = plan.resolved
        definition = resolved.definition
        super().__init__(f"gcu:components:{definition.type_name}", name, None, opts)
        self.key = definition.key
        self.namespace = resolved.namespace
        self.resolved = resolved
        self.own_resources: list[dict] = []
        self._declared: list[pulumi.CustomResource] = []
        # The manifests declared, by logical name (the component's step reads its workload's).
        self.manifests: dict[str, dict] = {}
        base = [args.namespace] if args.namespace is not None else []
        support = [self._declare(o, base) for o in plan.of_role(SUPPORT)]
        crds = [self._declare(o, []) for o in plan.of_role(CRD)]
        custom = [self._declare(o, crds + base) for o in plan.of_role(CUSTOM)]
        first = list(args.after) + base + support + custom
        if definition.before is not None and args.step is not None:
            first.append(definition.before.declare(replace(args.step, parent=self, after=list(first), owner=self)).resource)

        readiness: list[pulumi.Output[bool]] = []
        self.workloads: list[pulumi.CustomResource] = []
        by_workload: dict[int, pulumi.CustomResource] = {}
        for planned in plan.objects:
            if planned.role == WORKLOAD:
                resource = self._declare(planned, first)
                by_workload[id(planned.workload)] = resource
                self.workloads.append(resource)
                if not (planned.workload.definition.on_delete and definition.then is not None):
                    # (A workload its step replaces is ready when the step says so: pulumi does not wait for it.)
                    readiness.append(workload_ready(planned.kind, resource))
            elif planned.role == SERVICE:
                # After its workload: a Service is ready once it has endpoints, which need ready pods.
                workload = by_workload[id(planned.workload)]
                if planned.manifest["spec"]["type"] == "NodePort":
                    # The workload's ID is unknown in a preview exactly when the workload is renamed (replaced).
                    # An unknown input makes pulumi-kubernetes skip the dry-run create of the renamed Service,
                    # which the API server would refuse: the node port is still the old Service's until the
                    # delete-before-replace runs.
                    manifest = {**planned.manifest, "metadata": {**planned.manifest["metadata"], "annotations": {FRONTS_ANNOTATION: workload.id}}}
                    planned = replace(planned, manifest=manifest)
                self._declare(planned, base + [workload])
        for release in plan.releases:
            resource = self._release(release.release, first)
            self.workloads.append(resource)
            readiness.append(resource.status.apply(lambda status: is_ready("Release", status)))

        self.gate: list[pulumi.Resource] = list(self.workloads)
        done = pulumi.Output.all(*readiness).apply(all)
        self.step: Optional[StepResult] = None
        if definition.then is not None and args.step is not None:
            self.step = definition.then.declare(replace(args.step, parent=self, after=self.workloads, owner=self))
            self.gate = [self.step.resource, *self.step.also]
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

    def _declare(self, planned: PlannedObject, depends_on: list) -> pulumi.CustomResource:
        self.own_resources.append(resource_info(planned.manifest))
        self.manifests[planned.logical_name] = planned.manifest
        opts = pulumi.ResourceOptions(
            parent=self,
            depends_on=depends_on or None,
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
