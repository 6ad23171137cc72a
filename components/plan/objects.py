"""The one plan: every object and Helm release the stack declares, built once as plain data.

`build(settings)` takes the blueprint's deployed components (resolved once, so each "is ignored"
warning is printed once), calls each component's own builders (`extras`) once, and builds every
manifest once with the pure builders of `manifests.py`. Each planned object carries its provenance
(the blueprint field or setting that named it), the Pulumi name it is declared under and its role,
which says what it waits for when declared. The checks read this plan; `GcuStack` declares exactly
it. Nothing here declares a resource.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Iterator, Mapping, Optional

from .. import manifests
from ..model import BuildContext, Extras, NodePort, ResolvedComponent, ResolvedWorkload
from ..settings import StackSettings

# What a planned object is to its component, and so what it waits for when declared.
NAMESPACE = "namespace"  # a namespace the stack creates: first of all
SUPPORT = "support"  # RBAC, config, storage: after the namespace
CRD = "crd"  # CustomResourceDefinitions: nothing before them
CUSTOM = "custom"  # custom resources: after their CRDs
WORKLOAD = "workload"  # after the chain's predecessors and the component's support objects
SERVICE = "service"  # after its workload (its endpoints need ready pods)

# Namespaces every cluster already has: never created, never deleted by the stack.
SYSTEM_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})
POD_SECURITY_ORDER = ("restricted", "baseline", "privileged")


@dataclass
class PlannedObject:
    """One object the stack declares, under a logical name stable across renames, and where its name came from."""

    logical_name: str
    manifest: dict
    role: str
    name_from: str  # e.g. "spec.exporter.name", "spec.nfd (fixed name 'nfd-clusterrole')"
    component: Optional[ResolvedComponent] = None
    workload: Optional[ResolvedWorkload] = None
    name_value: Optional[str] = None  # the value of that field, when the name is derived from it (`<name>-config`)

    @property
    def kind(self) -> str:
        return self.manifest["kind"]

    @property
    def name(self) -> str:
        return self.manifest["metadata"]["name"]

    @property
    def namespace(self) -> Optional[str]:
        return self.manifest["metadata"].get("namespace")

    def describe(self) -> str:
        where = f"{self.namespace}/{show(self.name)}" if self.namespace else f"{show(self.name)!r} (cluster-wide)"
        owner = f" of spec.{self.component.definition.key}" if self.component is not None else ""
        return f"the {self.kind} {where}{owner}"


@dataclass
class PlannedRelease:
    """A Helm release (arguments of pulumi_kubernetes.helm.v3.Release) and the field that named it."""

    release: dict
    name_from: str
    component: ResolvedComponent


@dataclass
class ComponentPlan:
    """One deployed component: its resolved spec, its own settings and its objects in declaration order."""

    resolved: ResolvedComponent
    settings: Any  # the component's own settings model (ComponentDef.settings), or None
    objects: list[PlannedObject] = field(default_factory=list)
    releases: list[PlannedRelease] = field(default_factory=list)

    @property
    def key(self) -> str:
        return self.resolved.definition.key

    def of_role(self, role: str) -> list[PlannedObject]:
        return [o for o in self.objects if o.role == role]


@dataclass
class Plan:
    """Everything the stack declares for one blueprint and its settings."""

    settings: StackSettings
    deployed: list[ResolvedComponent]  # in the blueprint's component order
    namespaces: list[PlannedObject]
    components: dict[str, ComponentPlan]  # by spec key, in the same order

    @property
    def instance(self) -> str:
        return self.settings.resource.metadata.name

    @property
    def objects(self) -> list[PlannedObject]:
        return [*self.namespaces, *(o for c in self.components.values() for o in c.objects)]

    @property
    def releases(self) -> list[PlannedRelease]:
        return [r for c in self.components.values() for r in c.releases]

    def link_settings(self, key: str) -> Any:
        return self.settings.link_settings.get(key)


# ---------------------------------------------------------------------------- shared facts


def show(value: str, limit: int = 70) -> str:
    """A value as messages show it: long ones shortened, with their length."""
    return value if len(value) <= limit else f"{value[:limit - 20]}…({len(value)} characters)"


def strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """(field path, value) of every string in a dumped model (lists as [i])."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from strings(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from strings(item, f"{path}[{index}]")


