"""NFD's labels, taken off the nodes when NFD goes (components/providers/nfd_labels.py).

Declared by the NFD component before its workloads, which wait for it: destroy deletes it after them.
"""

from __future__ import annotations

import pulumi

from ..model import StepContext, StepDef, StepResult


def declare(context: StepContext) -> StepResult:
    from ..providers.nfd_labels import NfdLabels, NfdLabelsInputs  # engine code: only when declaring

    resource = NfdLabels(
        "nfd-labels",
        NfdLabelsInputs(kubeconfig=context.cluster.kubeconfig, context=context.cluster.context,
                        clusterUid=context.cluster.uid),
        pulumi.ResourceOptions(parent=context.parent, depends_on=context.after or None, provider=context.host_provider),
    )
    return StepResult(resource=resource, done=pulumi.Output.from_input(True))


NFD_LABELS = StepDef(key="nfdLabels", after=(), declare=declare)
