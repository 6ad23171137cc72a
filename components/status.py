"""Stack outputs in the shape of GcuResource.status, which users already script against."""

from __future__ import annotations

from typing import Any, Sequence

import pulumi

from .component import DEPLOYING, RUNNING, GcuComponent


def _entry(component: GcuComponent) -> pulumi.Output[dict]:
    return component.status.apply(
        lambda status: {
            "name": component.key,
            "namespace": component.namespace,
            "status": status,
            "ownResources": component.own_resources,
        }
    )


def _creation_time(component: GcuComponent) -> pulumi.Output[Any]:
    # Helm releases have no object metadata; their Deployments are the chart's.
    stamped = [w for w in component.workloads if hasattr(w, "metadata")]
    return pulumi.Output.all(*[w.metadata.apply(lambda m: getattr(m, "creation_timestamp", None)) for w in stamped])


def status_outputs(
    components: Sequence[GcuComponent], gcu_nodes: pulumi.Input[list], generation: int
) -> dict[str, pulumi.Output[Any]]:
    total = len(components)
    statuses = pulumi.Output.all(*[c.status for c in components])
    ready = statuses.apply(lambda values: sum(1 for v in values if v == RUNNING))
    created = pulumi.Output.all(*[_creation_time(c) for c in components]).apply(
        lambda groups: max((t for group in groups for t in group if t), default=None)
    )

    def condition(args: list) -> dict:
        ready_count, last_update = args
        done = ready_count == total
        pending = total - ready_count
        return {
            "action": "deploy",
            "status": "success" if done else "deploying",
            "reason": "success" if done else "waiting",
            "message": "success" if done else f"{pending} of {total} components not ready",
            "progress": 100 if total == 0 else ready_count * 100 // total,
            "lastUpdateTime": last_update,
        }

    return {
        # A list even before the node resource reports (preview, or a provider that omits it).
        "clusterGCUNodes": pulumi.Output.from_input(gcu_nodes).apply(lambda nodes: list(nodes or [])),
        "phase": ready.apply(lambda r: RUNNING if r == total else DEPLOYING),
        "readyResource": ready.apply(lambda r: f"{r}/{total}"),
        "resourceStatuses": pulumi.Output.all(*[_entry(c) for c in components]),
        "conditions": pulumi.Output.all(ready, created).apply(lambda args: [condition(args)]),
        "observedGeneration": pulumi.Output.from_input(generation),
    }