def node_port(port: Optional[NodePort], settings: Any) -> Optional[int]:
    """The node port of a Service: the component's setting when it has one, else the fixed port."""
    if port is None:
        return None
    if port.setting is None:
        return port.default
    return settings.model_dump(by_alias=True)[port.setting]


def pod_security_level(component: ResolvedComponent) -> str:
    """The Pod Security level a component's pods need: host access needs "privileged", handing a claim to a
    restricted container (a root init container) "baseline"."""
    host_access = any(w.definition.host_pid for w in component.workloads) or any(
        c.definition.privileged or c.definition.mounts for c in component.containers
    )
    if host_access:
        return "privileged"
    if any(manifests.owns_its_claim(c.definition) for c in component.containers):
        return max(component.definition.pod_security or "restricted", "baseline", key=POD_SECURITY_ORDER.index)
    return component.definition.pod_security or "restricted"


def namespace_levels(deployed: Iterable[ResolvedComponent]) -> dict[str, str]:
    """The namespaces gcu-stack creates (not the cluster's own), sorted, each with the Pod Security level
    its most demanding component needs."""
    levels: dict[str, str] = {}
    for component in deployed:
        if component.namespace not in SYSTEM_NAMESPACES:
            current = levels.get(component.namespace, "restricted")
            levels[component.namespace] = max(current, pod_security_level(component), key=POD_SECURITY_ORDER.index)
    return dict(sorted(levels.items()))


def scrape_targets(deployed: list[ResolvedComponent]) -> tuple[tuple[str, str, str], ...]:
    """(job, host:port, path) of every deployed Service that publishes metrics."""
    return tuple(
        (f"gcu-{c.definition.key}", f"{w.name}.{c.namespace}.svc:{w.definition.service.port}", w.definition.service.metrics_path)
        for c in deployed
        for w in c.workloads
        if w.definition.service is not None and w.definition.service.metrics_path
    )


# ---------------------------------------------------------------------------- building


def _name_from(component: ResolvedComponent, name: str) -> tuple[str, Optional[str]]:
    """The field an object's name came from, and its value: a workload's or the component's name, or another field."""
    candidates = [(w.name, w.name_from) for w in component.workloads] + [(component.name, component.name_from)]
    key = component.definition.key
    candidates += [(v, p) for p, v in strings(component.spec.model_dump(by_alias=True, exclude_unset=True), f"spec.{key}")]
    for value, source in candidates:
        if name == value:
            return source, value
    for value, source in sorted(candidates, key=lambda c: -len(c[0])):
        if value and name.startswith(value + "-"):
            return source, value
    return f"spec.{key} (fixed name {name!r})", None


def _component_plan(component: ResolvedComponent, context: BuildContext) -> ComponentPlan:
    """The component's objects in the order they are declared, each under its logical name."""
    key, instance = component.definition.key, context.instance
    extras = component.definition.extras(component, context) if component.definition.extras else Extras()
    planned = ComponentPlan(resolved=component, settings=context.settings)

    def add(logical_name: str, manifest: dict, role: str, workload: Optional[ResolvedWorkload] = None) -> None:
        if workload is not None:
            source, value = workload.name_from, workload.name
        else:
            source, value = _name_from(component, manifest["metadata"]["name"])
        planned.objects.append(PlannedObject(logical_name, manifest, role, source, component, workload, value))

    for manifest in manifests.rbac_objects(component, instance):
        add(f"{key}-{manifest['kind'].lower()}", manifest, SUPPORT)
    if extras.config_files:
        add(f"{key}-configmap", manifests.config_map(component, instance, extras.config_files), SUPPORT)
    for manifest in extras.objects:
        add(f"{key}-{manifest['kind'].lower()}-{manifest['metadata']['name']}", manifest, SUPPORT)
    for manifest in extras.crds:
        add(f"{key}-crd-{manifest['spec']['names']['plural']}", manifest, CRD)
    for manifest in extras.custom_resources:
        add(f"{key}-{manifest['kind'].lower()}-{manifest['metadata']['name']}", manifest, CUSTOM)
    for workload in component.workloads:
        suffix = f"-{workload.definition.part}" if workload.definition.part else ""
        suffix += f"-pool-{workload.pool}" if workload.pool else ""
        kind = workload.definition.kind
        add(f"{key}-{kind.lower()}{suffix}", manifests.workload_manifest(component, workload, instance, extras.pod), WORKLOAD, workload)
        service = workload.definition.service
        if service is not None:
            port = node_port(service.node_port, context.settings)
            add(f"{key}-service{suffix}", manifests.service_manifest(component, workload, instance, port), SERVICE, workload)
    planned.releases = [PlannedRelease(r, _name_from(component, r["name"])[0], component) for r in extras.releases]
    return planned


