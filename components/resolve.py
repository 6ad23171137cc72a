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

from .catalog import (
    DEFAULT_PULL_POLICY,
    DEFAULT_REPOSITORY,
    DEFAULT_VERSION,
    GCU_PRESENT_LABEL,
    ComponentDef,
    ContainerDef,
)
from .spec import BaseFields


@dataclass(frozen=True)
class ResolvedContainer:
    definition: ContainerDef
    image: str
    pull_policy: str
    env: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class ResolvedComponent:
    definition: ComponentDef
    spec: BaseFields
    name: str
    namespace: str
    node_selector: Optional[dict[str, str]]
    containers: tuple[ResolvedContainer, ...]


def _was_set(model: Optional[BaseFields], field: str) -> bool:
    return model is not None and field in model.model_fields_set and getattr(model, field) is not None


def effective(component: BaseFields, part: Optional[BaseFields], field: str, where: str = "") -> Any:
    """The value of a BaseFields field for a sub-part, by the seed's precedence."""
    if _was_set(component, field):
        if _was_set(part, field) and getattr(part, field) != getattr(component, field):
            pulumi.log.warn(
                f"{where}.{field} is ignored: the component's first-level {field} "
                f"({getattr(component, field)!r}) takes precedence, as in gcu-operator"
            )
        return getattr(component, field)
    if _was_set(part, field):
        return getattr(part, field)
    return None


def image_reference(repository: str, image: str, version: str) -> str:
    return f"{repository.rstrip('/')}/{image}:{version}"


def resolve(definition: ComponentDef, spec: BaseFields, spec_path: str) -> ResolvedComponent:
    containers = []
    for container in definition.containers:
        part = getattr(spec, container.part) if container.part else None
        where = f"{spec_path}.{container.part}" if container.part else spec_path

        def pick(field: str, default: Any) -> Any:
            value = effective(spec, part, field, where) if container.part else getattr(spec, field)
            return default if value is None else value

        image = pick("image", container.default_image or definition.default_image)
        containers.append(
            ResolvedContainer(
                definition=container,
                image=image_reference(pick("repository", DEFAULT_REPOSITORY), image, pick("version", DEFAULT_VERSION)),
                pull_policy=pick("image_pull_policy", DEFAULT_PULL_POLICY),
                env=tuple((e.name, e.value) for e in pick("env", [])),
            )
        )

    if spec.node_selector is not None:
        node_selector = dict(spec.node_selector)
    elif definition.gcu_nodes_only:
        node_selector = {GCU_PRESENT_LABEL: "true"}
    else:
        node_selector = None

    return ResolvedComponent(
        definition=definition,
        spec=spec,
        name=spec.name or definition.default_name,
        namespace=spec.namespace or definition.default_namespace,
        node_selector=node_selector,
        containers=tuple(containers),
    )
