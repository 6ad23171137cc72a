"""The shape every bundled dynamic resource shares: inputs as one dataclass, outputs declared up front."""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Optional

import pulumi
from pulumi.dynamic import DiffResult, ResourceProvider


def as_props(inputs: Any) -> dict:
    """An inputs dataclass as resource properties (not dataclasses.asdict: it deep-copies Outputs)."""
    return {f.name: getattr(inputs, f.name) for f in fields(inputs)}


def inputs_of(props: dict, keys: tuple[str, ...]) -> dict:
    """The resource's own inputs among `props` (outputs repeat them)."""
    return {k: props.get(k) for k in keys}


def changed_inputs(olds: dict, news: dict, keys: tuple[str, ...]) -> list[str]:
    # Only our own inputs: the serialized provider (__provider) changes with the code, not the node. A resource of an
    # earlier release is updated once to record the cluster (clusterUid) and the pinned context: what destroy reads.
    return [k for k in keys if olds.get(k) != news.get(k)]


def engine_log(message: str, *, warning: bool = False) -> None:
    """A line in `pulumi up`'s output (the engine shows a dynamic provider's info and warning messages)."""
    try:
        (pulumi.log.warn if warning else pulumi.log.info)(message)
    except Exception:  # noqa: BLE001 - a message must never fail a provider
        pass


def moved_cluster(olds: dict, news: dict) -> bool:
    """The stack moved to another cluster (gcu-stack:adoptCluster): the resource is replaced, leaving the old cluster
    first, as it was, then acting on the new one."""
    return bool(olds.get("clusterUid")) and bool(news.get("clusterUid")) and olds["clusterUid"] != news["clusterUid"]


def bundled_diff(olds: dict, news: dict, changed: list[str]) -> DiffResult:
    """An in-place update for any change of the resource's own inputs; a replacement when the stack moved cluster."""
    if moved_cluster(olds, news):
        return DiffResult(changes=True, replaces=["clusterUid"], stables=[], delete_before_replace=True)
    return DiffResult(changes=bool(changed), replaces=[], stables=[], delete_before_replace=False)


class Bundled(pulumi.dynamic.Resource):
    """A bundled dynamic resource: its inputs dataclass as properties, its outputs unknown until the provider reports.

    Every property is an Output attribute of the resource (e.g. `GcuNodes(...).nodes`).
    The providers hold no clients and read no globals: every call builds what it needs
    from the resource's own properties, so the pickled provider carries no state.
    """

    PROVIDER: type[ResourceProvider]
    OUTPUTS: tuple[str, ...]

    def __init__(self, name: str, inputs: Any, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(self.PROVIDER(), name, {**as_props(inputs), **dict.fromkeys(self.OUTPUTS)}, opts)
