"""The Pulumi program: validate the blueprint, build the stack, export its status."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

from .declare.stack import GcuStack, StackArgs
from .declare.status import status_outputs
from .errors import BlueprintError
from .plan import checks
from .settings import StackSettings, load_settings, pulumi_config


def kubernetes_provider(settings: StackSettings) -> k8s.Provider:
    options = settings.options
    # Without explicit settings the provider uses the ambient kube context (KUBECONFIG or ~/.kube/config).
    return k8s.Provider("k8s", kubeconfig=options.kubeconfig, context=options.kube_context)


def main(project_dir: Optional[Path] = None) -> GcuStack:
    try:
        config, secret_keys = pulumi_config()
        settings = load_settings(config, project_dir or Path.cwd(), secret_keys)
        plan = checks.check(settings)
    except BlueprintError as error:
        # A clean message for `pulumi preview`, before any resource is declared.
        raise pulumi.RunError(str(error)) from None
    resource = settings.resource
    stack = GcuStack(
        resource.metadata.name, StackArgs(plan), pulumi.ResourceOptions(providers=[kubernetes_provider(settings)])
    )
    outputs = status_outputs(
        [c.status for c in stack.components],
        stack.outputs(),
        resource.metadata.generation,
        {key: step.done for key, step in stack.steps.items()},
        [step.condition for step in stack.step_results() if step.condition is not None],
    )
    for name, value in outputs.items():
        pulumi.export(name, value)
    return stack
