"""From a component's spec to concrete names, images and selectors.

Precedence follows gcu-operator 2.0's rule (seed 000, "CR 字段说明"): where a
component has sub-parts, a field set on the component's first level wins and
the same field on the sub-part is ignored ("spec.nightingale.notDeploy … then
spec.nightingale.<resource>.notDeploy is invalid"). A sub-part's field applies
when the first level leaves it unset; the catalog's default applies last.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import pulumi

from .model import ComponentDef, ContainerDef, WorkloadDef
from .names import DEFAULT_PULL_POLICY, DEFAULT_REPOSITORY, DEFAULT_VERSION, GCU_PRESENT_LABEL
from .spec import BaseFields


@dataclass(frozen=True)
class ResolvedContainer:
    definition: ContainerDef
    image: str
    pull_policy: str
    env: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class ResolvedWorkload:
    definition: WorkloadDef
    name: str
    node_selector: Optional[dict[str, str]]
    containers: tuple[ResolvedContainer, ...]


@dataclass(frozen=True)
class ResolvedComponent:
    definition: ComponentDef
    spec: BaseFields
    name: str
    namespace: str
    workloads: tuple[ResolvedWorkload, ...]

    @property
    def containers(self) -> tuple[ResolvedContainer, ...]:
        return tuple(c for w in self.workloads for c in w.containers)


def _was_set(model: Optional[BaseFields], field: str) -> bool:
    return model is not None and field in model.model_fields_set and getattr(model, field) is not None


def _alias(model: BaseFields, attribute: str) -> str:
    field = type(model).model_fields[attribute]
    return field.alias or attribute


def effective(component: BaseFields, part: Optional[BaseFields], field: str, where: str = "") -> Any:
    """The value of a BaseFields field for a sub-part, by the seed's precedence."""
    if _was_set(component, field):
        if _was_set(part, field) and getattr(part, field) != getattr(component, field):
            pulumi.log.warn(
                f"{where}.{_alias(component, field)} is ignored: the component's first-level value "
                f"({getattr(component, field)!r}) takes precedence, as in gcu-operator"
            )
        return getattr(component, field)
    if _was_set(part, field):
        return getattr(part, field)
    return None


def image_reference(repository: str, image: str, version: str) -> str:
    return f"{repository.rstrip('/')}/{image}:{version}"


def _sub_part(spec: BaseFields, attribute: Optional[str], spec_path: str) -> tuple[Optional[BaseFields], str]:
    if attribute is None:
        return None, spec_path
    return getattr(spec, attribute), f"{spec_path}.{_alias(spec, attribute)}"


def _container(definition: ComponentDef, spec: BaseFields, container: ContainerDef, part_attr: Optional[str], spec_path: str) -> ResolvedContainer:
    part, where = _sub_part(spec, part_attr, spec_path)

    def pick(field: str, default: Any) -> Any:
        value = effective(spec, part, field, where)
        return default if value is None else value

    image = pick("image", container.default_image or definition.default_image)
    return ResolvedContainer(
        definition=container,
        image=image_reference(pick("repository", DEFAULT_REPOSITORY), image, pick("version", DEFAULT_VERSION)),
        pull_policy=pick("image_pull_policy", DEFAULT_PULL_POLICY),
        env=tuple((e.name, e.value) for e in pick("env", [])),
    )


def _workload(definition: ComponentDef, spec: BaseFields, workload: WorkloadDef, component_name: str, spec_path: str) -> ResolvedWorkload:
    part, where = _sub_part(spec, workload.part, spec_path)
    if part is not None:
        # One namespace and one switch per component (the seed: sub-part notDeploy is invalid).
        for ignored in ("namespace", "not_deploy"):
            if _was_set(part, ignored) and getattr(part, ignored) != getattr(spec, ignored):
                pulumi.log.warn(f"{where}.{_alias(part, ignored)} is ignored: it is set for the whole of {spec_path}")
    selector = effective(spec, part, "node_selector", where) if workload.part else spec.node_selector
    if selector is None and definition.gcu_nodes_only:
        selector = {GCU_PRESENT_LABEL: "true"}
    name = (part.name if part is not None and part.name else None) or workload.default_name or component_name
    return ResolvedWorkload(
        definition=workload,
        name=name,
        node_selector=dict(selector) if selector else None,
        containers=tuple(
            _container(definition, spec, c, c.part or workload.part, spec_path) for c in workload.containers
        ),
    )


def resolve(definition: ComponentDef, spec: BaseFields, spec_path: str) -> ResolvedComponent:
    if len(definition.workloads) > 1 and spec.name:
        pulumi.log.warn(f"{spec_path}.name is not used: each sub-part of {spec_path} names its own workload")
    name = spec.name or definition.default_name
    return ResolvedComponent(
        definition=definition,
        spec=spec,
        name=name,
        namespace=spec.namespace or definition.default_namespace,
        workloads=tuple(_workload(definition, spec, w, name, spec_path) for w in definition.workloads),
    )
