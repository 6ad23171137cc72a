"""The Pulumi program: validate the blueprint, build the stack, export its status."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

from . import checks
from .errors import BlueprintError
from .extender import extender_outputs
from .settings import StackSettings, load_settings, pulumi_config
from .stack import GcuStack
from .status import status_outputs


def kubernetes_provider(settings: StackSettings) -> k8s.Provider:
    options = settings.options
    # Without explicit settings the provider uses the ambient kube context (KUBECONFIG or ~/.kube/config).
    return k8s.Provider("k8s", kubeconfig=options.kubeconfig, context=options.kube_context)


def main(project_dir: Optional[Path] = None) -> GcuStack:
    try:
        config, secret_keys = pulumi_config()
        settings = load_settings(config, project_dir or Path.cwd(), secret_keys)
        checks.check(settings)
    except BlueprintError as error:
        # A clean message for `pulumi preview`, before any resource is declared.
        raise pulumi.RunError(str(error)) from None
    stack = GcuStack(settings, kubernetes_provider(settings))
    gcu_nodes = stack.gcu_nodes.nodes if stack.gcu_nodes is not None else []
    outputs = status_outputs(stack.components, gcu_nodes, settings.resource.metadata.generation)
    extender = stack.component("gcushareScheduler")
    if extender is not None:
        outputs["gcushareSchedulerExtender"] = extender_outputs(extender.resolved, settings.options)
    for name, value in outputs.items():
        pulumi.export(name, value)
    return stack