def component_manifests(component: ResolvedComponent, instance: str, settings: Any = None) -> list[dict]:
    """The manifests one component declares, in order (what the stack applies for it): for tests that run a
    component on a cluster without the engine. `settings`: the component's own settings model, or None."""
    if settings is None and component.definition.settings is not None:
        settings = component.definition.settings()
    return [p.manifest for p in _component_plan(component, BuildContext(instance=instance, settings=settings)).objects]


def _namespaces(deployed: list[ResolvedComponent], instance: str) -> list[PlannedObject]:
    sources: dict[str, list[str]] = {}
    for component in deployed:
        sources.setdefault(component.namespace, []).append(component.namespace_from)
    return [
        PlannedObject(f"namespace-{name}", manifests.namespace(name, level, instance), NAMESPACE, " and ".join(sources[name]))
        for name, level in namespace_levels(deployed).items()
    ]


def build(settings: StackSettings) -> Plan:
    """Every object and Helm release the stack declares for these settings, as plain data, built once."""
    deployed = settings.deployed()
    instance = settings.resource.metadata.name
    targets = scrape_targets(deployed)
    components = {
        c.definition.key: _component_plan(
            c, BuildContext(instance=instance, settings=settings.link_settings.get(c.definition.key), scrape_targets=targets)
        )
        for c in deployed
    }
    return Plan(settings=settings, deployed=deployed, namespaces=_namespaces(deployed, instance), components=components)


# ---------------------------------------------------------------------------- built images


def _with_image(workload: PlannedObject, reference: Any) -> PlannedObject:
    """A planned workload running `reference` in every container (the OnDelete template hash follows)."""
    manifest = copy.deepcopy(workload.manifest)
    template = manifest["spec"]["template"]
    for container in template["spec"]["containers"]:
        container["image"] = reference
    annotations = manifest["metadata"].get("annotations") or {}
    if manifests.TEMPLATE_HASH_ANNOTATION in annotations:
        annotations[manifests.TEMPLATE_HASH_ANNOTATION] = manifests.template_hash(template)
    return replace(workload, manifest=manifest)


def with_built_images(plan: Plan, references: Mapping[str, Any]) -> Plan:
    """The plan with each component whose image is built here running that build (by digest, an Output)
    instead of its spec's image: its resolved containers and its workloads' pod templates."""
    if not references:
        return plan
    from ..images import with_built_image

    components: dict[str, ComponentPlan] = {}
    for key, component in plan.components.items():
        if key not in references:
            components[key] = component
            continue
        resolved = with_built_image(component.resolved, references[key])
        by_name = {w.name: w for w in resolved.workloads}
        objects = [
            replace(
                _with_image(o, references[key]) if o.role == WORKLOAD else o,
                component=resolved,
                workload=by_name[o.workload.name] if o.workload is not None else None,
            )
            for o in component.objects
        ]
        components[key] = replace(component, resolved=resolved, objects=objects)
    deployed = [components[c.definition.key].resolved for c in plan.deployed]
    return replace(plan, deployed=deployed, components=components)
