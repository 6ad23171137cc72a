"""NfdLabels (pulumi-python:dynamic/gcu:NfdLabels): what Node Feature Discovery put on the nodes, taken off again.

NFD's master labels nodes and never unlabels them when it is removed (upstream runs `nfd-master -prune` for that).
The NFD component's workloads wait for this resource, so `pulumi destroy` deletes it after them: with no master left
to label again, its delete removes from every node the labels NFD's annotation lists as its own and NFD's
annotations. Labels NFD did not list (an operator's, the stack's own) stay.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from pulumi.dynamic import CreateResult, DiffResult, ResourceProvider, UpdateResult

from ..names import NFD_ANNOTATION_PREFIX, NFD_LABEL_NS, NFD_LABELS_ANNOTATION
from .bundled import Bundled, bundled_diff, changed_inputs, engine_log, inputs_of
from .cluster import checked_api, list_nodes
from .engine_watch import engine_watched


@dataclass
class NfdLabelsInputs:
    kubeconfig: Any = None  # path or content (a secret Output when content)
    context: Optional[str] = None
    clusterUid: Any = None  # the stack's cluster (ClusterGuard's kube-system UID): any other is refused


INPUTS = tuple(NfdLabelsInputs.__dataclass_fields__)


def nfd_labels_of(annotations: dict[str, str]) -> list[str]:
    """The labels NFD's annotation names as its own, with their namespace."""
    names = [n.strip() for n in (annotations.get(NFD_LABELS_ANNOTATION) or "").split(",") if n.strip()]
    return [n if "/" in n else NFD_LABEL_NS + n for n in names]


def prune_patch(node: dict) -> Optional[dict]:
    """The merge patch that takes NFD's labels and annotations off one node; None when it carries none."""
    meta = node["metadata"]
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    drop_labels = [k for k in nfd_labels_of(annotations) if k in labels]
    drop_annotations = [k for k in annotations if k.startswith(NFD_ANNOTATION_PREFIX)]
    if not drop_labels and not drop_annotations:
        return None
    return {"metadata": {"resourceVersion": meta["resourceVersion"],   # a concurrent writer: a 409, tried again
                         "labels": dict.fromkeys(drop_labels), "annotations": dict.fromkeys(drop_annotations)}}


def prune(props: dict, attempts: int = 5) -> int:
    """Take NFD's labels off every node; returns how many nodes were patched."""
    from kubernetes.client.exceptions import ApiException

    api = checked_api(props)
    patched = 0
    for _ in range(attempts):
        conflicts = 0
        for node in list_nodes(api):
            patch = prune_patch(node)
            if patch is None:
                continue
            try:
                api.patch_node(node["metadata"]["name"], patch, _content_type="application/merge-patch+json",
                               _preload_content=False)
                patched += 1
            except ApiException as error:
                if error.status == 409:
                    conflicts += 1
                elif error.status != 404:
                    raise
        if not conflicts:
            return patched
    raise RuntimeError(f"NFD's labels: {conflicts} node(s) kept changing under the patch; run `pulumi destroy` again")


class NfdLabelsProvider(ResourceProvider):
    serialize_as_secret_always = False

    def create(self, props: dict) -> CreateResult:
        return CreateResult("nfd-labels", inputs_of(props, INPUTS))

    def diff(self, _id: str, olds: dict, news: dict) -> DiffResult:
        return bundled_diff(olds, news, changed_inputs(olds, news, INPUTS))

    def update(self, _id: str, _olds: dict, news: dict) -> UpdateResult:
        return UpdateResult(inputs_of(news, INPUTS))

    @engine_watched
    def delete(self, _id: str, props: dict) -> None:
        patched = prune(props)
        if patched:
            engine_log(f"NFD's labels and annotations taken off {patched} node(s)")


class NfdLabels(Bundled, module="gcu", name="NfdLabels"):
    """No outputs of its own: its delete is what it is for."""

    PROVIDER = NfdLabelsProvider
    OUTPUTS = ()
