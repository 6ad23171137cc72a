"""The driver's step: upgrades roll node by node (components/providers/driver_rollout.py), planned in the preview.

The driver DaemonSet is OnDelete, so changing it (a new `spec.driver.version`) starts
nothing by itself; this step moves GCU pods off each node, pauses the GCU operands there,
replaces the driver pod, validates the node and uncordons it, in waves. The preview prints
the plan from the live cluster: old → new driver, the nodes of each wave with the pods each
eviction moves, skipped nodes and why, and the most nodes unavailable at once. With spec.driver.pools, each pool's
DaemonSet gets its own rollout and plan (lines starting `driver pool <pool>:`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Literal, Optional

import pulumi
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..config import one_setting
from ..manifests import PART_OF, TEMPLATE_HASH_ANNOTATION
from ..model import StepContext, StepDef, StepResult
from ..names import DEPLOY_LABEL_PREFIX, DRIVER_POOL_LABEL, GCU_RESOURCE, GCUSHARE_RESOURCE
from ..spec import label_selector_problem
from .gcu_nodes import KEY as GCU_NODES
from .validation import validation_inputs

if TYPE_CHECKING:
    from ..providers.driver_rollout import DriverUpgradeInputs

PERCENT_OR_COUNT = re.compile(r"^([0-9]+|[0-9]{1,3}%)$")
CLOCK = re.compile(r"^(([01][0-9]|2[0-3]):[0-5][0-9]|24:00)$")
Day = Literal["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]


class WaitForCompletion(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Pods (label selector, e.g. "app=training") that finish on their own before the node is drained; "" waits for none.
    selector: str = ""
    timeout_seconds: int = Field(0, alias="timeoutSeconds", ge=0)

    @field_validator("selector")
    @classmethod
    def _selector(cls, value: str) -> str:
        problem = label_selector_problem(value)
        if problem:
            raise ValueError(f"{value!r} is not a label selector: {problem}")
        return value


class Drain(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # When eviction does not finish in time (a PodDisruptionBudget holds it): delete the GCU pods anyway.
    enabled: bool = False
    timeout_seconds: int = Field(300, alias="timeoutSeconds", ge=10)


class Window(BaseModel):
    """A maintenance window: driver waves start only inside one (components/providers/windows.py)."""

    model_config = ConfigDict(extra="forbid")

    # The days it opens on; an end not after its start closes the next day (22:00-02:00).
    days: list[Day] = Field(default_factory=lambda: ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"], min_length=1)
    start: str
    end: str
    time_zone: str = Field("UTC", alias="timeZone")

    @field_validator("start", "end")
    @classmethod
    def _clock(cls, value: str) -> str:
        if not isinstance(value, str) or not CLOCK.match(value):
            raise ValueError(f"{value!r}: a time of day as HH:MM, 00:00 to 24:00")
        return value

    @field_validator("time_zone")
    @classmethod
    def _zone(cls, value: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"{value!r} is not an IANA time zone (such as Asia/Shanghai or UTC)") from None
        return value

    @model_validator(mode="after")
    def _not_empty(self) -> "Window":
        if self.start == "24:00":
            raise ValueError("start: 24:00 is the end of a day; start at 00:00")
        if self.start == self.end:
            raise ValueError(f"start and end are both {self.start}: a whole day is 00:00 to 24:00")
        return self


class DriverUpgradeOptions(BaseModel):
    """`gcu-stack:driverUpgrade`: how a driver change rolls over the GCU nodes."""

    model_config = ConfigDict(extra="forbid")

    max_parallel: int = Field(1, alias="maxParallel", ge=1)
    # How many GCU nodes may be unavailable at once (nodes already unschedulable count): "25%" or a count.
    max_unavailable: str = Field("25%", alias="maxUnavailable")
    wait_for_completion: WaitForCompletion = Field(default_factory=WaitForCompletion, alias="waitForCompletion")
    eviction_timeout_seconds: int = Field(300, alias="evictionTimeoutSeconds", ge=1)
    drain: Drain = Field(default_factory=Drain)
    driver_ready_timeout_seconds: int = Field(600, alias="driverReadyTimeoutSeconds", ge=10)
    operand_ready_timeout_seconds: int = Field(300, alias="operandReadyTimeoutSeconds", ge=10)
    # Waves start only inside one of these (none: any time); the next `up` in a window continues.
    windows: list[Window] = Field(default_factory=list)
    # No wave starts after this many minutes of a rollout (0: no limit); the next `up` continues.
    max_duration_minutes: int = Field(0, alias="maxDurationMinutes", ge=0)
    # A node whose new driver fails: "halt" leaves it cordoned; "rollback" puts back the driver it had (a pod of the
    # previous revision pinned to it), its agents, validates and uncordons it. Either way the rollout stops there.
    on_failure: Literal["halt", "rollback"] = Field("halt", alias="onFailure")

    @field_validator("max_unavailable", mode="before")
    @classmethod
    def _percent_or_count(cls, value):
        text = str(value).strip()
        if not PERCENT_OR_COUNT.match(text) or text in ("0", "0%"):
            raise ValueError(f"{value!r}: a node count (1 or more) or a percentage such as 25%")
        return text


DriverUpgradeSettings = one_setting("DriverUpgradeSettings", "driver_upgrade", "driverUpgrade", DriverUpgradeOptions)


def _preview_plan(context: StepContext, daemonset: dict, inputs: DriverUpgradeInputs, kubeconfig, pool: str) -> None:
    """The plan, from the live cluster, in the preview's output (and `pulumi up`'s); a pool's lines name it."""
    from ..providers import live_nodes
    from ..providers.driver_rollout import Cluster, describe, in_pool, plan, selector_text, windows_note
    from ..providers.install_key import install_key

    prefix = f"driver pool {pool}: " if pool else ""
    try:
        from kubernetes.client.exceptions import ApiException

        # The rollout's own view of the cluster, from what its resource will be given.
        cluster = Cluster({"kubeconfig": kubeconfig, "context": inputs.context, "daemonSet": daemonset["metadata"]["name"],
                           "namespace": daemonset["metadata"]["namespace"], "resources": inputs.resources, "pool": inputs.pool,
                           "driverSelector": selector_text(daemonset["spec"]["selector"]["matchLabels"])})
        try:
            live = cluster.daemonset()
        except ApiException as error:
            if error.status != 404:
                raise
            if not pool:
                pulumi.log.info(f"{prefix}driver: not deployed yet; its pods start at the new version, nothing to upgrade")
                return
            # A new pool: its DaemonSet runs nowhere yet (no revisions either), and the rollout moves the pool's nodes to it.
            live = None
        every = live_nodes.gcu_nodes(kubeconfig, inputs.context, context.results[GCU_NODES].facts["selection"])
        held = sorted(n.name for n in every if DRIVER_POOL_LABEL in n.labels)
        if inputs.pool is None and held:
            pulumi.log.warn(
                f"driver: {', '.join(held)} still run a driver pool's DaemonSet ({DRIVER_POOL_LABEL}), and the blueprint has "
                "no spec.driver.pools: this up would start the component's own driver beside theirs. Set "
                "spec.driver.pools to [] for one up (it moves them back safely), then remove it")
        nodes = [n for n in every if in_pool(n.labels, inputs.pool)]
        unchanged = live is not None and (live["metadata"].get("annotations") or {}).get(TEMPLATE_HASH_ANNOTATION) == inputs.template
        # A new template: every driver pod becomes old. The same one: only pods an earlier rollout left behind.
        revision = (cluster.newest_revision(live) or "(unknown)") if unchanged else "(the new revision)"
        # What the new revision installs, from the template about to be applied (or the live one, unchanged).
        target_install = cluster.install_keys().get(revision) if unchanged else install_key(daemonset["spec"]["template"])
        facts = cluster.facts([node.name for node in nodes], target_install, keys=None if live is not None else {})
        old_images = sorted({c["image"] for p in cluster.driver_pods().values() for c in p["spec"]["containers"]})
        the_plan = plan(facts, revision, inputs.maxParallel, inputs.maxUnavailable)
        image = daemonset["spec"]["template"]["spec"]["containers"][0]["image"]
        schedule = windows_note(inputs.windows, inputs.maxDurationMinutes)
        for line in describe(the_plan, image if isinstance(image, str) else "the new driver", old_images, inputs.maxParallel,
                             inputs.maxUnavailable, schedule):
            pulumi.log.info(prefix + line)
    except Exception as error:  # noqa: BLE001 - a preview without cluster access still previews
        pulumi.log.warn(f"{prefix}driver upgrade plan: the live cluster could not be read ({error}); the rollout reads it when it runs")


