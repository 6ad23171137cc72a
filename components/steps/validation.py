"""Post-deploy validation: the last link of the chain.

`pulumi up` ends only when every GCU node where the device plugin (or the GCU-share plugin)
runs advertises its GCU resource, and, unless turned off, a pod asking for one GCU ran
there (components/providers/node_validation.py). Present whenever either plugin is deployed.

When it runs: on the first `up`; when what it validated changes (the GCU nodes, the
plugin, the driver's, toolkit's or plugin's image or env, these settings); and when a
covered node's capacity changed since (checked at every preview and refresh, without
running a pod). An `up` with nothing changed on healthy nodes is a no-op.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Optional

import pulumi
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..config import one_setting
from ..model import StepContext, StepDef, StepResult
from ..names import GCU_RESOURCE, GCUSHARE_RESOURCE, SELFCHECK
from ..node.runtime_host import RUNTIME_NAME as RUNTIME_CLASS
from ..spec import DNS1123_LABEL, PULL_POLICIES, reference_problem
from .gcu_nodes import KEY as GCU_NODES

if TYPE_CHECKING:
    from ..providers.node_validation import GcuValidationInputs

KEY = "validation"
# The plugin that advertises what is validated, and the resource it advertises.
PLUGINS = {"devicePlugin": GCU_RESOURCE, "gcusharePlugin": GCUSHARE_RESOURCE}
# What a GCU pod depends on besides the plugin: a change to their images or env validates again.
UNDERNEATH = ("driver", "toolkit")
# The toolkit's image carries the default command (images/toolkit/gcu-selfcheck.sh).
IMAGE_FROM = "toolkit"


class ValidationOptions(BaseModel):
    """`gcu-stack:validation`: the post-deploy check that GCUs are schedulable on every GCU node."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    # fail: `pulumi up` fails naming the nodes; warn: it succeeds, warns and reports them.
    mode: Literal["fail", "warn"] = "fail"
    # How long each node may take to advertise the resource in status.allocatable.
    timeout_seconds: int = Field(120, alias="timeoutSeconds", ge=1, le=3600)
    # Run a pod requesting one GCU on the nodes (all, or `sampleSize` of them).
    workload: bool = True
    sample_size: int = Field(0, alias="sampleSize", ge=0)  # 0: every node
    parallel: int = Field(10, ge=1, le=100)  # workload pods at once
    workload_timeout_seconds: int = Field(180, alias="workloadTimeoutSeconds", ge=5, le=3600)
    # Default: the toolkit's image (which ships images/toolkit/gcu-selfcheck.sh) and its pull policy.
    image: Optional[str] = Field(None, min_length=1)
    image_pull_policy: Optional[Literal[PULL_POLICIES]] = Field(None, alias="imagePullPolicy")
    command: list[str] = Field(default_factory=lambda: [SELFCHECK], min_length=1)
    # Used on nodes whose runtime is not docker; "" never sets one.
    runtime_class_name: str = Field(RUNTIME_CLASS, alias="runtimeClassName")
    # Default: the plugin's namespace.
    namespace: Optional[str] = Field(None, pattern=DNS1123_LABEL.pattern, max_length=63)
    # Any new value validates again on the next `pulumi up`.
    trigger: str = ""

    @field_validator("image")
    @classmethod
    def _image(cls, value: Optional[str]) -> Optional[str]:
        problem = value and reference_problem(value)
        if problem:
            raise ValueError(f"{value!r} is not an image reference: {problem}")
        return value

    @field_validator("runtime_class_name")
    @classmethod
    def _name(cls, value: str) -> str:
        import re

        if value and not re.match(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", value):
            raise ValueError(f"{value!r} is not a RuntimeClass name")
        return value


ValidationSettings = one_setting("ValidationSettings", "validation", "validation", ValidationOptions)


def revision(deployed: tuple, plugin_key: str) -> dict:
    """What a GCU pod on a node depends on: the images and environment the driver's, toolkit's and
    plugin's containers run with (resolved values, so a new optional blueprint field changes nothing)."""
    return {
        c.definition.key: [{"image": x.image, "env": [list(e) for e in x.env]} for x in c.containers]
        for c in deployed
        if c.definition.key in (*UNDERNEATH, plugin_key)
    }


def _report(options: ValidationOptions, resource: str, values: list, owner: Optional[pulumi.Resource] = None) -> dict:
    passed, results, skipped, failures, validated_at = values
    failures = list(failures or [])
    if failures:
        # In warn mode the resource succeeded: say so where the operator looks, naming the nodes.
        pulumi.log.warn("GCU validation failed on " + "; ".join(failures), resource=owner)
    return {
        "enabled": options.enabled,
        "mode": options.mode,
        "resource": resource,
        "passed": bool(passed),
        "validatedAt": validated_at,
        "nodes": dict(results or {}),
        "skipped": dict(skipped or {}),
        "failures": failures,
    }


def validation_inputs(options: ValidationOptions, context: StepContext, warn: bool = True) -> Optional[GcuValidationInputs]:
    """What GcuValidation checks, for the stack's plugin; None without a device plugin (nothing to validate).

    The driver's upgrade validates each node with the same inputs before uncordoning it.
    """
    from ..providers.node_validation import GcuValidationInputs  # engine code: only when declaring

    deployed = {c.definition.key: c for c in context.deployed}
    plugins = [k for k in PLUGINS if k in deployed]  # the two exclude each other
    if not plugins:
        return None
    (plugin_key,) = plugins
    plugin = deployed[plugin_key]
    (workload,) = plugin.workloads
    source = deployed.get(IMAGE_FROM)
    image = options.image or (source.containers[0].image if source is not None else None)
    pull_policy = options.image_pull_policy or (
        source.containers[0].pull_policy if source is not None and not options.image else "IfNotPresent"
    )
    run_workload = options.workload and image is not None
    if warn and options.enabled and options.workload and image is None:
        pulumi.log.warn(
            "gcu-stack:validation: the toolkit is not deployed, so there is no image for the workload pod; "
            "only capacity is validated (set gcu-stack:validation image, or workload: false)"
        )
    return GcuValidationInputs(
        nodes=context.results[GCU_NODES].resource.nodes,
        plugin=plugin_key,
        pluginName=workload.name,
        pluginNamespace=plugin.namespace,
        resource=PLUGINS[plugin_key],
        nodeSelector=dict(workload.node_selector or {}),
        nodeNames=list(getattr(plugin.spec, "gcushare_nodes", None) or []),
        enabled=options.enabled,
        mode=options.mode,
        timeoutSeconds=options.timeout_seconds,
        workload=run_workload,
        sampleSize=options.sample_size,
        parallel=options.parallel,
        workloadTimeoutSeconds=options.workload_timeout_seconds,
        image=image if run_workload else None,
        imagePullPolicy=pull_policy,
        command=list(options.command),
        runtimeClassName=options.runtime_class_name,
        namespace=options.namespace or plugin.namespace,
        instance=context.instance,
        revision=revision(context.deployed, plugin_key),
        trigger=options.trigger,
        kubeconfig=context.cluster.kubeconfig,
        context=context.cluster.context,
        clusterUid=context.cluster.uid,
    )


def declare(context: StepContext) -> StepResult:
    from ..providers.node_validation import GcuValidation  # engine code: only when declaring

    options: ValidationOptions = context.settings.validation
    inputs = validation_inputs(options, context)
    plugin_key = inputs.plugin
    resource = GcuValidation(
        "gcu-validation",
        inputs,
        pulumi.ResourceOptions(parent=context.parent, depends_on=context.after or None, provider=context.host_provider),
    )
    report = pulumi.Output.all(resource.passed, resource.results, resource.skipped, resource.failures, resource.validatedAt)
    return StepResult(
        resource=resource,
        # Running means validated: a node that failed (warn mode) keeps the phase from Running.
        done=resource.passed.apply(lambda passed: bool(passed) or not options.enabled),
        outputs={"validation": report.apply(lambda values: _report(options, PLUGINS[plugin_key], values, resource))},
    )


VALIDATION = StepDef(
    key=KEY,
    # After the plugin and the node agents that follow it: the last link of the chain for GCU nodes.
    after=("devicePlugin", "gcusharePlugin", "exporter", "gfd", "gcushareScheduler"),
    declare=declare,
    settings=ValidationSettings,
    with_any=tuple(PLUGINS),
    # Nothing validated without a device plugin: the output says so.
    empty_outputs=(("validation", None),),
)
