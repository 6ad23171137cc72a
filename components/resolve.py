"""From a component's spec to concrete names, images and selectors.

Precedence follows gcu-operator 2.0's rule (seed 000, "CR 字段说明"): where a
component has sub-parts, a field set on the component's first level wins and
the same field on the sub-part is ignored ("spec.nightingale.notDeploy … then
spec.nightingale.<resource>.notDeploy is invalid"). A sub-part's field applies
when the first level leaves it unset; the catalog's default applies last.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Optional

import pulumi

from .model import ComponentDef, ContainerDef, ResolvedComponent, ResolvedContainer, ResolvedWorkload, Variant, WorkloadDef
from .names import DEFAULT_PULL_POLICY, DEFAULT_REPOSITORY, DEFAULT_VERSION, DRIVER_POOL_LABEL, GCU_PRESENT_LABEL
from .spec import BaseFields, is_digest


def _was_set(model: Optional[BaseFields], field: str) -> bool:
    return model is not None and field in model.model_fields_set and getattr(model, field) is not None


def _alias(model: BaseFields, attribute: str) -> str:
    field = type(model).model_fields[attribute]
    return field.alias or attribute


def effective(component: BaseFields, part: Optional[BaseFields], field: str, where: str = "") -> Any:
    """The value of a BaseFields field for a sub-part, by the seed's precedence."""
    return effective_from(component, part, field, where, "")[0]


def effective_from(component: BaseFields, part: Optional[BaseFields], field: str, where: str, spec_path: str) -> tuple[Any, Optional[str]]:
    """The value of a BaseFields field for a sub-part, and the path of the field it came from (None: unset)."""
    if _was_set(component, field):
        if _was_set(part, field) and getattr(part, field) != getattr(component, field):
            pulumi.log.warn(
                f"{where}.{_alias(component, field)} is ignored: the component's first-level value "
                f"({getattr(component, field)!r}) takes precedence, as in gcu-operator"
            )
        return getattr(component, field), f"{spec_path}.{_alias(component, field)}"
    if _was_set(part, field):
        return getattr(part, field), f"{where}.{_alias(part, field)}"
    return None, None


def unset(path: str, default: Any) -> str:
    """How a message names a field that was left unset: its path and the default that applied."""
    return f"{path} (unset: default {default!r})"


def image_reference(repository: str, image: str, version: Optional[str]) -> str:
    """repository/image:version; a digest in `version` or `image` (`name@sha256:...`) pins it.

    A digest version replaces the tag (repository/image@sha256:...). An image pinned by its own
    digest keeps an explicitly set tag beside it (repository/image:tag@sha256:..., the digest is
    what is pulled) and drops the default one. When both pin, they must agree (components/plan/rules.py
    refuses two different digests); the version's digest is used.
    """
    name, _, image_digest = image.partition("@")
    base = f"{repository.rstrip('/')}/{name}"
    if is_digest(version):
        return f"{base}@{version}"
    if image_digest:
        return f"{base}:{version}@{image_digest}" if version else f"{base}@{image_digest}"
    return f"{base}:{version or DEFAULT_VERSION}"


def _sub_part(spec: BaseFields, attribute: Optional[str], spec_path: str) -> tuple[Optional[BaseFields], str]:
    if attribute is None:
        return None, spec_path
    return getattr(spec, attribute), f"{spec_path}.{_alias(spec, attribute)}"


def _container(definition: ComponentDef, spec: BaseFields, container: ContainerDef, part_attr: Optional[str], spec_path: str) -> ResolvedContainer:
    part, where = _sub_part(spec, part_attr, spec_path)
    sources: dict[str, str] = {}

    def pick(field: str, default: Any) -> Any:
        """The effective value (None: unset) and, in `sources`, the field it came from."""
        value, source = effective_from(spec, part, field, where, spec_path)
        sources[field] = source or unset(f"{where if part is not None else spec_path}.{_alias(spec, field)}", default)
        return value

    repository = pick("repository", DEFAULT_REPOSITORY) or DEFAULT_REPOSITORY
    image = pick("image", container.default_image or definition.default_image) or container.default_image or definition.default_image
    version = pick("version", DEFAULT_VERSION)  # None: the default tag, or none beside an image's own digest
    env = pick("env", []) or []
    return ResolvedContainer(
        definition=container,
        image=image_reference(repository, image, version),
        pull_policy=pick("image_pull_policy", DEFAULT_PULL_POLICY) or DEFAULT_PULL_POLICY,
        env=tuple((e.name, e.value) for e in env),
        image_from=(sources["repository"], sources["image"], sources["version"]),
        env_from=sources["env"] if env else None,
        image_parts=(repository, image, version),
    )


def _workload(definition: ComponentDef, spec: BaseFields, workload: WorkloadDef, component_name: str, name_from: str, spec_path: str) -> ResolvedWorkload:
    part, where = _sub_part(spec, workload.part, spec_path)
    if part is not None:
        # One namespace and one switch per component (the seed: sub-part notDeploy is invalid).
        for ignored in ("namespace", "not_deploy"):
            if _was_set(part, ignored) and getattr(part, ignored) != getattr(spec, ignored):
                pulumi.log.warn(f"{where}.{_alias(part, ignored)} is ignored: it is set for the whole of {spec_path}")
    selector = effective(spec, part, "node_selector", where) if workload.part else spec.node_selector
    if selector is None and definition.gcu_nodes_only:
        selector = {GCU_PRESENT_LABEL: "true"}
    if part is not None and part.name:
        name, source = part.name, f"{where}.name"
    elif workload.default_name:
        name, source = workload.default_name, unset(f"{where}.name", workload.default_name)
    else:
        name, source = component_name, name_from
    return ResolvedWorkload(
        definition=workload,
        name=name,
        node_selector=dict(selector) if selector else None,
        containers=tuple(
            _container(definition, spec, c, c.part or workload.part, spec_path) for c in workload.containers
        ),
        name_from=source,
    )