def _condition(parts: list) -> Optional[dict]:
    """GcuResource's `upgrade` condition, when the last rollouts upgraded (or failed on) a node. `parts`: (pool, that
    rollout's outputs) for the component's own (pool "") and each pool's; each pool's message names it."""
    upgraded, failed, nodes, messages, finished = [], {}, {}, [], []
    for pool, part in parts:
        upgraded += part["upgraded"] or []
        failed.update(part["failed"] or {})
        nodes.update(part["states"] or {})
        if part["message"]:
            messages.append(f"pool {pool}: {part['message']}" if pool else part["message"])
        finished.append(part["finishedAt"])
    if not upgraded and not failed:
        return None
    total = len(nodes) or 1
    finished_nodes = sum(1 for state in nodes.values() if state in ("done", "current"))
    return {
        "action": "upgrade",
        "status": "failed" if failed else "success",
        "reason": "nodeFailed" if failed else "success",
        "message": "; ".join(f"{n}: {why}" for n, why in sorted(failed.items())) if failed else "; ".join(m for m in messages if m),
        "progress": min(100, finished_nodes * 100 // total),
        "lastUpdateTime": max((f for f in finished if f), default=None),
    }


def _report(resource) -> pulumi.Output[dict]:
    """One rollout's part of the `driverUpgrade` stack output."""
    return pulumi.Output.all(
        resource.states, resource.failed, resource.upgraded, resource.skipped, resource.reports, resource.restarted, resource.paused,
        resource.rolledBack,
    ).apply(
        lambda values: {"nodes": values[0] or {}, "failed": values[1] or {}, "upgraded": values[2] or [], "skipped": values[3] or {},
                        "reports": values[4] or {}, "restarted": values[5] or [], "paused": values[6] or "",
                        "rolledBack": values[7] or []}
    )


def _pool_of(workload, driver) -> Optional[dict]:
    """DriverUpgradeInputs.pool of a driver DaemonSet: the nodes its rollout covers (a pool's, or, for the component's
    own, those of no pool), and how it moves a node in (the driver deploy label that holds every driver DaemonSet off
    the node, the pods of any of them)."""
    if not workload.pool and workload.other_pools is None:
        return None
    moving = {"holdLabel": DEPLOY_LABEL_PREFIX + driver.key,
              "driverPods": f"app.kubernetes.io/component={driver.key},app.kubernetes.io/part-of={PART_OF}"}
    if workload.pool:
        return {"name": workload.pool, "nodeSelector": dict(workload.pool_selector), "otherPools": [], **moving}
    return {"name": "", "nodeSelector": {}, "otherPools": [dict(s) for s in workload.other_pools], **moving}


def declare(context: StepContext) -> StepResult:
    from ..providers.bundled import as_props  # engine code: only when declaring
    from ..providers.driver_rollout import DriverUpgrade, DriverUpgradeInputs

    options: DriverUpgradeOptions = context.settings.driver_upgrade
    driver = context.owner
    by_name = {m["metadata"]["name"]: m for m in driver.manifests.values() if m["kind"] == "DaemonSet"}
    # The component's own DaemonSet, then one per node pool (spec.driver.pools), each rolled out on its own nodes.
    rolled = [w for w in driver.resolved.workloads if w.definition.on_delete and w.name in by_name]
    pools = [w.pool for w in rolled if w.pool]
    # The node agents that hold the GCU device: paused on a node while its driver is replaced.
    operands = sorted(c.definition.key for c in context.deployed if c.definition.uses_device)
    # Each node is validated (as the validation step does for all) before it is uncordoned.
    checks = validation_inputs(context.settings.validation, context, warn=False)
    validation = as_props(checks) if checks is not None else None
    resources = []
    for workload in rolled:
        daemonset = by_name[workload.name]
        inputs = DriverUpgradeInputs(
            daemonSet=daemonset["metadata"]["name"],
            namespace=daemonset["metadata"]["namespace"],
            template=daemonset["metadata"]["annotations"][TEMPLATE_HASH_ANNOTATION],
            image=daemonset["spec"]["template"]["spec"]["containers"][0]["image"],
            nodes=context.results[GCU_NODES].resource.nodes,
            operands=operands,
            resources=[GCU_RESOURCE, GCUSHARE_RESOURCE],
            maxParallel=options.max_parallel,
            maxUnavailable=options.max_unavailable,
            waitForCompletion=options.wait_for_completion.model_dump(by_alias=True),
            evictionTimeoutSeconds=options.eviction_timeout_seconds,
            drain=options.drain.model_dump(by_alias=True),
            driverReadyTimeoutSeconds=options.driver_ready_timeout_seconds,
            operandReadyTimeoutSeconds=options.operand_ready_timeout_seconds,
            validation=validation,
            # None when unset: a stack of an earlier release sees no change.
            windows=[w.model_dump(by_alias=True) for w in options.windows] or None,
            maxDurationMinutes=options.max_duration_minutes or None,
            rollback={"holdLabel": DEPLOY_LABEL_PREFIX + driver.key} if options.on_failure == "rollback" else None,
            kubeconfig=context.cluster.kubeconfig,
            context=context.cluster.context,
            clusterUid=context.cluster.uid,
            pool=_pool_of(workload, driver),
        )
        pulumi.Output.from_input(context.cluster.kubeconfig).apply(
            lambda kubeconfig, d=daemonset, i=inputs, p=workload.pool: _preview_plan(context, d, i, kubeconfig, p or ""))
        resources.append(DriverUpgrade(
            f"driver-upgrade-{workload.pool}" if workload.pool else "driver-upgrade", inputs,
            pulumi.ResourceOptions(parent=driver, depends_on=context.after, provider=context.host_provider),
        ))
    main, *by_pool = resources
    done = pulumi.Output.all(*(r.failed for r in resources)).apply(lambda failed: not any(failed))
    condition = pulumi.Output.all(*(
        pulumi.Output.all(upgraded=r.upgraded, failed=r.failed, states=r.states, message=r.message, finishedAt=r.finishedAt)
        for r in resources
    )).apply(lambda parts: _condition(list(zip(["", *pools], parts, strict=True))))
    report = _report(main)
    if by_pool:   # each pool's beside the component's own (whose keys stay where they were without pools)
        report = pulumi.Output.all(report, *(_report(r) for r in by_pool)).apply(
            lambda values: {**values[0], "pools": dict(zip(pools, values[1:], strict=True))})
    return StepResult(condition=condition, resource=main, also=by_pool, done=done, outputs={"driverUpgrade": report})


# Owned by the driver (its `then`): after the driver DaemonSet; successors (the toolkit) wait for the rollout.
DRIVER_UPGRADE = StepDef(
    key="driverUpgrade", after=(), declare=declare, settings=DriverUpgradeSettings, empty_outputs=(("driverUpgrade", None),)
)
