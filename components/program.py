"""The Pulumi program: validate the blueprint, build the stack, export its status."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

from .declare.stack import GcuStack, StackArgs
from .declare.status import status_outputs
from .errors import BlueprintError
from .kube_target import pin
from .model import ClusterAccess
from .plan import checks
from .settings import StackSettings, load_settings, pulumi_config


def pinned_access(settings: StackSettings) -> ClusterAccess:
    """The stack's kubeconfig and context, the ambient ones made explicit (components/kube_target.py)."""
    options = settings.options
    kubeconfig, context = pin(options.kubeconfig, options.kube_context)
    # A kubeconfig given inline is a credential: keep it out of state in plain text.
    if kubeconfig and "\n" in kubeconfig:
        kubeconfig = pulumi.Output.secret(kubeconfig)
    return ClusterAccess(kubeconfig=kubeconfig, context=context)


def cluster_uid(settings: StackSettings, recorded: pulumi.Output) -> pulumi.Input[str]:
    """The cluster's UID as the Kubernetes provider (its clusterIdentifier) and every bundled resource (clusterUid) get
    it: the guard's (`recorded`). In a preview that output is unknown whenever the guard changes (the same cluster
    through another kubeconfig, say), and an unknown UID previews every one of them replaced; so a preview reads the
    UID of the cluster the pinned context reaches itself (another cluster's is refused by the guard all the same)."""
    if not pulumi.runtime.is_dry_run():
        return recorded
    from .providers.cluster import core_api, identify

    kubeconfig, context = pin(settings.options.kubeconfig, settings.options.kube_context)
    try:
        return identify(core_api(kubeconfig, context, pool_size=1), timeout=10)["uid"]
    except Exception:  # noqa: BLE001 - unreachable: the guard says why and stops the preview
        return recorded


def main(project_dir: Optional[Path] = None) -> GcuStack:
    try:
        config, secret_keys = pulumi_config()
        settings = load_settings(config, project_dir or Path.cwd(), secret_keys)
        plan = checks.check(settings)
    except BlueprintError as error:
        # A clean message for `pulumi preview`, before any resource is declared.
        raise pulumi.RunError(str(error)) from None
    from .providers.cluster_guard import ClusterGuard, ClusterGuardInputs

    access = pinned_access(settings)
    # The recorded cluster, checked before anything else is touched; its own explicit provider, since the default
    # one would keep the whole stack config in state.
    guard_provider = pulumi.ProviderResource("pulumi-python", "gcu-cluster", {})
    guard = ClusterGuard(
        "cluster",
        ClusterGuardInputs(kubeconfig=access.kubeconfig, context=access.context, adopt=settings.options.adopt_cluster),
        pulumi.ResourceOptions(provider=guard_provider),
    )
    uid = cluster_uid(settings, guard.uid)
    access = ClusterAccess(kubeconfig=access.kubeconfig, context=access.context, uid=uid)
    # The provider is the cluster's, not its kubeconfig's: the same cluster reached another way (its new address, a
    # new kubeconfig, in-cluster credentials) updates the provider, where a changed server would replace it and with
    # it every object; only another cluster (adoptCluster) replaces them.
    kubernetes = k8s.Provider(
        "k8s", kubeconfig=access.kubeconfig, context=access.context, cluster_identifier=uid,
        opts=pulumi.ResourceOptions(depends_on=[guard]),
    )
    resource = settings.resource
    stack = GcuStack(resource.metadata.name, StackArgs(plan, access), pulumi.ResourceOptions(providers=[kubernetes]))
    # Deleted first by `pulumi destroy` (it depends on everything): the cluster is checked before any delete.
    ClusterGuard(
        "cluster-check",
        ClusterGuardInputs(kubeconfig=access.kubeconfig, context=access.context, clusterUid=uid),
        pulumi.ResourceOptions(provider=guard_provider, depends_on=[stack]),
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
    pulumi.export("cluster", {"server": guard.server, "uid": guard.uid, "context": access.context})
    return stack