POOL_FIELDS = ("repository", "image", "version")


def _pool_workloads(definition: ComponentDef, spec: BaseFields, own: ResolvedWorkload, spec_path: str) -> list[ResolvedWorkload]:
    """The component's own workload, kept off the nodes a pool's rollout took, then one workload per pool
    (`<name>-<pool>`) running the pool's image on those nodes; a pool's unset image fields are the component's."""
    pools = getattr(spec, "pools", None)
    if pools is None:
        return [own]
    found = [replace(own, other_pools=tuple(dict(p.node_selector) for p in pools))]
    for index, pool in enumerate(pools):
        where = f"{spec_path}.pools[{index}]"
        own_fields = [f for f in POOL_FIELDS if _was_set(pool, f)]
        merged = spec.model_copy(update={f: getattr(pool, f) for f in own_fields})
        containers = []
        for container in own.containers:
            again = _container(definition, merged, container.definition, container.definition.part or own.definition.part, spec_path)
            image_from = tuple(f"{where}.{f}" if f in own_fields else source for f, source in zip(POOL_FIELDS, again.image_from, strict=True))
            containers.append(replace(again, image_from=image_from))
        found.append(replace(
            own,
            name=f"{own.name}-{pool.name}",
            name_from=f"{where}.name",
            # The node's pool label, which its rollout sets once the node is drained (not the pool's own selector).
            node_selector={**(own.node_selector or {}), DRIVER_POOL_LABEL: pool.name},
            containers=tuple(containers),
            pool=pool.name,
            pool_selector=dict(pool.node_selector),
        ))
    return found


LAYOUT_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:[.\-+].*)?$")


def _layout_of(definition: ComponentDef, version: Optional[str]) -> Optional[Variant]:
    """The variant a version asks for: the newest whose `since` it reaches; None: the definition's own layout.

    Only a version that says its release picks a newer layout: unset, "latest", a digest or a tag of one's own keep
    the definition's (what gcu-operator deployed whatever the tag); ValueError for the last two, to be said."""
    if version in (None, DEFAULT_VERSION):
        return None
    found = LAYOUT_VERSION.match(version)
    if found is None:
        raise ValueError(version)
    release = (int(found.group(1)), int(found.group(2)))
    reached = [v for v in definition.variants if release >= v.since]
    return reached[-1] if reached else None


def _variant(definition: ComponentDef, spec: BaseFields, spec_path: str) -> tuple[Optional[Variant], tuple[str, ...]]:
    """The layout every container's image version agrees on, and what is wrong when they do not."""
    if not definition.variants:
        return None, ()
    chosen: dict[str, Optional[Variant]] = {}
    for workload in definition.variants[-1].workloads:
        for container in workload.containers:
            resolved = _container(definition, spec, container, container.part or workload.part, spec_path)
            version, field = resolved.image_parts[2], resolved.image_from[2]
            if field in chosen:
                continue
            try:
                chosen[field] = _layout_of(definition, version)
            except ValueError:
                chosen[field] = None
                newer = ", ".join(f"v{v.since[0]}.{v.since[1]} on: {v.name}" for v in definition.variants)
                pulumi.log.warn(f"{field}: {version!r} does not say which release the image is, so it runs in the "
                                f"{definition.layout} layout, as gcu-operator ran it; give a release tag (vX.Y.Z) for "
                                f"a newer one ({newer})")
    names = {(v.name if v else definition.layout) for v in chosen.values()}
    if len(names) > 1:
        asked = " and ".join(f"{field} ({v.name if v else definition.layout} layout)" for field, v in chosen.items())
        return None, (f"{asked} ask for different layouts of {spec_path}: give them versions of the same layout",)
    return next(iter(chosen.values()), None), ()


def resolve(definition: ComponentDef, spec: BaseFields, spec_path: str) -> ResolvedComponent:
    variant, variant_problems = _variant(definition, spec, spec_path)
    workloads = variant.workloads if variant is not None else definition.workloads
    if len(workloads) > 1 and spec.name:
        pulumi.log.warn(
            f"{spec_path}.name does not name a workload: each sub-part of {spec_path} names its own "
            f"(it still names the component's shared objects, such as its ConfigMap)"
        )
    name = spec.name or definition.default_name
    name_from = f"{spec_path}.name" if spec.name else unset(f"{spec_path}.name", definition.default_name)
    namespace = spec.namespace or definition.default_namespace
    return ResolvedComponent(
        definition=definition,
        spec=spec,
        name=name,
        namespace=namespace,
        workloads=tuple(
            pooled
            for w in workloads
            for pooled in _pool_workloads(definition, spec, _workload(definition, spec, w, name, name_from, spec_path), spec_path)
        ),
        name_from=name_from,
        namespace_from=f"{spec_path}.namespace" if spec.namespace else unset(f"{spec_path}.namespace", namespace),
        variant=variant,
        variant_problems=variant_problems,
    )
