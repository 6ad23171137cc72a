"""Status: each component's readiness from its objects' own status, and the stack outputs in the
shape of GcuResource.status, which users already script against.

A component computes its entry once (`GcuComponent.status`); `status_outputs` only aggregates.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

import pulumi

RUNNING = "Running"
DEPLOYING = "Deploying"
# Every component is ready but a step's check (post-deploy validation) did not pass.
DEGRADED = "Degraded"
# The field manager pulumi-kubernetes applies with (server-side apply): "pulumi-kubernetes-<id>".
PULUMI_MANAGER = "pulumi-kubernetes"


def _field(obj: Any, camel: str, snake: str) -> Any:
    """A field of a plain dict (camelCase) or of an SDK output type (its snake_case property)."""
    if obj is None:
        return None
    if hasattr(obj, snake):
        return getattr(obj, snake)
    if isinstance(obj, dict):
        return obj.get(camel, obj.get(snake))
    return None


def is_ready(kind: str, status: Any, replicas: Optional[int] = None) -> bool:
    """Ready from the object's own status: every desired pod updated and ready."""
    if kind == "DaemonSet":
        desired = _field(status, "desiredNumberScheduled", "desired_number_scheduled") or 0
        ready = _field(status, "numberReady", "number_ready") or 0
        updated = _field(status, "updatedNumberScheduled", "updated_number_scheduled") or 0
        return ready >= desired and updated >= desired
    if kind == "Release":
        return _field(status, "status", "status") == "deployed"
    wanted = 1 if replicas is None else replicas
    ready = _field(status, "readyReplicas", "ready_replicas") or 0
    updated = _field(status, "updatedReplicas", "updated_replicas") or 0
    return ready >= wanted and updated >= wanted


def workload_ready(kind: str, resource: pulumi.CustomResource) -> pulumi.Output[bool]:
    replicas = resource.spec.apply(lambda s: _field(s, "replicas", "replicas")) if kind == "Deployment" else None
    return pulumi.Output.all(resource.status, replicas).apply(lambda args: is_ready(kind, args[0], args[1]))


def _applied_at(metadata: Any) -> Optional[str]:
    """When gcu-stack last changed this object: its newest server-side apply by pulumi-kubernetes.

    Controllers write status under other managers, and an unchanged `pulumi up` applies
    nothing, so this moves exactly on a deploy or an upgrade. Without managed fields
    (an object from an older provider) the creation time is the best there is.
    """
    entries = _field(metadata, "managedFields", "managed_fields") or []
    times = [
        _field(e, "time", "time")
        for e in entries
        if str(_field(e, "manager", "manager") or "").startswith(PULUMI_MANAGER)
    ]
    times = [t for t in times if t]
    if times:
        return max(times)
    return _field(metadata, "creationTimestamp", "creation_timestamp")


def last_applied(resources: Sequence[pulumi.CustomResource]) -> pulumi.Output[Optional[str]]:
    """The newest change gcu-stack made to any of these objects."""
    stamped = [r for r in resources if hasattr(r, "metadata")]
    times = pulumi.Output.all(*[r.metadata.apply(_applied_at) for r in stamped])
    return times.apply(lambda values: max((t for t in values if t), default=None))


def status_outputs(
    entries: Sequence[pulumi.Output[dict]],
    step_outputs: dict[str, Any],
    generation: int,
    steps_done: Optional[Mapping[str, pulumi.Output[bool]]] = None,
    step_conditions: Sequence[pulumi.Output[Optional[dict]]] = (),
) -> dict[str, pulumi.Output[Any]]:
    """GcuResource.status from the components' status entries and the steps' outputs.

    `steps_done`: each standalone step's `done`, by step key. `phase` is Running only when every
    component is ready and every step is done (post-deploy validation passed on every node it
    covers); `readyResource` counts components only, as GcuResource did.
    """
    total = len(entries)
    statuses = pulumi.Output.all(*entries)
    keys = sorted(steps_done or {})
    checks = pulumi.Output.all(*[(steps_done or {})[k] for k in keys])
    # (component statuses, keys of the steps not done)
    state = pulumi.Output.all(statuses, checks).apply(
        lambda both: (both[0], [k for k, done in zip(keys, both[1], strict=True) if not done])
    )

    def ready_count(values: list[dict]) -> int:
        return sum(1 for v in values if v["status"] == RUNNING)

    def phase(values: list[dict], failing: list[str]) -> str:
        if ready_count(values) != total:
            return DEPLOYING
        return DEGRADED if failing else RUNNING

    def condition(values: list[dict], failing: list[str]) -> dict:
        ready = ready_count(values)
        if ready != total:
            status, reason, message = "deploying", "waiting", f"{total - ready} of {total} components not ready"
        elif failing:
            status, reason = "failed", "checkFailed"
            message = f"every component is ready, but {', '.join(failing)} did not pass: see `pulumi stack output --json`"
        else:
            status, reason, message = "success", "success", "success"
        return {
            "action": "deploy",
            "status": status,
            "reason": reason,
            "message": message,
            "progress": 100 if total == 0 else ready * 100 // total,
            "lastUpdateTime": max((v["lastUpdateTime"] for v in values if v["lastUpdateTime"]), default=None),
        }

    return {
        **step_outputs,
        "phase": state.apply(lambda both: phase(*both)),
        "readyResource": statuses.apply(lambda values: f"{ready_count(values)}/{total}"),
        "resourceStatuses": statuses.apply(
            lambda values: [{k: v[k] for k in ("name", "namespace", "status", "ownResources")} for v in values]
        ),
        # The deploy condition, then what steps report (a driver upgrade's progress: action "upgrade").
        "conditions": pulumi.Output.all(state, *step_conditions).apply(
            lambda values: [condition(*values[0]), *[c for c in values[1:] if c]]
        ),
        "observedGeneration": pulumi.Output.from_input(generation),
    }
